"""OC-SORT-style tracking of one source: the ByteTrack-style `Tracker` made observation-centric,
so tracks survive occlusions and skipped frames where the motion model drifts.

A clean-room reading of Cao et al., "Observation-Centric SORT: Rethinking SORT for Robust
Multi-Object Tracking" (CVPR 2023), written from the paper's description, not from its code, on
top of `visionrt.fuse.bytetrack` (same alpha-beta motion in pixels/second, same timestamps,
lost window in seconds and eviction). The paper's three parts, in seconds rather than frames:

- re-update (ORU): a track matched again after missing one or more updates (the detector ran and
  did not see it) restarts its motion from the observations, the velocity being the straight
  line from its last detector box to the new one over the time between, instead of the
  prediction that drifted while it was unseen (frames skipped or dropped without an update are
  not misses: the prediction by seconds covers them, as in `Tracker`);
- momentum (OCM): the association adds a direction-consistency term, the agreement between the
  track's observed direction (its last box against one about `momentum_seconds` older) and the
  direction from its last box to each candidate, weighted by the candidate's confidence;
- recovery (OCR): tracks and high-confidence detections left unmatched are associated once more
  by IoU with the track's last detector box, which still covers an object that stopped or
  turned while the prediction moved on.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from visionrt.errors import ConfigError
from visionrt.fuse.bytetrack import Tracker
from visionrt.fuse.track_options import TrackOptions
from visionrt.fuse.tracks import F64, Index, Tracks, to_cxcywh
from visionrt.types import Detections

__all__ = ["OcSortTracker", "direction_consistency"]


def direction_consistency(
    track_direction: F64, origin: F64, targets: F64, confidence: npt.NDArray[np.floating]
) -> F64:
    """(T, D) momentum term: (π/2 − θ)/π × confidence, θ ∈ [0, π] being the angle between track
    t's direction `track_direction` (T, 2) and the direction from its `origin` (T, 2) to target
    d's centre `targets` (D, 2), weighted by target d's `confidence` (D,). +½·conf straight
    ahead, 0 sideways, −½·conf backwards; 0 where either direction is undefined (zero length or
    NaN: a track seen once has no direction)."""
    towards = targets[None, :, :] - origin[:, None, :]
    norm_track = np.linalg.norm(track_direction, axis=1)[:, None]
    norm_towards = np.linalg.norm(towards, axis=2)
    valid = (norm_track > 0) & (norm_towards > 0)  # NaN compares False
    dot = np.einsum("tk,tdk->td", np.nan_to_num(track_direction), np.nan_to_num(towards))
    cosine = np.divide(
        dot, norm_track * norm_towards, out=np.zeros_like(dot), where=valid & np.isfinite(dot)
    )
    angle = np.arccos(np.clip(cosine, -1.0, 1.0))
    term = (np.pi / 2 - angle) / np.pi * np.asarray(confidence, np.float64)[None, :]
    return np.where(valid, term, 0.0)


class OcSortTracker(Tracker):
    """OC-SORT-style tracking (see the module docstring), with the `Tracker` interface: `update`
    where the detector ran, `predict` where it did not, both by timestamp in seconds.

    Association per update: high-confidence detections by IoU with the predicted boxes plus
    `inertia` × the momentum term (`direction_consistency`), gated by IoU ≥ `match_iou`; then,
    as ByteTrack, low-confidence ones by IoU ≥ `low_match_iou` (low ones extend tracks, never
    start them); then recovery of the tracks still unmatched against the high-confidence
    detections still unmatched, by IoU ≥ `match_iou` with each track's last detector box.

    `inertia` 0.2 is the paper's weight; `momentum_seconds` 0.1 is its three frames at 30 FPS
    (the direction is taken over at least that long, so detector jitter does not dominate it,
    from the last `observations_kept` boxes). Other options as `Tracker`.
    """

    observations_kept = 4  # ≥ momentum_seconds of boxes at 30 FPS, the detector on every frame

    def __init__(
        self,
        options: TrackOptions | None = None,
        min_hits: int = 1,
        low_match_iou: float = 0.5,
        inertia: float = 0.2,
        momentum_seconds: float = 0.1,
    ) -> None:
        super().__init__(options, min_hits, low_match_iou)
        if not 0.0 <= inertia <= 1.0:
            raise ConfigError(f"tracker: expected 0 ≤ inertia ≤ 1, got {inertia}")
        if not 0.0 < momentum_seconds < 60.0:
            raise ConfigError(
                f"tracker: expected 0 < momentum_seconds < 60, got {momentum_seconds}"
            )
        self.inertia, self.momentum_seconds = inertia, momentum_seconds

    def _associate(
        self, detections: Detections, high: Index, timestamp: float
    ) -> tuple[Index, Index]:
        rows, dets = super()._associate(detections, high, timestamp)
        tracks = self._tracks
        left_rows = np.setdiff1d(np.arange(len(tracks)), rows, assume_unique=True)
        left_dets = np.setdiff1d(high, dets, assume_unique=True)
        last = tracks.observed[:, -1]
        rows3, dets3 = self._match(last, left_rows, detections, left_dets, self.match_iou)
        return np.concatenate([rows, rows3]), np.concatenate([dets, dets3])

    def _weights(self, iou: F64, rows: Index, detections: Detections, cols: Index) -> F64:
        if self.inertia == 0.0:
            return iou
        last = _centres(self._tracks.observed[rows, -1])
        targets = _centres(detections.xyxy[cols].astype(np.float64))
        term = direction_consistency(
            self._directions(rows), last, targets, detections.confidence[cols]
        )
        # A match must stay positive to be assignable; IoU ≥ threshold keeps it so unless
        # inertia outweighs it, and then the pair is still allowed at a token weight.
        return np.maximum(iou + self.inertia * term, 1e-6)

    def _directions(self, rows: Index) -> F64:
        """(R, 2) centre displacement from the newest kept box at least `momentum_seconds` older
        than the last one (the oldest kept when none is) to the last one; NaN when seen once."""
        tracks = self._tracks
        centres = _centres(tracks.observed[rows].reshape(-1, 4)).reshape(len(rows), -1, 2)
        at = tracks.observed_at[rows]
        age = at[:, -1:] - at[:, :-1]  # seconds before the last box; NaN where never filled
        old_enough = age >= self.momentum_seconds - 1e-9
        kept = age.shape[1]
        newest_old = kept - 1 - np.argmax(old_enough[:, ::-1], axis=1)
        oldest = np.argmax(np.isfinite(age), axis=1)
        anchor = np.where(old_enough.any(axis=1), newest_old, oldest)
        picked = centres[np.arange(len(rows)), anchor]
        return centres[:, -1] - picked

    def _correct(
        self,
        tracks: Tracks,
        rows: Index,
        xyxy: npt.NDArray[np.float32],
        confidence: npt.NDArray[np.float32],
        timestamp: float,
    ) -> None:
        """The alpha-beta step, then re-update: tracks that missed the previous update restart
        from the new box with the velocity of the straight line from their last box."""
        lost = ~tracks.active[rows] & (tracks.hits[rows] > 1)  # hits 1: the base does the same
        refit_rows = rows[lost]
        before = to_cxcywh(tracks.observed[refit_rows, -1])
        since = tracks.seen[refit_rows]
        super()._correct(tracks, rows, xyxy, confidence, timestamp)
        if refit_rows.size == 0:
            return
        measured = to_cxcywh(xyxy[lost].astype(np.float64))
        dt = (timestamp - since)[:, None]
        tracks.box[refit_rows] = measured
        tracks.velocity[refit_rows] = np.divide(
            measured - before, dt, out=np.zeros_like(measured), where=dt > 0
        )


def _centres(xyxy: F64) -> F64:
    return (xyxy[..., :2] + xyxy[..., 2:]) / 2.0
