"""Per-source release in sequence order: results from parallel inference workers can overtake
each other, file-mode output must not."""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from typing import Generic, TypeVar

T = TypeVar("T")


class InOrder(Generic[T]):
    """Holds items until every lower sequence number of the same source has been released.

    Sequence numbers are given per source from 0 without gaps (frames dropped earlier are never
    numbered), so nothing waits for a number that will not come."""

    def __init__(self) -> None:
        self._waiting: list[tuple[int, int, int, T]] = []  # (source, seq, tiebreak, item)
        self._expected: dict[int, int] = {}
        self._count = 0

    def push(self, source_id: int, seq: int, item: T) -> Iterator[T]:
        """Add an item; yields every item that is now next in line."""
        self._count += 1
        heapq.heappush(self._waiting, (source_id, seq, self._count, item))
        return self._release(flush=False)

    def flush(self) -> Iterator[T]:
        """Everything still held, in order (the end of the run)."""
        return self._release(flush=True)

    def _release(self, flush: bool) -> Iterator[T]:
        held: list[tuple[int, int, int, T]] = []
        while self._waiting:
            entry = heapq.heappop(self._waiting)
            source_id, seq, _, item = entry
            if flush or seq == self._expected.get(source_id, 0):
                self._expected[source_id] = seq + 1
                yield item
            else:
                held.append(entry)
        for entry in held:
            heapq.heappush(self._waiting, entry)
