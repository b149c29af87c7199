"""Motion gating as a fusion step: a frame no model ran on (nothing moved since) takes its source's
last results, and a frame the detector saw only in windows keeps the last boxes outside them, so
every later step (tracking, distances) and every sink sees a whole frame."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from visionrt.fuse.base import Fused
from visionrt.postprocess.nms import box_intersection
from visionrt.types import Detections

# A last box this much inside one window (a share of its area) was that window's to find again.
SEEN_SHARE = 0.95
# A last box overlapping a box found in the windows by this much of the smaller one is the same
# object, moved: the new box stands.
SAME_OBJECT = 0.5


class ReuseFuser:
    """One source's last results by task name: kept from each frame the models ran on, given to
    each frame they did not (`fused.reused`); on a frame seen in windows (`fused.windows`), the
    last boxes the windows did not look at join the windows' boxes. Runs first among a source's
    fusers."""

    def __init__(self, detector: str) -> None:
        self.detector = detector
        self._last: dict[str, Any] = {}

    def fuse(self, fused: Fused) -> None:
        if fused.reused:
            fused.results.update(self._last)
            if self.detector in self._last:
                fused.detections = self._last[self.detector]
            return
        last = self._last.get(self.detector)
        if fused.windows is not None and last is not None:
            outside = _outside(last.xyxy, fused.windows) & ~_found(last, fused.detections)
            fused.detections = Detections(
                np.concatenate([fused.detections.xyxy, last.xyxy[outside]]),
                np.concatenate([fused.detections.confidence, last.confidence[outside]]),
                np.concatenate([fused.detections.class_id, last.class_id[outside]]),
            )
            fused.results[self.detector] = fused.detections
        self._last.update(fused.results)


def _found(last: Detections, found: Detections) -> npt.NDArray[np.bool_]:
    """Which last boxes overlap a box of their class found in the windows (SAME_OBJECT)."""
    if len(last) == 0 or len(found) == 0:
        return np.zeros(len(last), np.bool_)
    smaller = np.minimum(_areas(last.xyxy)[:, None], _areas(found.xyxy)[None, :])
    overlap = box_intersection(last.xyxy, found.xyxy) / np.maximum(smaller, 1e-9)
    same_class = last.class_id[:, None] == found.class_id[None, :]
    return ((overlap >= SAME_OBJECT) & same_class).any(axis=1)


def _outside(
    xyxy: npt.NDArray[np.float32], windows: npt.NDArray[np.int32]
) -> npt.NDArray[np.bool_]:
    """Which boxes have less than SEEN_SHARE of their area inside any one window."""
    if len(xyxy) == 0:
        return np.zeros(0, np.bool_)
    inside = box_intersection(xyxy, windows).max(axis=1)
    return inside / np.maximum(_areas(xyxy), 1e-9) < SEEN_SHARE


def _areas(xyxy: npt.NDArray[np.floating]) -> npt.NDArray[np.float64]:
    return np.prod(np.clip(xyxy[:, 2:] - xyxy[:, :2], 0, None), axis=1, dtype=np.float64)


class SeenFuser:
    """Hands the boxes delivered on each frame (the tracks' when tracking) to `seen`: the region
    planner looks around them on the frames that follow. Runs last among a source's fusers."""

    def __init__(self, seen: Callable[[npt.NDArray[np.float32]], None]) -> None:
        self.seen = seen

    def fuse(self, fused: Fused) -> None:
        self.seen(fused.detections.xyxy)
