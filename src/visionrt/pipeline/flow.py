"""How stage threads hand frames on: the values in flight, and bounded queues whose blocking
calls give up when the run aborts (helper threads' priority: hardware.lower_priority)."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from visionrt.types import Frame

POLL = 0.1  # seconds a blocked stage waits before re-checking for an abort
# After stop(), how long a stage waits for a reader stuck in I/O (a stalled stream can block in
# FFmpeg for its whole read timeout); a stuck reader has no frame in flight to finish.
READER_GRACE = 1.0


@dataclass(slots=True)
class Item:
    """A frame on its way through the stages (internal to the pipeline): numbered `seq` per
    source once it survives the live staleness check; `waiting` counts the tasks scheduled on
    it that have not reported; `results` holds each task's decoded result by task name."""

    frame: Frame
    seq: int = 0
    timings: dict[str, float] = field(default_factory=dict)
    results: dict[str, Any] = field(default_factory=dict)
    waiting: int = 0
    dropped: bool = False
    reused: bool = False  # no lane ran: it takes its source's last results (motion gating)
    motion_boxes: Any = None  # where it moved since the models last ran (regions mode)
    windows: Any = None  # the windows its detector ran on (regions mode), None: whole


@dataclass(slots=True)
class Job:
    """One task's share of a frame: the input buffer slot it was prepared into, the geometry to
    map back, then the decoded result. `dropped`: evicted before inference (live mode)."""

    item: Item
    lane: int
    slot: int = -1
    geometry: Any = None
    output: Any = None
    dropped: bool = False


class _End:
    """Marks the end of a stage's input."""


END = _End()


class Flow:
    """The run's two brakes and the queue operations that respect them.

    `stopping`: stop reading, finish what is in flight. `aborting`: an error or a second
    interrupt; every blocked call returns so the threads end within POLL seconds."""

    def __init__(self) -> None:
        self.stopping = threading.Event()
        self.aborting = threading.Event()
        self._stop_seen: float | None = None

    def put(self, target: queue.Queue[Any], item: Any) -> bool:
        """Blocking put; False when the run is aborting."""
        while True:
            try:
                target.put(item, timeout=POLL)
                return True
            except queue.Full:
                if self.aborting.is_set():
                    return False

    def get(self, source: queue.Queue[Any] | queue.SimpleQueue[Any]) -> Any:
        """Blocking get; END when the run is aborting."""
        while True:
            try:
                return source.get(timeout=POLL)
            except queue.Empty:
                if self.aborting.is_set():
                    return END

    def readers_overdue(self) -> bool:
        """True once stop() is older than READER_GRACE: readers still reading are stuck in I/O
        (a stalled stream can block in FFmpeg for its whole read timeout) and have no frame in
        flight to finish, so the stages after them stop waiting."""
        if not self.stopping.is_set():
            return False
        if self._stop_seen is None:
            self._stop_seen = time.monotonic()
        return time.monotonic() - self._stop_seen > READER_GRACE

    def wait_for(
        self,
        readers: list[threading.Thread],
        workers: list[threading.Thread],
        drains: list[Callable[[], None]],
    ) -> None:
        """Let the stage threads end, calling `drains` (which empty the queues and give their
        buffers back) so no producer stays blocked.

        Aborting, threads only need to notice (they poll every POLL). A reader blocked in I/O is
        a daemon and is waited for briefly: it has no frame in flight."""
        now = time.monotonic()
        wait = 2 * POLL + 0.3 if self.aborting.is_set() else 10.0
        workers_until, readers_until = now + wait, now + min(wait, READER_GRACE)
        while (any(t.is_alive() for t in workers) and time.monotonic() < workers_until) or (
            any(t.is_alive() for t in readers) and time.monotonic() < readers_until
        ):
            for drain in drains:
                drain()
            time.sleep(0.01)
