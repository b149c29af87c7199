"""A long video file as frame ranges that several workers run at once: where to cut it (at
keyframes, into parts of about equal length, when it is longer than its share of the workers),
and on the driver the order its ranges' frames are written in: a range's frames wait, spooled
to disk, until every range before it is written."""

from __future__ import annotations

import math
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from visionrt.distributed.units import WorkUnit
from visionrt.sources.frame_index import FrameIndex, index_frames

if TYPE_CHECKING:  # the coordinator holds ranges without loading the configuration's stages
    from visionrt.config import RunConfig


def split_reason(cfg: RunConfig) -> str:
    """Why the files of a run with `cfg` run whole ("" when they may be split): a range would
    start without what the frames before it left behind (tracks, the motion reference, depth
    smoothing), or its worker would write a folder of depth maps of its own frames only (a
    range's videos are joined)."""
    options = cfg.pipeline
    if not cfg.cluster.range_frames:
        return "cluster.range_frames is 0"
    if options.tracking.tracker_runs:
        return "tracks run through a file (--track, or a plan's detect-every-N)"
    if options.motion.mode != "off":
        return "motion gating compares each frame with the ones before (--motion)"
    if cfg.depth.model and cfg.depth.smoothing:
        return "depth smoothing blends each map with the ones before"
    if cfg.depth.model and cfg.depth.maps:
        return "depth maps are written per source whole (depth.maps)"
    if cfg.source.start_frame or cfg.source.end_frame:
        return "source.start_frame/end_frame choose the frames already"
    return ""


def split_units(
    units: Sequence[WorkUnit], frames: Sequence[int], workers: int, cfg: RunConfig
) -> tuple[list[WorkUnit], list[str]]:
    """`units` with each file at least 1.5 times its share of `workers` (`frames`: each unit's
    frame count, 0 for a live one or one not known) split at keyframes into ranges of about
    that share, and at least `cluster.range_frames`, numbered again; and a line for each file
    split or left whole."""
    size = max(cfg.cluster.range_frames, math.ceil(sum(frames) / max(1, workers)))
    parts = [0 if u.live else round(n / size) for u, n in zip(units, frames, strict=True)]
    long = [u.name for u, wanted in zip(units, parts, strict=True) if wanted > 1]
    reason = split_reason(cfg) if long else ""
    if not long or reason:
        return list(units), [f"{name}: not split into frame ranges: {reason}" for name in long]
    out: list[WorkUnit] = []
    notes: list[str] = []
    for unit, count, wanted in zip(units, frames, parts, strict=True):
        if wanted < 2:
            out.append(unit)
            continue
        index = index_frames(unit.spec)
        if isinstance(index, str):
            notes.append(f"{unit.name}: not split into frame ranges: {index}")
            out.append(unit)
            continue
        starts = cut_points(index, min(count, len(index.pts)), wanted)
        if len(starts) < 2:
            out.append(unit)
            continue
        ends = [*starts[1:], None]
        out += [
            replace(unit, start_frame=a, first_frame=a, end_frame=b, part=i)
            for i, (a, b) in enumerate(zip(starts, ends, strict=True), 1)
        ]
        notes.append(f"{unit.name}: {len(starts)} frame ranges from frames {starts}")
    return [replace(unit, unit_id=i) for i, unit in enumerate(out)], notes


def cut_points(index: FrameIndex, frames: int, parts: int) -> list[int]:
    """The first frames of up to `parts` ranges over `frames` frames: 0, then the keyframe
    nearest each even cut (fewer ranges where keyframes are sparser than the cuts)."""
    keys = [k for k in index.keyframes() if 0 < k < frames]
    starts = [0]
    for i in range(1, parts):
        if not keys:
            break
        cut = i * frames / parts
        key = min(keys, key=lambda k: abs(k - cut))
        if key > starts[-1]:
            starts.append(key)
    return starts


class Spool:
    """Frames held back, in order, in an unnamed temporary file (gone with the process, so
    nothing half-written is left that looks like an output)."""

    def __init__(self, folder: Path | None = None) -> None:
        if folder is not None:  # a run writing no JSONL may not have made its folder yet
            folder.mkdir(parents=True, exist_ok=True)
        # Open across calls: closed by close().
        self._file = tempfile.TemporaryFile("w+", encoding="utf-8", dir=folder)  # noqa: SIM115
        self.count = 0

    def add(self, frame: int, line: str) -> None:
        self._file.write(f"{frame}\t{line}\n")  # a JSON line holds no raw tab or newline
        self.count += 1

    def drain(self) -> Iterator[tuple[int, str]]:
        """Every frame held, in order; the spool is closed after."""
        try:
            self._file.seek(0)
            for raw in self._file:
                frame, line = raw.rstrip("\n").split("\t", 1)
                yield int(frame), line
        finally:
            self._file.close()


class SourceRanges:
    """One source's ranges (unit ids in frame order). The first range not yet done is written
    through; a later range's frames are held (`hold`) until every range before it is done."""

    def __init__(self, unit_ids: Sequence[int], folder: Path | None = None) -> None:
        self.order = list(unit_ids)
        self.folder = folder
        self.at = 0  # the range written through
        self.done: set[int] = set()
        self.spools: dict[int, Spool] = {}

    @property
    def held(self) -> int:
        return sum(spool.count for spool in self.spools.values())

    def holds(self, unit_id: int) -> bool:
        """Whether `unit_id`'s frames are held back now."""
        return unit_id != self.order[self.at]

    def hold(self, unit_id: int, frame: int, line: str) -> None:
        if unit_id not in self.spools:
            self.spools[unit_id] = Spool(self.folder)
        self.spools[unit_id].add(frame, line)

    def finish(self, unit_id: int) -> Iterator[tuple[int, str]]:
        """`unit_id` is done: the frames now due (those held by the ranges after it, up to the
        first one not done, whose later frames are then written through)."""
        self.done.add(unit_id)
        while self.order[self.at] in self.done and self.at + 1 < len(self.order):
            self.at += 1
            yield from self._drain(self.order[self.at])

    def rest(self) -> Iterator[tuple[int, str]]:
        """Every frame still held, in range order (a run that ends before its ranges do)."""
        for unit_id in self.order[self.at :]:
            yield from self._drain(unit_id)

    def _drain(self, unit_id: int) -> Iterator[tuple[int, str]]:
        spool = self.spools.pop(unit_id, None)
        if spool is not None:
            yield from spool.drain()
