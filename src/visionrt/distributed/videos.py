"""Annotated MP4s of a cluster run. A worker writes each attempt's video under a name of its
own (`cam.attempt2.mp4`; `.partial` until that attempt ends), every frame of the source, so a
retry's video is whole. The driver, the only one that knows which attempt counts, gives that
attempt's file the run's name (`cam.mp4`) where it can see it — a shared `--out`, or the
embedded Ray on this machine — and removes the other attempts' files; a video on another
node's disk stays there, listed in `manifest.json` with its node."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from visionrt.config import OutputOptions
from visionrt.distributed.units import Group
from visionrt.sinks import VideoSink
from visionrt.sinks.base import finalize
from visionrt.types import FrameResult

MANIFEST = "manifest.json"


def attempt_name(name: str, attempt: int) -> str:
    return f"{name}.attempt{attempt}.mp4"


class AttemptVideos:
    """A worker's videos for one group: one per unit, into `output.dir` on its own node."""

    def __init__(self, units: Group, fps: Sequence[float], output: OutputOptions) -> None:
        out = Path(output.dir)
        self.sinks = [
            VideoSink(
                out / attempt_name(unit.name, unit.attempt),
                rate,
                output.codec,
                source_id=i,
                preset=output.preset,
                draw_regions=output.draw_regions,
            )
            for i, (unit, rate) in enumerate(zip(units, fps, strict=True))
        ]

    def write(self, result: FrameResult) -> None:
        self.sinks[result.frame.source_id].write(result)

    def close(self, complete: bool) -> list[list[str]]:
        """Each unit's files (finalized only when `complete`)."""
        return [[str(p) for p in sink.close(complete=complete)] for sink in self.sinks]


def finalize_videos(
    out: Path, finals: Mapping[str, Mapping[str, Any]], live: frozenset[str] = frozenset()
) -> list[str]:
    """For each source (`finals`: its last attempt's summary, with `outputs` and the worker's
    `node`), its video under the run's name when this machine sees it, else listed in
    `out/manifest.json`. Returns the paths written here. A `live` stream's earlier attempts
    saw frames the last one did not: their (partial) files are kept."""
    written: list[str] = []
    elsewhere: dict[str, dict[str, Any]] = {}
    for name, summary in finals.items():
        files = [Path(p) for p in summary.get("outputs", [])]
        node = str((summary.get("worker") or {}).get("node", ""))
        for path in files:
            if not path.is_file():  # on the worker's node only
                elsewhere.setdefault(name, {"node": node, "files": []})["files"].append(str(path))
                continue
            final = finalize(path, path.with_name(f"{name}.mp4"))
            written.append(str(final))
            if name not in live:
                _remove_other_attempts(out, name)
    if elsewhere:
        manifest = out / MANIFEST
        manifest.write_text(json.dumps(elsewhere, indent=1), encoding="utf-8")
        written.append(str(manifest))
    return written


def _remove_other_attempts(out: Path, name: str) -> None:
    """Files of attempts that did not count: a dead worker's partial video, or a video an
    actor given up for dead finished anyway (it repeats the one that counts)."""
    pattern = re.compile(rf"{re.escape(name)}\.attempt\d+(\.partial)?\.mp4")
    for path in out.glob(f"{glob_escape(name)}.attempt*.mp4"):
        if pattern.fullmatch(path.name):
            path.unlink(missing_ok=True)


def glob_escape(text: str) -> str:
    return re.sub(r"([*?\[])", r"[\1]", text)
