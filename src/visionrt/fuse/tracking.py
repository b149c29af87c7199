"""Tracking as a fusion step: a tracker per source by name, and the fuser that gives a frame's
detections their track ids (predicted boxes where the detector did not run)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from visionrt.fuse.base import Fused
from visionrt.fuse.bytetrack import Tracker
from visionrt.fuse.ocsort import OcSortTracker
from visionrt.fuse.track_options import TrackOptions


def make_tracker(options: TrackOptions | None = None) -> Tracker:
    """The tracker `options.kind` names (`TRACKERS`), made with `options`."""
    options = options or TrackOptions()
    if options.kind == "ocsort":
        return OcSortTracker(options)
    return Tracker(options)


class TrackFuser:
    """One source's tracker: `update` where the detector ran on the frame, `predict` where it
    did not (detect-every-N); the frame's detections become the tracks', and `held_tracks`
    says which tracks the tracker still keeps (lost ones included). `since_detect`: frames
    fused since the last one the detector ran on (a resumed source's detect-every-N goes on
    in step). Without `ids` the frame gets the tracks' boxes and no track ids (`tracks` stays
    None): the tracker is there for the boxes between detections only."""

    def __init__(self, tracker: Tracker, detector: str, ids: bool = True) -> None:
        self.tracker, self.detector, self.ids = tracker, detector, ids
        self.since_detect = 0

    def fuse(self, fused: Fused) -> None:
        timestamp = fused.frame.timestamp
        if self.detector in fused.results:
            tracks = self.tracker.update(fused.detections, timestamp)
            self.since_detect = 0
        else:
            tracks = self.tracker.predict(timestamp)
            self.since_detect += 1
        fused.detections = tracks.detections
        if self.ids:
            fused.tracks = tracks
            fused.held_tracks = self.tracker.held()

    def checkpoint(self) -> dict[str, Any]:
        return {"tracker": self.tracker.checkpoint(), "since_detect": self.since_detect}

    def resume(self, state: Mapping[str, Any]) -> None:
        self.tracker.resume(state["tracker"])
        self.since_detect = int(state["since_detect"])
