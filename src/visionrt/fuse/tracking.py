"""Tracking as a fusion step: a tracker per source by name, and the fuser that gives a frame's
detections their track ids (predicted boxes where the detector did not run)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from visionrt.errors import ConfigError
from visionrt.fuse.base import Fused
from visionrt.fuse.bytetrack import Tracker
from visionrt.fuse.ocsort import OcSortTracker

TRACKERS = ("bytetrack", "ocsort")


def make_tracker(
    kind: str = "bytetrack",
    high: float = 0.5,
    low: float = 0.1,
    match_iou: float = 0.2,
    lost_seconds: float = 1.0,
    per_class: bool = False,
) -> Tracker:
    """A tracker by name (`TRACKERS`); `high` and `low` split detections by confidence;
    `match_iou` gates the first association, `lost_seconds` how long a lost track is kept,
    `per_class` keeps tracks to one class."""
    common = dict(high=high, low=low, match_iou=match_iou, lost_seconds=lost_seconds)
    if kind == "bytetrack":
        return Tracker(**common, per_class=per_class)
    if kind == "ocsort":
        return OcSortTracker(**common, per_class=per_class)
    raise ConfigError(f"tracker: expected one of {', '.join(TRACKERS)}, got '{kind}'")


class TrackFuser:
    """One source's tracker: `update` where the detector ran on the frame, `predict` where it
    did not (detect-every-N); the frame's detections become the tracks', and `held_tracks`
    says which tracks the tracker still keeps (lost ones included). `since_detect`: frames
    fused since the last one the detector ran on (a resumed source's detect-every-N goes on
    in step)."""

    def __init__(self, tracker: Tracker, detector: str) -> None:
        self.tracker, self.detector = tracker, detector
        self.since_detect = 0

    def fuse(self, fused: Fused) -> None:
        timestamp = fused.frame.timestamp
        if self.detector in fused.results:
            tracks = self.tracker.update(fused.detections, timestamp)
            self.since_detect = 0
        else:
            tracks = self.tracker.predict(timestamp)
            self.since_detect += 1
        fused.tracks, fused.detections = tracks, tracks.detections
        fused.held_tracks = self.tracker.held()

    def checkpoint(self) -> dict[str, Any]:
        return {"tracker": self.tracker.checkpoint(), "since_detect": self.since_detect}

    def resume(self, state: Mapping[str, Any]) -> None:
        self.tracker.resume(state["tracker"])
        self.since_detect = int(state["since_detect"])
