"""Per-source inboxes between two stages, taken round-robin: a batcher's fairness and live
mode's "freshest frame wins" without one camera evicting another's frames."""

from __future__ import annotations

import bisect
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

from visionrt.pipeline.flow import POLL

T = TypeVar("T")


class Inboxes(Generic[T]):
    """One bounded inbox per source.

    File mode `put` waits while its source's inbox is full (back-pressure, nothing lost). Live
    `put` never waits: the oldest item *of the same source* makes room and goes to `on_evict`.
    `take` hands out up to `most` items round-robin across sources, so a fast source cannot
    starve a slow one; several consumers may take at once. Its `ready(source)` leaves a source's
    items waiting while it says no (the consumer's own next step for that source would wait),
    and `nudge()` tells the consumers that a source may be ready again. `on_room()` is called
    when a take made room in a full inbox (its producer may be ready again); a producer of
    several sources waits for any of theirs to get room (`wait_for_room`). Every blocking call
    gives up when `aborting` is set; `take` also once `give_up()` says the producers will not
    come back (readers stuck in I/O after a stop).

    Consumers wait on one condition and each source's producer on its own, so an item wakes
    one consumer and a take wakes only the producers it made room for: with one condition for
    all, 32 cameras' readers woke at every take and every put, and 32 streams ran at a third
    of one stream's frame rate on the host. A wake-up is sent only where someone can be waiting
    (a consumer is, or the inbox was full): at 32 streams the notifies that woke nobody took a
    sixth of the time the pipeline's threads held the GIL. A consumer filling a batch is woken
    once as many items as it still wants could be there (or at its deadline), not by each put.
    (Waking a producer only once its inbox had drained to half made one stream slower and 32
    no faster.)"""

    def __init__(
        self,
        capacity: int,
        aborting: threading.Event,
        give_up: Callable[[], bool] | None = None,
        on_room: Callable[[], None] | None = None,
    ) -> None:
        self.capacity = max(1, capacity)
        self._aborting = aborting
        self._give_up = give_up
        self._on_room = on_room
        self._lock = threading.RLock()
        self._ready = threading.Condition(self._lock)  # consumers: an item, or closed
        self._any_room = threading.Condition(self._lock)  # a producer of several sources
        self._room_wanted = 0  # producers waiting on `_any_room`
        self._room: dict[int, threading.Condition] = {}  # each source's producer: space
        self._boxes: dict[int, deque[T]] = {}
        self._order: list[int] = []  # the sources, sorted: the round-robin's line
        self._cursor = 0
        self._closed = False
        # Each consumer waiting on `_ready`: how many items it waits for (1: its first; more:
        # the rest of a batch, until its deadline).
        self._needs: list[int] = []
        self._count = 0  # items waiting, over all sources

    def put(
        self, source: int, item: T, live: bool, on_evict: Callable[[T], None] | None = None
    ) -> bool:
        """Add an item; False when the run is aborting (the item was not added)."""
        evicted: T | None = None
        with self._lock:
            box = self._boxes.get(source)
            if box is None:
                box = self._boxes[source] = deque()
                bisect.insort(self._order, source)
                self._room[source] = threading.Condition(self._lock)
            if live:
                if len(box) >= self.capacity:
                    evicted = box.popleft()
                    self._count -= 1
            else:
                while len(box) >= self.capacity:
                    if self._aborting.is_set():
                        return False
                    self._room[source].wait(POLL)
            box.append(item)
            self._count += 1
            if self._needs and self._count >= min(self._needs):
                self._notify()
        if evicted is not None and on_evict is not None:
            on_evict(evicted)
        return True

    def close(self) -> None:
        """No more puts: consumers get what is left, then an empty list."""
        with self._lock:
            self._closed = True
            self._wake_all()

    def take(
        self,
        most: int,
        wait: float = 0.0,
        ready: Callable[[int], bool] | None = None,
        one_each: bool = False,
    ) -> list[T]:
        """Up to `most` items, round-robin across the sources `ready` says yes to (None: all;
        `one_each`: at most one of each source). Waits for the first; then up to `wait`
        seconds for more (0: only what is there). Empty:
        closed and drained, or aborting."""
        with self._lock:
            while True:  # `ready` asked once per source a try reaches, not again to take
                if self._aborting.is_set():
                    return []
                taken, made_room = self._pick(most, ready, one_each)
                if taken:
                    break
                if self._closed and not self._waiting():
                    return []
                if self._give_up is not None and self._give_up():
                    return []
                self._wait(POLL)
            deadline = time.monotonic() + wait
            while len(taken) < most and not self._closed and not self._aborting.is_set():
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._wait(left, most - len(taken))
                more, room = self._pick(most - len(taken), ready, one_each)
                taken += more
                made_room = made_room or room
            if self._needs and self._count:
                self._notify()  # left for another consumer
        if made_room and self._on_room is not None:
            self._on_room()  # outside the lock: it may take the producer's inbox's lock
        return taken

    def wait_for_room(self, sources: Sequence[int], seconds: float) -> None:
        """Return once one of `sources`' inboxes has room, or after `seconds` (at once when
        aborting): a producer of several sources (a shared file reader) waits for whichever
        gets room first instead of blocking on one."""
        with self._lock:
            if self._aborting.is_set() or not all(self.full(s) for s in sources):
                return
            self._room_wanted += 1
            try:
                self._any_room.wait(seconds)
            finally:
                self._room_wanted -= 1

    def nudge(self) -> None:
        """A source `take`'s `ready` said no to may say yes now: waiting consumers look again."""
        with self._lock:
            if self._needs:
                self._ready.notify_all()

    def drain(self) -> list[T]:
        """Everything waiting (the end of an aborted run)."""
        with self._lock:
            items = [item for box in self._boxes.values() for item in box]
            for box in self._boxes.values():
                box.clear()
            self._count = 0
            self._wake_all()
            return items

    def full(self, source: int) -> bool:
        """The source's inbox is full: its next file-mode put waits."""
        box = self._boxes.get(source)
        return box is not None and len(box) >= self.capacity

    def depth(self) -> int:
        """Items waiting now, over all sources."""
        return sum(len(box) for box in list(self._boxes.values()))

    def _wake_all(self) -> None:
        self._ready.notify_all()
        self._any_room.notify_all()
        for room in self._room.values():
            room.notify_all()

    def _wait(self, seconds: float, need: int = 1) -> None:
        """Wait until `need` items could be there (a put wakes this consumer only then: a
        batcher filling 32 rows was woken by each of them), or `seconds`."""
        self._needs.append(need)
        try:
            self._ready.wait(seconds)
        finally:
            self._needs.remove(need)

    def _notify(self) -> None:
        if len(self._needs) == 1:
            self._ready.notify()
        else:  # several: the one whose need is met may not be first in line
            self._ready.notify_all()

    def _waiting(self) -> bool:
        return any(self._boxes.values())

    def _pick(
        self, most: int, ready: Callable[[int], bool] | None, one_each: bool = False
    ) -> tuple[list[T], bool]:
        """One item per non-empty (ready) source per round (`one_each`: one round), starting
        after the last source served; and whether a full inbox got room. `ready` is asked once
        per source a round reaches (the first round of a take of one item stops at the first
        ready source)."""
        taken: list[T] = []
        made_room = False
        order = self._order
        count = len(order)
        if not count:
            return taken, made_room
        start = bisect.bisect_left(order, self._cursor) % count
        skipped: set[int] = set()
        while len(taken) < most:
            found = False
            for step in range(count):
                source = order[(start + step) % count]
                box = self._boxes[source]
                if not box or source in skipped:
                    continue
                if ready is not None and not ready(source):
                    skipped.add(source)
                    continue
                found = True
                if len(box) >= self.capacity:  # its producer may be waiting for room
                    self._room[source].notify()
                    if self._room_wanted:
                        self._any_room.notify_all()
                    made_room = True
                taken.append(box.popleft())
                self._count -= 1
                self._cursor = source + 1
                if len(taken) >= most:
                    break
            if not found or one_each:
                break
        return taken, made_room
