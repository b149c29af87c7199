"""Multi-object tracking of one source: track ids across frames, and predicted boxes for the frames
the detector skipped (detect-every-N) or the source dropped, all advanced by frame timestamps.

A clean-room ByteTrack-style tracker (Zhang et al., "ByteTrack: Multi-Object Tracking by
Associating Every Detection Box", ECCV 2022), not a library: supervision deprecated its ByteTrack
in 0.28 and no longer ships it (0.31.2 checked); its successor, the `trackers` package (2.6.1,
Apache-2.0, drop-aware through an optional timestamp), requires opencv-python, which installs over
our opencv-python-headless, plus supervision (matplotlib, pillow, requests, …), and associates
across classes; the older supervision ByteTrack counted frames, not seconds. The OC-SORT variant
(`visionrt.fuse.ocsort`) subclasses `Tracker`; `visionrt.fuse.tracking.make_tracker` picks one
by name.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from visionrt.errors import ConfigError
from visionrt.fuse.track_options import TrackOptions
from visionrt.fuse.tracks import ALPHA, BETA, F64, Index, Tracks, assign, to_cxcywh
from visionrt.postprocess.nms import box_iou
from visionrt.types import Detections, TrackedDetections


class Tracker:
    """ByteTrack-style tracking of one source's detections, advanced by frame timestamps.

    Call `update` with a frame's detections where the detector ran and `predict` where it did not;
    both take the frame's timestamp in seconds. Per update: every track's box is extrapolated to the
    timestamp; detections with confidence ≥ `high` are matched to tracks by IoU ≥ `match_iou` (of
    any class, the track taking the detection's, unless `per_class`), then detections in [`low`,
    `high`) to the tracks left by IoU ≥ `low_match_iou` (stricter: low scores are often clutter),
    matching each time for the largest summed IoU (Hungarian via scipy; greedy by IoU when scipy is
    not installed). Matched tracks take the detection through an alpha-beta filter on centre and
    size (constant velocity in pixels/second, so skipped frames and timestamp gaps predict
    correctly; a track's second sighting sets its velocity from the two boxes). Unmatched
    high-confidence detections start tracks; low-confidence ones never do. A track is output once
    seen `min_hits` times (a track still short of that is dropped at its first miss) and evicted
    `lost_seconds` after it was last seen, so memory stays flat on endless streams; a lost track
    that matches again within that window keeps its id.

    `update` returns the detector's own boxes (and confidences) of the tracks it matched,
    `predicted` all False; `predict` returns the boxes of the tracks seen at the latest update,
    extrapolated, with their last confidence, `predicted` all True. Rows are in track-id order;
    ids count from 1 and are never reused. A timestamp earlier than the previous call's (a looped
    file, a restarted stream) starts a new timeline: all tracks end, ids continue.

    Defaults: `high` 0.5 and `low` 0.1 split detections as ByteTrack does (the detector's own
    threshold must be ≤ `low` for the second stage to see anything); `match_iou` 0.2 (ByteTrack's
    own gate: match_thresh 0.8 on 1 − IoU) tolerates prediction error over skipped frames, where 0.3
    split tracks and swapped no fewer ids (docs/benchmarks.md, "Tracking"); `lost_seconds` 1.0
    bridges short occlusions (30 frames at 30 FPS, ByteTrack's buffer); `min_hits` 1 outputs a track
    from its first frame; matching across classes keeps one identity for an object whose class
    flickers (the demo's person going from Normal to Fall), as ByteTrack and OC-SORT do.
    """

    observations_kept = 1  # detector boxes remembered per track (`Tracks.observed`)

    def __init__(
        self, options: TrackOptions | None = None, min_hits: int = 1, low_match_iou: float = 0.5
    ) -> None:
        options = options or TrackOptions()
        if not 0.0 < low_match_iou <= 1.0:
            raise ConfigError(f"tracker: expected 0 < low_match_iou ≤ 1, got {low_match_iou}")
        if min_hits < 1:
            raise ConfigError(f"tracker: expected min_hits ≥ 1, got {min_hits}")
        self.high, self.low = options.high, options.low
        self.match_iou, self.low_match_iou = options.match_iou, low_match_iou
        self.lost_seconds, self.min_hits = options.lost_seconds, min_hits
        self.per_class = options.per_class
        self._tracks = Tracks.empty(self.observations_kept)
        self._next_id = 1
        self._time: float | None = None

    def __len__(self) -> int:
        """Live tracks, lost ones within `lost_seconds` included."""
        return len(self._tracks)

    def held(self) -> frozenset[int]:
        """Ids of the tracks kept after the latest call: those seen, and those lost within
        `lost_seconds` (an object the detector missed on a frame or two is still there)."""
        return frozenset(self._tracks.track_id.tolist())

    def checkpoint(self) -> dict[str, Any]:
        """Its state after the latest call (copies): `resume` on a tracker made with the same
        options goes on from there, the same tracks and the next ids."""
        return {
            "tracks": self._tracks.take(np.arange(len(self._tracks))),
            "next_id": self._next_id,
            "time": self._time,
        }

    def resume(self, state: Mapping[str, Any]) -> None:
        """Go on from `checkpoint()`'s state (a resumed source's tracker: ids never reused)."""
        tracks = state["tracks"]
        self._tracks = tracks.take(np.arange(len(tracks)))
        self._next_id, self._time = int(state["next_id"]), state["time"]

    def update(self, detections: Detections, timestamp: float) -> TrackedDetections:
        """Associate a frame's detections with the tracks; returns the tracks the detector saw."""
        self._advance(timestamp)
        tracks = self._tracks
        conf = detections.confidence
        high = np.flatnonzero(conf >= self.high)
        rows, dets = self._associate(detections, high, timestamp)

        tracks.matched = np.full(len(tracks), -1, np.intp)
        tracks.matched[rows] = dets
        self._correct(tracks, rows, detections.xyxy[dets], conf[dets], timestamp)
        tracks.class_id[rows] = detections.class_id[dets]  # the latest class, when they differ
        seen = tracks.matched >= 0
        tracks.active = seen
        keep = (seen | (tracks.hits >= self.min_hits)) & (
            timestamp - tracks.seen <= self.lost_seconds
        )
        tracks = tracks.take(keep)

        fresh = np.setdiff1d(high, dets, assume_unique=True)
        tracks = tracks.extend(self._start(detections, fresh, timestamp))
        self._tracks = tracks

        out = np.flatnonzero((tracks.matched >= 0) & (tracks.hits >= self.min_hits))
        return TrackedDetections(
            detections.filter(tracks.matched[out]),
            tracks.track_id[out],
            np.zeros(out.shape[0], bool),
        )

    def predict(self, timestamp: float) -> TrackedDetections:
        """Boxes of the tracks seen at the latest update, extrapolated to `timestamp`."""
        self._advance(timestamp)
        tracks = self._tracks
        tracks = self._tracks = tracks.take(timestamp - tracks.seen <= self.lost_seconds)
        out = np.flatnonzero(tracks.active & (tracks.hits >= self.min_hits))
        shown = tracks.take(out)
        boxes = Detections(
            shown.boxes_at(timestamp).astype(np.float32), shown.confidence, shown.class_id
        )
        return TrackedDetections(boxes, shown.track_id, np.ones(out.shape[0], bool))

    def _advance(self, timestamp: float) -> None:
        if not math.isfinite(timestamp):
            raise ConfigError(f"tracker: expected a finite timestamp in seconds, got {timestamp}")
        if self._time is not None and timestamp < self._time:
            self._tracks = Tracks.empty(self.observations_kept)
        self._time = timestamp

    def _associate(
        self, detections: Detections, high: Index, timestamp: float
    ) -> tuple[Index, Index]:
        """ByteTrack's two stages: (track rows, detection rows) matched."""
        predicted = self._tracks.boxes_at(timestamp)
        everyone = np.arange(len(self._tracks))
        conf = detections.confidence
        low = np.flatnonzero((conf >= self.low) & (conf < self.high))
        rows, dets = self._match(predicted, everyone, detections, high, self.match_iou, True)
        left = np.setdiff1d(everyone, rows, assume_unique=True)
        rows2, dets2 = self._match(predicted, left, detections, low, self.low_match_iou)
        return np.concatenate([rows, rows2]), np.concatenate([dets, dets2])

    def _match(
        self,
        boxes: F64,
        rows: Index,
        detections: Detections,
        cols: Index,
        threshold: float,
        weigh: bool = False,
    ) -> tuple[Index, Index]:
        """Tracks `rows` (at `boxes`, (T, 4) xyxy for all tracks) matched to detections `cols`
        (of the same class when `per_class`) by IoU ≥ `threshold`, for the largest summed IoU, or
        summed `_weights` when `weigh`: (track rows, detection rows)."""
        if rows.size == 0 or cols.size == 0:
            return np.zeros((0,), np.intp), np.zeros((0,), np.intp)
        iou = box_iou(boxes[rows], detections.xyxy[cols])
        if self.per_class:
            iou[self._tracks.class_id[rows][:, None] != detections.class_id[cols][None, :]] = 0.0
        weights = self._weights(iou, rows, detections, cols) if weigh else iou
        gated = np.where(iou >= threshold, weights, 0.0)
        picked_rows, picked_cols = assign(gated)
        return rows[picked_rows], cols[picked_cols]

    def _weights(self, iou: F64, rows: Index, detections: Detections, cols: Index) -> F64:
        """What the first (high-confidence) stage maximizes: the IoU here; OC-SORT adds
        momentum."""
        return iou

    def _correct(
        self,
        tracks: Tracks,
        rows: Index,
        xyxy: npt.NDArray[np.float32],
        confidence: npt.NDArray[np.float32],
        timestamp: float,
    ) -> None:
        """Alpha-beta step of the matched `rows` towards their measured boxes, in place."""
        if rows.size == 0:
            return
        measured = to_cxcywh(xyxy.astype(np.float64))
        dt = timestamp - tracks.at[rows]
        prior = tracks.box[rows] + tracks.velocity[rows] * dt[:, None]
        residual = measured - prior
        second = (tracks.hits[rows] == 1)[:, None]  # one box so far: take the two-point velocity
        rate = np.divide(residual, dt[:, None], out=np.zeros_like(residual), where=dt[:, None] > 0)
        tracks.box[rows] = prior + np.where(second, 1.0, ALPHA) * residual
        tracks.velocity[rows] += np.where(second, 1.0, BETA) * rate
        tracks.at[rows] = tracks.seen[rows] = timestamp
        tracks.hits[rows] += 1
        tracks.confidence[rows] = confidence
        tracks.observed[rows, :-1] = tracks.observed[rows, 1:]
        tracks.observed_at[rows, :-1] = tracks.observed_at[rows, 1:]
        tracks.observed[rows, -1] = xyxy
        tracks.observed_at[rows, -1] = timestamp

    def _start(self, detections: Detections, rows: Index, timestamp: float) -> Tracks:
        count, kept = rows.shape[0], self.observations_kept
        ids = np.arange(self._next_id, self._next_id + count, dtype=np.int64)
        self._next_id += count
        observed = np.full((count, kept, 4), np.nan)
        observed[:, -1] = detections.xyxy[rows]
        observed_at = np.full((count, kept), np.nan)
        observed_at[:, -1] = timestamp
        return Tracks(
            ids,
            detections.class_id[rows],
            detections.confidence[rows],
            to_cxcywh(detections.xyxy[rows].astype(np.float64)),
            np.zeros((count, 4)),
            np.full(count, timestamp),
            np.full(count, timestamp),
            np.ones(count, np.int64),
            rows.astype(np.intp),
            np.ones(count, bool),
            observed,
            observed_at,
        )
