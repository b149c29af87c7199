"""`tune --depth`'s last step: on how many frames the depth model must run (`depth.every`).

Depth on 1 frame in N gives the frames between their source's latest map. What that costs is
measured where it shows: the distance of each detector box on a frame, taken from the map held
since (up to N − 1 frames old), against the same box's distance on the frame's own map, both
from the chosen depth configuration on consecutive frames of the user's video. The plan keeps
the largest N whose 90th percentile of that relative error is within the budget (N = 1 when
none is, or when no box was found to measure on). A whole-map AbsRel would hide this error: it
is largest exactly where things move, at the boxes."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from visionrt.backends import BackendOptions
from visionrt.errors import Interrupted
from visionrt.fuse.depth import box_distance
from visionrt.types import DepthMap, Detections

TRIED = (2, 3, 4, 5)  # at 30 FPS, a map at most 1/6 s old
FRAMES = 60  # consecutive frames measured: every N tried holds maps on 48 or more of them
DEFAULT_MAX_HELD_ERROR = 0.10  # p90 of |held − own| / |own| at the boxes


@dataclass(frozen=True, slots=True)
class HeldError:
    """Depth on 1 frame in `every`: the relative distance error at the boxes of the frames
    holding an earlier map (`boxes` of them measured)."""

    every: int
    median: float
    p90: float
    boxes: int

    def as_dict(self) -> dict[str, float | int]:
        return {"every": self.every, "median": round(self.median, 4),
                "p90": round(self.p90, 4), "boxes": self.boxes}  # fmt: skip


def held_errors(
    frames: Iterable[tuple[DepthMap, Detections]], tried: Sequence[int] = TRIED
) -> list[HeldError]:
    """For each N in `tried`, over consecutive `frames` (each its own map and its boxes): the
    error of the distances a frame gets from the map of the last frame depth ran on (its index
    rounded down to a multiple of N) against those from its own map."""
    recent: deque[DepthMap] = deque(maxlen=max(tried))  # the maps a held frame may take
    errors: dict[int, list[float]] = {every: [] for every in tried}
    for index, (own, boxes) in enumerate(frames):
        recent.append(own)
        if len(boxes) == 0:
            continue
        mine = box_distance(own, boxes.xyxy)
        for every in tried:
            age = index % every
            if age == 0:  # depth runs on this frame
                continue
            held = box_distance(recent[-1 - age], boxes.xyxy)
            usable = np.isfinite(mine) & np.isfinite(held) & (mine != 0)
            errors[every].extend((np.abs(held - mine)[usable] / np.abs(mine[usable])).tolist())
    return [
        HeldError(every, float(np.median(found)), float(np.percentile(found, 90)), len(found))
        if found
        else HeldError(every, float("nan"), float("nan"), 0)
        for every, found in errors.items()
    ]


def choose_every(errors: Sequence[HeldError], max_error: float) -> tuple[int, str]:
    """The largest N, tried in increasing order, up to which every N held the budget; 1 when
    none did. With it, the reason the next N was not taken ("" when all were)."""
    if not max_error > 0:
        return 1, "held maps not allowed (budget 0)"
    chosen = 1
    for error in sorted(errors, key=lambda e: e.every):
        if error.boxes == 0:
            return chosen, "no detector box on the frames measured"
        if not error.p90 <= max_error:
            return chosen, f"1 in {error.every}: p90 {error.p90:.3f} > {max_error:g}"
        chosen = error.every
    return chosen, ""


def depth_and_boxes(
    video: Path,
    depth_model: Path,
    depth_backend: str,
    depth_options: BackendOptions,
    detector: Path,
    frames: int = FRAMES,
    stop: threading.Event | None = None,
) -> Iterator[tuple[DepthMap, Detections]]:
    """The first `frames` frames of `video`, each with its own map from the depth
    configuration (as a run makes it, at the frame's size) and the detector's boxes (ONNX
    Runtime FP32, the reference: where the boxes are, not how well they are found)."""
    from visionrt.bench.reference import detections_over
    from visionrt.sources import SourceOptions, open_source
    from visionrt.tasks.base import run_one
    from visionrt.tasks.depth import DepthTask
    from visionrt.tune.search import INTERRUPTED

    boxes = detections_over(video, detector, frames=frames)
    task = DepthTask(depth_model, depth_backend, depth_options)
    source = open_source(str(video), 0, SourceOptions(mode="file", max_frames=frames))
    try:
        buffer = task.new_buffer()
        for found, frame in zip(boxes, source.frames(), strict=False):
            if stop is not None and stop.is_set():
                raise Interrupted(INTERRUPTED)
            yield run_one(task, frame.image, buffer), found
    finally:
        source.close()
        task.close()
