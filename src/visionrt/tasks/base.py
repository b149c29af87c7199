"""The task contract: one model, from a decoded picture to a decoded result, in three steps the
pipeline schedules on its own threads (prepare on the preprocess thread, infer on inference
workers, decode on the consumer)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol

import numpy.typing as npt

from visionrt.backends import Backend
from visionrt.errors import ConfigError, VisionRTError

# What runtimes say when an allocation fails (CUDA, cuDNN, TensorRT, ONNX Runtime's arena,
# OpenVINO's plugins, the C++ host allocator).
OOM_MARKERS = (
    "out of memory",
    "outofmemory",
    "cuda_error_out_of_memory",
    "cudaerrormemoryallocation",
    "failed to allocate",
    "bad_alloc",
    "cannot allocate memory",
)


def is_out_of_memory(err: BaseException) -> bool:
    """True for a MemoryError and for the errors a runtime raises when an allocation fails."""
    if isinstance(err, MemoryError):
        return True
    text = f"{type(err).__name__}: {err}".lower()
    return any(marker in text for marker in OOM_MARKERS)


@contextmanager
def out_of_memory_as(what: str, fix: str) -> Iterator[None]:
    """Run the body; an out-of-memory error in it becomes one ConfigError line: `what` (the
    work and its size) ran out of memory, with the runtime's first line, and `fix`."""
    try:
        yield
    except VisionRTError:
        raise
    except Exception as err:  # MemoryError included
        if not is_out_of_memory(err):
            raise
        said = (str(err).strip().splitlines() or [""])[0][:160] or type(err).__name__
        raise ConfigError(f"{what}: out of memory ({said}); {fix}") from err


class Task(Protocol):
    """`name` keys the task's results ("detect", "depth"); `batch` is the largest batch one
    `infer` call takes; `backend` is the loaded runtime."""

    name: str
    batch: int
    backend: Backend

    def new_buffer(self) -> npt.NDArray[Any]:
        """One batch row of input, to be filled by `prepare`."""

    def prepare(self, image: npt.NDArray[Any], buffer: npt.NDArray[Any], last: Any) -> Any:
        """Fill `buffer` from a BGR image; `last` is the geometry the buffer holds already (or
        None). Returns the geometry `decode` needs to map results back to the source."""

    def infer(self, rows: list[npt.NDArray[Any]]) -> npt.NDArray[Any]:
        """Run prepared rows as one batch; one output row per input row."""

    def decode(self, output: npt.NDArray[Any], geometry: Any) -> Any:
        """One output row → the task's result in source pixels (Detections, DepthMap)."""

    def warm_up(self, calls: int) -> None: ...

    # Optional: `drain_events() -> dict[str, int]`, events counted since the last call (e.g. a
    # depth map recomputed in FP32); the pipeline adds them to the run's telemetry per source.

    def describe(self) -> dict[str, Any]:
        """What ran, for the run summary."""

    def close(self) -> None: ...


def run_one(task: Task, image: npt.NDArray[Any], buffer: npt.NDArray[Any]) -> Any:
    """One frame through a task outside the pipeline (the audit's and the geometry check's
    reference): prepare into `buffer`, infer a batch of one, decode."""
    geometry = task.prepare(image, buffer, None)
    return task.decode(task.infer([buffer])[0], geometry)
