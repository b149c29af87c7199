"""The values between the coordinator and its workers: a unit of work (a source, or a frame range
of one, at an attempt number) and what a worker reports about it."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from visionrt.fuse import Checkpoint


@dataclass(frozen=True, slots=True)
class WorkUnit:
    """Source `name` (`spec` as given) from frame `start_frame` (to `end_frame`, exclusive;
    None: its end), run for the `attempt`-th time. `unit_id` names the unit across attempts.
    `first_frame`: where its range starts (a long file's ranges run on several workers; 0: the
    whole file); a retry's `start_frame` is past it, after the frames committed.
    `live`: a stream that does not end (placed by `cost`, its pixels a second; never grouped
    with files); `paced`: a live one that is a file read in real time (a camera's stand-in:
    a retry starts at the frame the stream has got to, not at the file's start, and no later
    than its last of `frames`; 0: not known, or looped); `alone`: run in a Pipeline of its
    own (a group it was in failed with the user's error, which one of the group's sources
    caused). `checkpoint`: its source's fusion state after the frame before `start_frame` (a
    retry's tracks, zones and lines go on from it; None: from nothing)."""

    unit_id: int
    name: str
    spec: str
    start_frame: int = 0
    end_frame: int | None = None
    attempt: int = 1
    live: bool = False
    paced: bool = False
    frames: int = 0
    cost: float = 1.0
    alone: bool = False
    first_frame: int = 0
    part: int = 0  # its range's number from 1 (its files' names); 0: the whole file
    # The source's place among the run's sources: its lines' `source_id` (a range's unit_id is
    # its own, its source's place its file's).
    place: int = 0
    checkpoint: Checkpoint | None = field(default=None, compare=False)

    def retried(self, resume_at: int, checkpoint: Checkpoint | None = None) -> WorkUnit:
        """The next attempt, from `resume_at` (after the last frame committed), with the
        fusion state `checkpoint` after that frame."""
        start = max(self.start_frame, resume_at)
        return replace(self, attempt=self.attempt + 1, start_frame=start, checkpoint=checkpoint)


Group = tuple[WorkUnit, ...]  # the units one worker runs together, in one Pipeline


@dataclass(frozen=True, slots=True)
class Batch:
    """Results of a unit's attempt: (frame index, JSONL line) in frame order."""

    worker: str
    unit_id: int
    attempt: int
    frames: tuple[tuple[int, str], ...]
    # Its source's fusion state after the last of them (None: nothing keeps any).
    checkpoint: Checkpoint | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class Done:
    """A unit's attempt ended: every frame of its range was sent (`summary`: the worker's run
    summary for it)."""

    worker: str
    unit_id: int
    attempt: int
    summary: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Failed:
    """A unit's attempt failed with `error`; `retry` False for the user's error (a bad file or
    model), which another attempt would only repeat; `own` when the worker found it to be
    this unit's own (its source alone cannot be opened), not its group's."""

    worker: str
    unit_id: int
    attempt: int
    error: str
    retry: bool = True
    own: bool = False


@dataclass(frozen=True, slots=True)
class Lost:
    """A worker is gone (its process or node died): whatever it ran is to be run again."""

    worker: str


@dataclass(frozen=True, slots=True)
class Sample:
    """A line of a worker's telemetry (with `output.telemetry`: the driver writes the file)."""

    worker: str
    line: dict[str, Any]


Report = Batch | Done | Failed | Lost | Sample
