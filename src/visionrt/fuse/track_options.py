"""A tracker's options — which tracker, the confidence split, the first association's IoU gate,
how long a lost track is kept, whether tracks keep to one class — checked once, here; and the
config's tracking section they come from (TrackingOptions)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from visionrt.errors import ConfigError

TRACKERS = ("bytetrack", "ocsort")


@dataclass(frozen=True, slots=True)
class TrackOptions:
    """`kind` one of TRACKERS; detections at or above `high` start and extend tracks, those
    from `low` to `high` only extend them (ByteTrack's second stage); `match_iou` gates the
    first association (0.2 is ByteTrack's own; 0.3 split more tracks across detect-every-N ≥ 3
    without swapping fewer ids: docs/benchmarks.md, "Tracking"); a track lost for longer than
    `lost_seconds` ends; `per_class` keeps each track to one class (off: a person whose class
    flickers between Normal and Fall keeps one id, as ByteTrack and OC-SORT do)."""

    kind: str = "bytetrack"
    high: float = 0.5
    low: float = 0.1
    match_iou: float = 0.2
    lost_seconds: float = 1.0
    per_class: bool = False

    def __post_init__(self) -> None:
        if self.kind not in TRACKERS:
            raise ConfigError(f"tracker: expected one of {', '.join(TRACKERS)}, got '{self.kind}'")
        if not 0.0 <= self.low <= self.high <= 1.0:
            raise ConfigError(
                f"tracker: expected 0 ≤ low ≤ high ≤ 1, got low={self.low}, high={self.high}"
            )
        if not 0.0 < self.match_iou <= 1.0:
            raise ConfigError(f"tracker: expected 0 < match_iou ≤ 1, got {self.match_iou}")
        if not (math.isfinite(self.lost_seconds) and self.lost_seconds >= 0):
            raise ConfigError(f"tracker: expected lost_seconds ≥ 0, got {self.lost_seconds}")


@dataclass(frozen=True, slots=True)
class TrackingOptions:
    """The config's `pipeline.tracking` section: a tracker per source gives each box a track id,
    and lets the detector skip the frames between detections. `match_iou`, `lost_seconds` and
    `per_class` are TrackOptions'."""

    enabled: bool = False
    """Give each box a track id (a tracker per source)."""
    detect_every: int = 1
    """Run the detector on every Nth frame of each source, the frames between getting the
    tracks' predicted boxes (1 or more; above 1 needs `enabled` or `predict_between`)."""
    predict_between: bool = False
    """Without `enabled`: a tracker runs only to give the frames between detections their
    predicted boxes (detect_every above 1), and no box gets a track id. A plan's
    detect-every-N sets it where tracking was not asked for."""
    tracker: str = "bytetrack"
    """Which tracker: bytetrack or ocsort."""
    match_iou: float = 0.2
    """The IoU a detection needs with a track's box to extend it in the first association
    (above 0, at most 1; 0.2 is ByteTrack's own)."""
    lost_seconds: float = 1.0
    """A track not seen for longer than this many seconds ends (0 to 3600)."""
    per_class: bool = False
    """Keep each track to one class (off: an object whose class flickers keeps one id, as
    ByteTrack and OC-SORT do)."""

    @property
    def tracker_runs(self) -> bool:
        """A tracker runs on each source: for track ids, or for the boxes between detections."""
        return self.enabled or (self.predict_between and self.detect_every > 1)

    def options(self, high: float, low: float) -> TrackOptions:
        """The tracker's options, `high` and `low` its confidence split (the run's threshold,
        and the detector's when tracking)."""
        return TrackOptions(
            self.tracker, high, low, self.match_iou, self.lost_seconds, self.per_class
        )

    def __post_init__(self) -> None:
        if self.detect_every < 1:
            raise ConfigError(
                f"pipeline.tracking.detect_every: expected >= 1, got {self.detect_every}"
            )
        if self.detect_every > 1 and not self.tracker_runs:
            raise ConfigError(
                "pipeline.tracking.detect_every: frames between detections need tracking:"
                " add --track"
            )
        if self.tracker not in TRACKERS:
            raise ConfigError(
                f"pipeline.tracking.tracker: expected one of {', '.join(TRACKERS)}, got"
                f" '{self.tracker}'"
            )
        if not 0 < self.match_iou <= 1:
            raise ConfigError(
                f"pipeline.tracking.match_iou: expected 0 < IoU <= 1, got {self.match_iou}"
            )
        if not 0 <= self.lost_seconds <= 3600:
            raise ConfigError(
                "pipeline.tracking.lost_seconds: expected 0 to 3600 seconds, got"
                f" {self.lost_seconds}"
            )
