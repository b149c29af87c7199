"""Measurements kept for summaries: `Samples`, the newest values of a series in a bounded NumPy
ring, and `percentiles` of them."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

MAX_SAMPLES = 200_000  # per stage; a long live run keeps the most recent ones


class Samples:
    """The most recent `cap` measurements (seconds) in a NumPy ring: 8 bytes each where a deque
    of Python floats costs ~32, so a 24/7 run's telemetry stays a few MB (the soak's RSS drift).
    The ring grows by doubling up to `cap`; appends are thread-safe. They go to a short list
    first, moved into the ring `PENDING` at a time: one NumPy store per sample cost each of a
    pipeline's threads as much as a hand-off, with the GIL held."""

    PENDING = 256

    def __init__(self, cap: int = MAX_SAMPLES) -> None:
        self._cap = cap
        self._data = np.empty(min(cap, 1024), np.float64)
        self._count = 0  # moved into the ring so far
        self._pending: list[float] = []
        self._lock = threading.Lock()

    def append(self, value: float) -> None:
        with self._lock:
            self._pending.append(value)
            if len(self._pending) >= self.PENDING:
                self._flush()

    def _flush(self) -> None:
        if not self._pending:
            return
        values = np.asarray(self._pending, np.float64)
        self._pending.clear()
        if len(values) > self._cap:  # only the newest `cap` are kept anyway
            self._count += len(values) - self._cap
            values = values[-self._cap :]
        needed = min(self._cap, self._count + len(values))
        if needed > self._data.shape[0]:
            size = self._data.shape[0]
            while size < needed:
                size *= 2
            grown = np.empty(min(self._cap, size), np.float64)
            grown[: self._data.shape[0]] = self._data
            self._data = grown
        self._data[(self._count + np.arange(len(values))) % self._cap] = values
        self._count += len(values)

    def values(self) -> npt.NDArray[np.float64]:
        """A copy of the samples held (in no particular order)."""
        with self._lock:
            self._flush()
            return self._data[: min(self._count, self._cap)].copy()

    def take(self) -> npt.NDArray[np.float64]:
        """The samples held, emptying the ring (a window read once per telemetry line)."""
        with self._lock:
            self._flush()
            values = self._data[: min(self._count, self._cap)].copy()
            self._count = 0
            return values

    def __len__(self) -> int:
        with self._lock:
            return min(self._count + len(self._pending), self._cap)


def percentiles(samples: Sequence[float] | Samples | npt.NDArray[np.float64]) -> dict[str, float]:
    """p50/p95/p99/mean of `samples` (seconds) in milliseconds; zeros when empty."""
    if isinstance(samples, Samples):
        samples = samples.values()
    if len(samples) == 0:
        return {"p50": 0.0, "p95": 0.0, "p99": 0.0, "mean": 0.0}
    values = np.asarray(samples, dtype=np.float64) * 1e3
    p50, p95, p99 = np.percentile(values, [50, 95, 99])
    return {"p50": float(p50), "p95": float(p95), "p99": float(p99), "mean": float(values.mean())}
