"""A cluster run's outputs that stay on a worker's node: each unit's annotated MP4 and, with a
depth model, its depth MP4 and map folder. A worker writes each attempt's under names of its
own (`cam.attempt2.mp4`, `cam.depth.attempt2.mp4`, `cam.attempt2.depth/`; `.partial` until
that attempt ends), every frame of the source, so a retry's files are whole. The driver, the
only one that knows which attempt counts, gives that attempt's files the run's names
(`cam.mp4`, `cam.depth.mp4`, `cam.depth/`) where it can see them — a shared `--out`, or the
embedded Ray on this machine — and removes the other attempts'; files on another node's disk
stay there, listed in `manifest.json` with their node. A file split into frame ranges has a
part per range (`cam.part2.attempt1.mp4`): the driver joins the parts into the run's file
(packets copied), where it sees them all."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

from visionrt.config import RunConfig
from visionrt.distributed.units import Group
from visionrt.errors import SinkError
from visionrt.pipeline.output import close_sinks
from visionrt.pipeline.outputs import MANIFEST
from visionrt.sinks import Sink
from visionrt.sinks.base import finalize
from visionrt.sinks.files import SourceFiles
from visionrt.sinks.video import join_videos
from visionrt.types import FrameResult

_ATTEMPT = re.compile(r"\.attempt\d+(?=\.[^.]*$)")  # before the last suffix


def attempt_path(final: Path, attempt: int, part: int = 0) -> Path:
    """Where an attempt writes what the run names `final` (the suffix kept: muxers read it);
    of range `part` of a split file (0: the whole file)."""
    stem = f"{final.stem}.part{part}" if part else final.stem
    return final.with_name(f"{stem}.attempt{attempt}{final.suffix}")


def final_path(path: Path) -> Path:
    """The name an attempt's file gets: its range's (`cam.part2.mp4`), or the run's."""
    return path.with_name(_ATTEMPT.sub("", path.name, count=1))


def whole_path(path: Path, part: int) -> Path:
    """The run's name for range `part`'s file (`cam.part2.mp4` → `cam.mp4`; 0: `path`). Only
    the part this run added goes: a file of its own named `rec.part2.mp4` keeps its name."""
    token = f".part{part}"
    if not part or not path.stem.endswith(token):
        return path
    return path.with_name(f"{path.stem[: -len(token)]}{path.suffix}")


def writes_every_frame(cfg: RunConfig) -> bool:
    """Whether a worker writes files with every frame of a source (a retry then runs it whole)."""
    return bool(worker_files(cfg).suffixes(depth=True))


def worker_files(cfg: RunConfig) -> SourceFiles:
    """The files a worker writes (the MP4s and depth maps, which need the frames); the driver
    writes the tables from the lines it commits (`distributed.run`)."""
    return replace(cfg.source_files(), mot=False, coco=False, csv=False)


def driver_files(cfg: RunConfig) -> SourceFiles:
    """The files the driver writes from the committed lines: the tables, none with frames."""
    return replace(cfg.source_files(), video=False, depth_video=False, depth_maps="")


class AttemptOutputs(Sink):
    """A worker's files for one group, into `output.dir` on its own node: per unit, those the
    run asks for (`depth_on`: the units' places the depth model runs on). One sink for the
    pipeline's output stage; once closed, `by_unit` lists each unit's files."""

    def __init__(
        self, units: Group, fps: Sequence[float], cfg: RunConfig, depth_on: Sequence[int]
    ) -> None:
        out, files = Path(cfg.output.dir), worker_files(cfg)
        self.sinks: list[list[Sink]] = []
        for i, (unit, rate) in enumerate(zip(units, fps, strict=True)):
            path = partial(_attempt_file, out, unit.name, unit.attempt, unit.part)
            self.sinks.append(files.sinks(path, i, rate, i in depth_on))
        self.by_unit: list[list[str]] = [[] for _ in units]

    def write(self, result: FrameResult) -> None:
        for sink in self.sinks[result.frame.source_id]:
            sink.write(result)

    def close(self, complete: bool = True) -> list[Path]:
        """Every unit's files, finalized only when `complete` (each unit's in `by_unit`); the
        first error closing one is raised once every one is closed."""
        closed: list[Path] = []
        first: SinkError | None = None
        for i, sinks in enumerate(self.sinks):
            paths, error = close_sinks(sinks, complete=complete)
            self.by_unit[i] = [str(path) for path in paths]
            closed += paths
            first = first or error
        if first is not None:
            raise first
        return closed


def _attempt_file(out: Path, name: str, attempt: int, part: int, suffix: str) -> Path:
    return attempt_path(out / f"{name}{suffix}", attempt, part)


def finalize_outputs(
    out: Path,
    finals: Mapping[str, Sequence[Mapping[str, Any]]],
    live: frozenset[str] = frozenset(),
) -> list[str]:
    """For each source (`finals`: the last attempt's summary of each of its units, in frame
    order, with `outputs`, the worker's `node` and the unit's range `part`), its files under
    the run's names when this machine sees them (a split file's parts joined), else listed in
    `out/manifest.json`. Returns the paths written here. A `live` stream's earlier attempts
    saw frames the last one did not: their (partial) files are kept."""
    written: list[str] = []
    elsewhere: dict[str, dict[str, Any]] = {}
    for name, summaries in finals.items():
        targets: dict[Path, list[tuple[Path, str]]] = {}  # the run's file → its parts
        for summary in summaries:
            node = str((summary.get("worker") or {}).get("node", ""))
            for path in (Path(p) for p in summary.get("outputs", [])):
                target = whole_path(final_path(path), summary.get("part", 0))
                targets.setdefault(target, []).append((path, node))
        for target, parts in targets.items():
            away = [(path, node) for path, node in parts if not path.exists()]
            if len(parts) == 1 and not away:
                final = finalize(parts[0][0], target)
            elif not away:  # every range's part is here: one file
                final = _joined(target, [path for path, _ in parts])
            else:  # on the workers' nodes only (those here keep their range's name)
                listed = elsewhere.setdefault(name, {"node": away[0][1], "files": []})
                for path, node in parts:
                    if path.exists():
                        path = finalize(path, final_path(path))
                        written.append(str(path))
                    listed["files"].append(str(path))
                    if len(parts) > 1:
                        listed.setdefault("nodes", []).append(node)
                continue
            written.append(str(final))
            if name not in live:
                _remove_other_attempts(final)
    if elsewhere:
        manifest = out / MANIFEST
        manifest.write_text(json.dumps(elsewhere, indent=1), encoding="utf-8")
        written.append(str(manifest))
    return written


def _joined(final: Path, parts: list[Path]) -> Path:
    """A split file's ranges' videos as the run's one file; the parts and the other attempts'
    files of each range go."""
    if any(part.is_dir() for part in parts):  # depth maps: files are never split with them
        raise ValueError(f"cannot join folders into {final}")
    joined = join_videos(parts, final)
    for part in parts:
        part.unlink(missing_ok=True)
        _remove_other_attempts(final_path(part))
    return joined


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
