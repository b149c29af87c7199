"""The task contract: one model, from a decoded picture to a decoded result, in three steps the
pipeline schedules on its own threads (prepare on the preprocess thread, infer and then decode
on the task's inference workers; several workers may decode at once)."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Protocol

import numpy as np
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
    `infer` call takes; `backend` is the loaded runtime. A task whose `takes_i420` is true (its
    frames go to a device, which converts them) is given `Frame.pixels` as decoded, BGR or I420;
    any other, BGR."""

    name: str
    batch: int
    backend: Backend

    def new_buffer(self) -> npt.NDArray[Any]:
        """One batch row of input, to be filled by `prepare`."""

    def prepare(self, image: npt.NDArray[Any], buffer: npt.NDArray[Any], last: Any) -> Any:
        """Fill `buffer` from a BGR image; `last` is the geometry the buffer holds already (or
        None). Returns the geometry `decode` needs to map results back to the source."""

    def infer(self, rows: list[npt.NDArray[Any]]) -> npt.NDArray[Any] | Sequence[npt.NDArray[Any]]:
        """Run prepared rows as one batch; one output row per input row (the rows of one array,
        or one array each)."""

    def decode(self, output: npt.NDArray[Any], geometry: Any) -> Any:
        """One output row → the task's result in source pixels (Detections, DepthMap)."""

    def warm_up(self, calls: int) -> None: ...

    def drain_events(self) -> dict[str, int]:
        """Events counted since the last call (e.g. a depth map recomputed in FP32), which the
        pipeline adds to the run's telemetry per source; thread-safe."""

    def describe(self) -> dict[str, Any]:
        """What ran, for the run summary."""

    def close(self) -> None: ...


class BatchBuffers:
    """The input of one `infer` call, filled in place instead of concatenated into a new array:
    one array per inference worker thread (a batch is in use until its call returns). `pad` (a
    model whose batch axis is fixed at `batch`) repeats the first row into the rows left."""

    def __init__(self, batch: int, pad: bool = False) -> None:
        self.batch, self.pad = batch, pad
        self._local = threading.local()

    def fill(self, rows: Sequence[npt.NDArray[Any]]) -> npt.NDArray[Any]:
        count = len(rows)
        size = max(count, self.batch) if self.pad else count
        if count == 1 and size == 1:
            return rows[0]
        stacked = sum(row.shape[0] for row in rows)
        shape = (max(stacked, size), *rows[0].shape[1:])
        array = getattr(self._local, "array", None)
        if array is None or array.shape[0] < shape[0] or array.shape[1:] != shape[1:]:
            array = self._local.array = np.empty(shape, rows[0].dtype)
        np.concatenate(rows, out=array[:stacked])
        if stacked < size:
            array[stacked:size] = array[0]
        return array[: max(stacked, size)]


def batch_buffers(fixed: Any, batch: int, refused: str) -> BatchBuffers:
    """The batch buffers of a model whose input's batch axis is `fixed` (an int when the model
    fixes it); a fixed axis other than `batch` is refused with `refused` (formatted with
    `fixed`), and a fixed batch above 1 pads short batches."""
    if isinstance(fixed, int) and fixed > 0 and fixed != batch:
        raise ConfigError(refused.format(fixed=fixed))
    return BatchBuffers(batch, pad=isinstance(fixed, int) and fixed > 1)


def run_one(task: Task, image: npt.NDArray[Any], buffer: npt.NDArray[Any]) -> Any:
    """One frame through a task outside the pipeline (the audit's and the geometry check's
    reference): prepare into `buffer`, infer a batch of one, decode."""
    geometry = task.prepare(image, buffer, None)
    return task.decode(task.infer([buffer])[0], geometry)


def warm_up_device(infer: Any, slots: Sequence[Any], calls: int, contexts: int) -> None:
    """A device task's warm-up: `infer` a batch of every power of two below len(`slots`) in
    each of the backend's `contexts` (calls go round them), then `calls` full batches (at least
    one per context): a backend that captures CUDA graphs per batch size does so here, before
    the run, never two at once."""
    batch = len(slots)
    sizes = [1 << i for i in range(batch.bit_length()) if 1 << i < batch]
    for size in sizes:
        for _ in range(contexts):
            infer(list(slots[:size]))
    for _ in range(max(calls, contexts)):
        infer(list(slots))
