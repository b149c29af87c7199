"""A source's fusion state after one of its frames, taken and given back whole: a Pipeline that
resumes the source at the next frame (a cluster's retry, on another worker) goes on with the
same tracks and next ids, zone stays, line sides and counts, as if it had not stopped."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from visionrt.fuse.analytics import AnalyticsFuser
from visionrt.fuse.base import Fuser
from visionrt.fuse.tracking import TrackFuser


@runtime_checkable
class Resumable(Protocol):
    """A fusion step that keeps state from frame to frame and can hand it over."""

    def checkpoint(self) -> Any: ...

    def resume(self, state: Any) -> None: ...


@dataclass(frozen=True, slots=True, eq=False)
class Checkpoint:
    """`steps`: each stateful step's state, by its class name (a source's steps are built from
    the run's configuration, the same on every worker). What is read of it without knowing the
    steps: `since_detect`, frames after the last one the detector ran on (the
    resumed source's detect-every-N keeps its step); `events`, the zone and line events made
    up to that frame, by label; `analytics`, its zones' and lines' figures on that frame."""

    steps: Mapping[str, Any]
    since_detect: int = 0
    events: Mapping[str, int] = field(default_factory=dict)
    analytics: Mapping[str, Any] = field(default_factory=dict)


def take_checkpoint(steps: Sequence[Fuser]) -> Checkpoint | None:
    """The state of a source's fusion `steps` after its latest frame (None: no step keeps
    any). Taken on the thread that runs them, between two frames."""
    kept = [step for step in steps if isinstance(step, Resumable)]
    states = {type(step).__name__: step.checkpoint() for step in kept}
    if not states:
        return None
    tracking = next((step for step in steps if isinstance(step, TrackFuser)), None)
    analytics = next((step for step in steps if isinstance(step, AnalyticsFuser)), None)
    return Checkpoint(
        states,
        tracking.since_detect if tracking is not None else 0,
        dict(analytics.counted) if analytics is not None else {},
        analytics.figures if analytics is not None else {},
    )


def resume_steps(steps: Sequence[Fuser], checkpoint: Checkpoint) -> None:
    """A source's fresh fusion `steps` set to `checkpoint`'s state, before its first frame."""
    for step in steps:
        state = checkpoint.steps.get(type(step).__name__)
        if state is not None and isinstance(step, Resumable):
            step.resume(state)
