"""What a stage graph is built from (build.py makes them, Graph runs them): the sources it reads
under their names, and the work it does on their frames."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from visionrt.fuse import Fuser
from visionrt.pipeline.gating import Gating
from visionrt.pipeline.schedule import Scheduler
from visionrt.sources import Source
from visionrt.tasks.base import Task


@dataclass(frozen=True)
class Inputs:
    """The sources, each's label (in results and telemetry) and whether the label is the
    user's name for it (then it replaces the frames' own source name)."""

    sources: Sequence[Source]
    labels: Sequence[str]
    named: Sequence[bool]


@dataclass(frozen=True)
class Work:
    """What runs on the frames: `tasks` (the first the detector; others of its name are
    detectors too, their results the frame's detections) and the latency ladder's `variants`
    each get a lane, numbered in that order, then the region detector `regions` (regions
    mode); `scheduler` says which lanes run on each frame; `fusers[i]` are source i's fusion
    steps; `class_names` name the detector's classes in results; `gating` measures each
    frame's motion for the scheduler (None: off)."""

    tasks: Sequence[Task]
    scheduler: Scheduler
    fusers: Sequence[Sequence[Fuser]]
    class_names: Sequence[str]
    variants: Sequence[Task] = field(default_factory=tuple)
    gating: Gating | None = None
    regions: Task | None = None
