"""The largest batch that fits on the device and still pays: batches doubled until one runs out
of memory or stops raising throughput, then a binary search between the last batch that ran and
the first that did not fit, recovering from each out-of-memory error."""

from __future__ import annotations

import gc
import sys
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from visionrt.backends import BackendOptions
from visionrt.errors import ConfigError
from visionrt.tasks.base import is_out_of_memory


def free_device_memory() -> None:
    """Give back what a failed batch left allocated: Python garbage, and PyTorch's CUDA cache
    when torch is already loaded (never imported here just for this)."""
    gc.collect()
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        torch.cuda.empty_cache()


@dataclass(frozen=True, slots=True)
class BatchPoint:
    """One batch tried: frames per second, or why it did not run."""

    batch: int
    fps: float = 0.0
    error: str = ""

    @property
    def fits(self) -> bool:
        return not self.error


@dataclass(slots=True)
class BatchSearch:
    """Every batch tried in order; `largest_fit` the largest that ran; `best` the smallest batch
    within `gain` of the highest throughput (a smaller batch has lower latency)."""

    points: list[BatchPoint] = field(default_factory=list)
    best: int = 0
    largest_fit: int = 0
    stopped: str = ""  # why the doubling stopped
    confirmed: str = ""  # the end-to-end comparison with batch 1 (tune_gpu_batch)

    def to_json(self) -> dict[str, object]:
        return {
            "best": self.best,
            "largest_fit": self.largest_fit,
            "stopped": self.stopped,
            "confirmed": self.confirmed,
            "points": [
                {"batch": p.batch, "fps": round(p.fps, 2), "error": p.error} for p in self.points
            ],
        }


def search_batch(
    measure: Callable[[int], float],
    max_batch: int = 256,
    gain: float = 1.05,
    recover: Callable[[], None] = free_device_memory,
    on_point: Callable[[BatchPoint], None] | None = None,
) -> BatchSearch:
    """Find the batch to run at. `measure(b)` returns frames per second at batch `b` or raises;
    an out-of-memory error marks `b` as too large (then `recover()` runs), any other error is
    raised, but a ConfigError at a batch > 1 (a model that cannot run batched) ends the search.
    Doubling stops at the first batch that does not fit, at `max_batch`, or once a
    doubling raises throughput by less than `gain`×; after an out-of-memory error the largest
    fitting batch between the last good and the first failed one is found by bisection."""
    if max_batch < 1:
        raise ValueError(f"max_batch: expected >= 1, got {max_batch}")
    search = BatchSearch()

    def attempt(batch: int) -> BatchPoint:
        try:
            point = BatchPoint(batch, float(measure(batch)))
        except Exception as err:
            first = (str(err).strip().splitlines() or [""])[0][:200]
            if isinstance(err, ConfigError) and batch > 1:  # the model cannot run batched
                point = BatchPoint(batch, error=f"cannot run: {first}")
            elif is_out_of_memory(err):
                recover()
                point = BatchPoint(batch, error=f"out of memory: {first}")
            else:
                raise
        search.points.append(point)
        if on_point is not None:
            on_point(point)
        return point

    batch, last_fit, first_fail, best_fps = 1, 0, 0, 0.0
    while batch <= max_batch:
        point = attempt(batch)
        if point.error.startswith("cannot run"):
            search.stopped = f"batch {batch}: {point.error}"
            break
        if not point.fits:
            first_fail, search.stopped = batch, f"batch {batch} does not fit"
            break
        last_fit = batch
        if best_fps and point.fps < best_fps * gain:
            search.stopped = f"batch {batch} gains less than {gain:g}× over {batch // 2}"
            best_fps = max(best_fps, point.fps)
            break
        best_fps = max(best_fps, point.fps)
        batch *= 2
    else:
        search.stopped = f"reached max_batch {max_batch}"
    if first_fail and last_fit:
        low, high = last_fit, first_fail
        while high - low > max(1, low // 8):  # to within 12.5 %: finer steps do not pay
            middle = (low + high) // 2
            if attempt(middle).fits:
                low = middle
            else:
                high = middle
    fitting = [p for p in search.points if p.fits]
    if not fitting:
        search.stopped = "not even batch 1 fits"
        return search
    search.largest_fit = max(p.batch for p in fitting)
    top = max(p.fps for p in fitting)
    search.best = min(p.batch for p in fitting if p.fps * gain >= top)
    return search


def batch_throughput(
    model: str,
    backend: str,
    options: BackendOptions,
    video: str,
    calls: int = 10,
) -> Callable[[int], float]:
    """A `measure` for `search_batch`: model-only frames per second of `model` at each batch,
    on prepared frames of `video` (a batch-1 ONNX runs from its batch-N rewrite). The model is
    loaded per batch and released before the next, so an out-of-memory batch leaves nothing."""
    from visionrt.bench.measure import measure_model_only, prepared_inputs
    from visionrt.tasks import DetectTask

    frames: dict[tuple[tuple[int, int], str], list[Any]] = {}

    def measure(batch: int) -> float:
        task = DetectTask(model, backend, replace(options, batch=batch))
        try:
            key = (task.input_hw, task.layout.name)
            if key not in frames:
                frames[key] = prepared_inputs(video, task.input_hw, task.layout, frames=8)
            rows = frames[key]
            inputs = [
                np.concatenate([rows[(i + j) % len(rows)] for j in range(batch)])
                for i in range(min(4, len(rows)))
            ]
            seconds = measure_model_only(task.backend, inputs, calls, warmup=2)
            return batch / float(np.median(seconds))
        finally:
            task.close()

    return measure
