"""The tracking core both trackers share (ByteTrack-style `bytetrack.Tracker`, OC-SORT's
`ocsort.OcSortTracker` on top of it): live tracks as arrays, box conversion, and the
assignment of tracks to detections."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import numpy.typing as npt

F64 = npt.NDArray[np.float64]
Index = npt.NDArray[np.intp]

# Alpha-beta gains for constant velocity: ALPHA weighs the measured box against the predicted one;
# BETA = ALPHA² / (2 − ALPHA) is the Benedict–Bordner choice, which damps without overshoot.
ALPHA = 0.75
BETA = ALPHA**2 / (2.0 - ALPHA)
MIN_SIZE = 1.0  # pixels: a predicted box never shrinks below this when its size velocity is < 0


def __getattr__(name: str) -> Any:
    """`linear_sum_assignment`: scipy's, or None without scipy, imported at first use."""
    if name == "linear_sum_assignment":
        return _hungarian()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _hungarian() -> Callable[..., Any] | None:
    """scipy's Hungarian solver (not a core dependency: it comes with the openvino extra;
    greedy matching without it), imported when tracking first matches, not with every run:
    scipy.optimize takes 0.25 s to import."""
    if "linear_sum_assignment" not in globals():
        try:
            from scipy.optimize import linear_sum_assignment as solver
        except ImportError:  # pragma: no cover - depends on the environment
            solver = None
        globals()["linear_sum_assignment"] = solver
    return globals()["linear_sum_assignment"]


def match_boxes(iou: F64, threshold: float, optimal: bool = True) -> tuple[Index, Index]:
    """Pairs (rows, cols) with IoU ≥ `threshold`, each row and column used at most once: the
    assignment with the largest summed IoU (Hungarian, scipy) when `optimal` and scipy is
    installed, else greedy, best IoU first (the same pairs unless boxes overlap ambiguously)."""
    return assign(np.where(iou >= threshold, iou, 0.0), optimal)


def assign(weights: F64, optimal: bool = True) -> tuple[Index, Index]:
    """Pairs (rows, cols) of positive `weights` (R, C), each row and column used at most once,
    for the largest summed weight (Hungarian via scipy when `optimal`, else greedy, best first);
    a weight ≤ 0 forbids its pair."""
    gated = np.where(weights > 0, weights, 0.0)
    if not gated.any():
        return np.zeros((0,), np.intp), np.zeros((0,), np.intp)
    solver = _hungarian() if optimal else None
    if solver is not None:
        rows, cols = solver(gated, maximize=True)
        keep = gated[rows, cols] > 0
        return rows[keep].astype(np.intp), cols[keep].astype(np.intp)
    rows, cols = np.nonzero(gated)
    order = np.argsort(-gated[rows, cols], kind="stable")
    row_used = np.zeros(gated.shape[0], bool)
    col_used = np.zeros(gated.shape[1], bool)
    pairs = []
    for row, col in zip(rows[order].tolist(), cols[order].tolist(), strict=True):
        if not row_used[row] and not col_used[col]:
            row_used[row] = col_used[col] = True
            pairs.append((row, col))
    out = np.asarray(pairs, np.intp).reshape(-1, 2)
    return out[:, 0], out[:, 1]


def to_cxcywh(xyxy: F64) -> F64:
    return np.concatenate([(xyxy[:, :2] + xyxy[:, 2:]) / 2.0, xyxy[:, 2:] - xyxy[:, :2]], axis=1)


@dataclass(slots=True)
class Tracks:
    """Live tracks as a struct of arrays, in increasing id order. `box` (T, 4) is centre x, centre
    y, width, height in pixels at time `at` (T,) seconds; `velocity` (T, 4) is its rate in
    pixels/second. `seen` is when the detector last saw the track, `hits` how often, `matched` the
    row of this frame's detections it matched (−1: none), `active` whether it was seen at the
    latest update. `observed` (T, K, 4) holds the last K detector boxes (xyxy pixels, oldest
    first) seen at `observed_at` (T, K) seconds, NaN before a track has K: the raw observations
    that OC-SORT re-fits and recovers from (ByteTrack keeps K = 1 and does not read them)."""

    track_id: npt.NDArray[np.int64]
    class_id: npt.NDArray[np.int32]
    confidence: npt.NDArray[np.float32]
    box: F64
    velocity: F64
    at: F64
    seen: F64
    hits: npt.NDArray[np.int64]
    matched: npt.NDArray[np.intp]
    active: npt.NDArray[np.bool_]
    observed: F64
    observed_at: F64

    @classmethod
    def empty(cls, kept: int = 1) -> Tracks:
        return cls(
            np.zeros(0, np.int64), np.zeros(0, np.int32), np.zeros(0, np.float32),
            np.zeros((0, 4)), np.zeros((0, 4)), np.zeros(0), np.zeros(0),
            np.zeros(0, np.int64), np.zeros(0, np.intp), np.zeros(0, bool),
            np.zeros((0, kept, 4)), np.zeros((0, kept)),
        )  # fmt: skip

    def __len__(self) -> int:
        return int(self.track_id.shape[0])

    def take(self, keep: npt.NDArray[np.bool_] | Index) -> Tracks:
        return Tracks(*(getattr(self, f.name)[keep] for f in fields(self)))

    def extend(self, other: Tracks) -> Tracks:
        return Tracks(
            *(np.concatenate([getattr(self, f.name), getattr(other, f.name)]) for f in fields(self))
        )

    def boxes_at(self, timestamp: float) -> F64:
        """(T, 4) xyxy boxes extrapolated to `timestamp` at constant velocity."""
        box = self.box + self.velocity * (timestamp - self.at)[:, None]
        np.maximum(box[:, 2:], MIN_SIZE, out=box[:, 2:])
        return np.concatenate([box[:, :2] - box[:, 2:] / 2.0, box[:, :2] + box[:, 2:] / 2.0], 1)
