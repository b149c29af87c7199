"""A sink that keeps nothing but counts: for measurements where writing files would be noise."""

from __future__ import annotations

from pathlib import Path

from visionrt.sinks.base import Sink
from visionrt.types import FrameResult


class NullSink(Sink):
    """Counts results and detections; writes nothing, finalizes nothing."""

    def __init__(self) -> None:
        self.frames = 0
        self.detections = 0

    def write(self, result: FrameResult) -> None:
        self.frames += 1
        self.detections += len(result.detections)

    def close(self, complete: bool = True) -> list[Path]:
        return []
