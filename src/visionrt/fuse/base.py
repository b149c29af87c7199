"""The fuser contract: the last step of a frame, after its tasks' results are decoded. A source's
fusers see its frames in order (the pipeline releases them in sequence per source), one after
another, each reading and extending the frame's `Fused` state; so a fuser may keep per-source
history (tracks, a smoothed depth map) without locks."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from visionrt.types import DepthMap, Detections, Event, Frame, TrackedDetections


@dataclass(slots=True)
class Fused:
    """A frame on its way to a FrameResult: `results` by task name, as decoded; `detections`
    starts as the detector's and may be replaced (by the tracks'); a fuser sets the rest.
    `reused`: no model ran on the frame (no motion); it takes its source's last results.
    `windows`: the detector ran on these windows of it only ((K, 4) x1, y1, x2, y2; regions)."""

    frame: Frame
    results: dict[str, Any]
    detections: Detections
    tracks: TrackedDetections | None = None
    # Ids of every track the tracker still keeps, those it lost a moment ago included (set by
    # tracking): a track missing from `tracks` but held here has not ended.
    held_tracks: frozenset[int] | None = None
    depth: DepthMap | None = None
    depth_from: int | None = None  # the frame `depth` was made on, when not this one
    distance: npt.NDArray[np.float32] | None = None
    reused: bool = False
    windows: npt.NDArray[np.int32] | None = None
    analytics: dict[str, Any] = field(default_factory=dict)  # zones and lines (fuse.analytics)
    events: list[Event] = field(default_factory=list)  # counted per source once the frame is fused


class Fuser(Protocol):
    """One source's fusion step; called once per frame, in frame order, on one thread."""

    def fuse(self, fused: Fused) -> None: ...
