"""Generated frames (`synthetic:640x480:100`), for tests and overhead baselines without media;
in live mode they come at 30 FPS, like a camera."""

from __future__ import annotations

import time
from collections.abc import Iterator

import numpy as np

from visionrt.errors import ConfigError
from visionrt.sources.base import Source, SourceOptions
from visionrt.types import Frame

MAX_SIDE = 16384  # 16K: larger frames are a typo, and would not fit in memory anyway


class SyntheticSource(Source):
    size: tuple[int, int]  # always known: the spec gives it

    def __init__(self, spec: str, source_id: int, options: SourceOptions) -> None:
        super().__init__()
        try:
            _, size, count = spec.split(":")
            width, height = (int(v) for v in size.lower().split("x"))
            self.frame_count = int(count)
        except ValueError as err:
            raise ConfigError(
                f"synthetic source '{spec}': expected synthetic:WIDTHxHEIGHT:FRAMES"
            ) from err
        if not (0 < width <= MAX_SIDE and 0 < height <= MAX_SIDE) or self.frame_count < 0:
            raise ConfigError(
                f"synthetic source '{spec}': expected sides of 1 to {MAX_SIDE} pixels and"
                " FRAMES >= 0"
            )
        self.name = spec
        self.source_id = source_id
        self.options = options
        self.live = options.mode == "live"
        self.fps = 30.0
        self.size = (height, width)
        self.check_start()

    def frames(self) -> Iterator[Frame]:
        height, width = self.size
        base = np.random.default_rng(0).integers(0, 255, (height, width, 3), dtype=np.uint8)
        start = self.options.start_frame
        limits = (self.frame_count, self.options.max_frames, self.options.end_frame)
        limit = min(n for n in limits if n) if self.frame_count else 0
        started = time.perf_counter()
        for index in range(start, limit):
            if self._stopped:
                return
            if self.live:  # a live source delivers at its frame rate, like a camera
                time.sleep(max(0.0, started + (index - start) / self.fps - time.perf_counter()))
            image = np.roll(base, index, axis=1)
            yield Frame(
                source_id=self.source_id,
                index=index,
                pixels=image,
                timestamp=index / self.fps,
                captured_at=time.perf_counter(),
                source_name=self.name,
            )
            self.stats.frames = index + 1
