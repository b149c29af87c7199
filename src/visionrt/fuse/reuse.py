"""Motion gating as a fusion step: a frame no model ran on (nothing moved since) takes its source's
last results, so every later step (tracking, distances) and every sink sees a whole frame."""

from __future__ import annotations

from typing import Any

from visionrt.fuse.base import Fused


class ReuseFuser:
    """One source's last results by task name: kept from each frame the models ran on, given to
    each frame they did not (`fused.reused`). Runs first among a source's fusers."""

    def __init__(self, detector: str) -> None:
        self.detector = detector
        self._last: dict[str, Any] = {}

    def fuse(self, fused: Fused) -> None:
        if not fused.reused:
            self._last.update(fused.results)
            return
        fused.results.update(self._last)
        if self.detector in self._last:
            fused.detections = self._last[self.detector]
