"""Lets `Source.stop()` end a read blocked in FFmpeg (PyAV), from any thread: the clock
FFmpeg's interrupt callback reads, made to jump ahead in the thread of a stopped source."""

from __future__ import annotations

import threading
import time
import types
from collections.abc import Iterator
from contextlib import contextmanager

from visionrt.sources.base import Source


class StopClock:
    """Lets `stop()` abort a read blocked in FFmpeg, from any thread.

    PyAV 18 offers no way to interrupt a blocked read (PyAV-Org/PyAV#351), and closing the
    container from another thread frees it under the reader. Its timeout, though, is FFmpeg's
    interrupt callback, which FFmpeg polls about every 100 ms while it waits for network data
    and which compares `time.monotonic()`, looked up in `av.container.core`, with the read's
    start. This stands in for that module's `time`: in a thread reading a source that was
    stopped, the clock jumps ahead, so the read ends at once with AVERROR_EXIT, as if timed
    out, and the reader closes its container itself. Other threads see the real clock. Only
    sources opened with a timeout (cameras and streams) have the callback; a V4L2 read that
    blocks in the driver does not poll it."""

    def __init__(self) -> None:
        self._local = threading.local()
        self.module = types.ModuleType("time", "time, with a monotonic() that stop() can end")
        self.module.__dict__.update(time.__dict__)
        self.module.monotonic = self.monotonic  # type: ignore[attr-defined]

    def monotonic(self) -> float:
        local = self._local
        source: Source | None = getattr(local, "source", None)
        if source is not None and source._stopped:
            # Ahead of any timeout, and still increasing: PyAV rejects a clock that steps back.
            local.skew = getattr(local, "skew", 0.0) + 1e6
        return time.monotonic() + getattr(local, "skew", 0.0)

    @contextmanager
    def watching(self, source: Source) -> Iterator[None]:
        """Blocking PyAV calls in this block end soon after `source.stop()`."""
        local = self._local
        previous = getattr(local, "source", None)
        local.source = source
        try:
            yield
        finally:
            local.source = previous


STOP_CLOCK = StopClock()


def install_stop_clock() -> None:
    import av.container.core as core

    # Only where PyAV reads the clock as this version does; otherwise stop() waits for the
    # read timeout, as it would without this.
    if getattr(core, "time", None) is time:
        core.time = STOP_CLOCK.module  # type: ignore[attr-defined]
