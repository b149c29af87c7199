"""A cluster run's outputs that stay on a worker's node: each unit's annotated MP4 and, with a
depth model, its depth MP4 and map folder. A worker writes each attempt's under names of its
own (`cam.attempt2.mp4`, `cam.depth.attempt2.mp4`, `cam.attempt2.depth/`; `.partial` until
that attempt ends), every frame of the source, so a retry's files are whole. The driver, the
only one that knows which attempt counts, gives that attempt's files the run's names
(`cam.mp4`, `cam.depth.mp4`, `cam.depth/`) where it can see them — a shared `--out`, or the
embedded Ray on this machine — and removes the other attempts'; files on another node's disk
stay there, listed in `manifest.json` with their node."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from visionrt.config import RunConfig
from visionrt.distributed.units import Group
from visionrt.sinks import Sink, VideoSink
from visionrt.sinks.base import finalize
from visionrt.types import FrameResult

MANIFEST = "manifest.json"
_ATTEMPT = re.compile(r"\.attempt\d+(?=\.[^.]*$)")  # before the last suffix


def attempt_path(final: Path, attempt: int) -> Path:
    """Where an attempt writes what the run names `final` (the suffix kept: muxers read it)."""
    return final.with_name(f"{final.stem}.attempt{attempt}{final.suffix}")


def final_path(path: Path) -> Path:
    return path.with_name(_ATTEMPT.sub("", path.name, count=1))


def writes_every_frame(cfg: RunConfig) -> bool:
    """Whether a worker writes files with every frame of a source (a retry then runs it whole)."""
    return cfg.output.video or bool(cfg.depth.model and (cfg.depth.video or cfg.depth.maps))


class AttemptOutputs:
    """A worker's files for one group, into `output.dir` on its own node: per unit, those the
    run asks for (`depth_on`: the units' places the depth model runs on)."""

    def __init__(
        self, units: Group, fps: Sequence[float], cfg: RunConfig, depth_on: Sequence[int]
    ) -> None:
        from visionrt.sinks.depth import DepthMapSink, DepthVideoSink

        out, output, depth = Path(cfg.output.dir), cfg.output, cfg.depth
        self.sinks: list[list[Sink]] = [[] for _ in units]
        for i, (unit, rate) in enumerate(zip(units, fps, strict=True)):
            sinks, attempt = self.sinks[i], unit.attempt
            if output.video:
                video = attempt_path(out / f"{unit.name}.mp4", attempt)
                sinks.append(
                    VideoSink(video, rate, output.codec, i, output.preset, output.draw_regions)
                )
            if not (depth.model and i in depth_on):
                continue
            if depth.video:
                video = attempt_path(out / f"{unit.name}.depth.mp4", attempt)
                sinks.append(DepthVideoSink(video, rate, output.codec, i, output.preset))
            if depth.maps:
                maps = attempt_path(out / f"{unit.name}.depth", attempt)
                sinks.append(DepthMapSink(maps, depth.maps, i))

    def write(self, result: FrameResult) -> None:
        for sink in self.sinks[result.frame.source_id]:
            sink.write(result)

    def close(self, complete: bool) -> list[list[str]]:
        """Each unit's files (finalized only when `complete`)."""
        return [
            [str(path) for sink in sinks for path in sink.close(complete=complete)]
            for sinks in self.sinks
        ]


def finalize_outputs(
    out: Path, finals: Mapping[str, Mapping[str, Any]], live: frozenset[str] = frozenset()
) -> list[str]:
    """For each source (`finals`: its last attempt's summary, with `outputs` and the worker's
    `node`), its files under the run's names when this machine sees them, else listed in
    `out/manifest.json`. Returns the paths written here. A `live` stream's earlier attempts
    saw frames the last one did not: their (partial) files are kept."""
    written: list[str] = []
    elsewhere: dict[str, dict[str, Any]] = {}
    for name, summary in finals.items():
        node = str((summary.get("worker") or {}).get("node", ""))
        for path in (Path(p) for p in summary.get("outputs", [])):
            if not path.exists():  # on the worker's node only
                elsewhere.setdefault(name, {"node": node, "files": []})["files"].append(str(path))
                continue
            final = finalize(path, final_path(path))
            written.append(str(final))
            if name not in live:
                _remove_other_attempts(final)
    if elsewhere:
        manifest = out / MANIFEST
        manifest.write_text(json.dumps(elsewhere, indent=1), encoding="utf-8")
        written.append(str(manifest))
    return written


def _remove_other_attempts(final: Path) -> None:
    """Files of attempts that did not count: a dead worker's partial ones, or those an actor
    given up for dead finished anyway (they repeat the ones that count)."""
    stem, suffix = final.stem, final.suffix
    pattern = re.compile(rf"{re.escape(stem)}\.attempt\d+(\.partial)?{re.escape(suffix)}")
    for path in final.parent.glob(f"{glob_escape(stem)}.attempt*{glob_escape(suffix)}"):
        if not pattern.fullmatch(path.name):
            continue
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)


def glob_escape(text: str) -> str:
    return re.sub(r"([*?\[])", r"[\1]", text)
