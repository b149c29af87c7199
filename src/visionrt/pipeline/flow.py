"""How stage threads hand frames on: bounded queues whose blocking calls give up when the run
aborts, the live-mode "freshest frame wins" hand-over, and helper-thread priority."""

from __future__ import annotations

import os
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from visionrt.types import Frame, Letterbox

POLL = 0.1  # seconds a blocked stage waits before re-checking for an abort
# After stop(), how long a stage waits for a reader stuck in I/O (a stalled stream can block in
# FFmpeg for its whole read timeout); a stuck reader has no frame in flight to finish.
READER_GRACE = 1.0


@dataclass(slots=True)
class Item:
    """A frame on its way through the stages (internal to the pipeline)."""

    frame: Frame
    seq: int = 0
    letterbox: Letterbox | None = None
    slot: int = -1
    output: npt.NDArray[np.float32] | None = None
    timings: dict[str, float] = field(default_factory=dict)


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

    def get(self, source: queue.Queue[Any], readers_grace: bool = False) -> Any:
        """Blocking get; END when the run is aborting, and with `readers_grace` also once stop
        is older than READER_GRACE and nothing arrives (readers stuck in I/O)."""
        while True:
            try:
                return source.get(timeout=POLL)
            except queue.Empty:
                if self.aborting.is_set():
                    return END
                if readers_grace and self.stopping.is_set():
                    if self._stop_seen is None:
                        self._stop_seen = time.monotonic()
                    elif time.monotonic() - self._stop_seen > READER_GRACE:
                        return END

    @property
    def readers_given_up(self) -> bool:
        """True once `get(..., readers_grace=True)` stopped waiting for stuck readers."""
        return self._stop_seen is not None and time.monotonic() - self._stop_seen > READER_GRACE

    @staticmethod
    def put_latest(target: queue.Queue[Any], item: Item, on_drop: Callable[[Item], None]) -> None:
        """Live mode: never wait; the oldest waiting frame makes room and goes to `on_drop`."""
        while True:
            try:
                target.put_nowait(item)
                return
            except queue.Full:
                try:
                    old = target.get_nowait()
                except queue.Empty:
                    continue
                if old is END:  # keep end markers; they are not frames
                    target.put(old)
                    continue
                on_drop(old)

    def wait_for(
        self,
        readers: list[threading.Thread],
        workers: list[threading.Thread],
        queues: list[queue.Queue[Any]],
        release: Callable[[Item], None],
    ) -> None:
        """Let the stage threads end, draining `queues` so no producer stays blocked.

        Aborting, threads only need to notice (they poll every POLL). A reader blocked in I/O is
        a daemon and is waited for briefly: it has no frame in flight."""
        now = time.monotonic()
        wait = 2 * POLL + 0.3 if self.aborting.is_set() else 10.0
        workers_until, readers_until = now + wait, now + min(wait, READER_GRACE)
        while (any(t.is_alive() for t in workers) and time.monotonic() < workers_until) or (
            any(t.is_alive() for t in readers) and time.monotonic() < readers_until
        ):
            for waiting in queues:
                while True:
                    try:
                        item = waiting.get_nowait()
                    except queue.Empty:
                        break
                    if isinstance(item, Item):
                        release(item)
            time.sleep(0.01)


def lower_priority(nice: int) -> None:
    """Raise the calling thread's niceness by `nice` (Linux threads have their own)."""
    try:
        current = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), min(19, current + nice))
    except (AttributeError, OSError):  # not Linux, or not allowed: run at normal priority
        pass
