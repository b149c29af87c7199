"""The torch backend's device-tensor path ('frames' input form): a module run on tensors that
are already on its device, with outputs left there.

Each of `streams` contexts has its own CUDA stream, input tensors and CUDA graphs; an inference
thread holds one for a whole batch (upload, prepare, run, decode), so with two threads one
batch uploads and prepares while the other computes. With CUDA graphs, a batch of N rows runs
the graph captured for the next power of two (at most the batch size): a handful of captures
cover every partial batch, the rows past N compute on stale input and are not read. A task's
preparing of a batch (`prepare`) is replayed as a graph of its own, per key. On the CPU the same
code runs with no streams or graphs (tests)."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor


def bucket(rows: int, batch: int) -> int:
    """The graph size a batch of `rows` runs at: the next power of two, at most `batch`."""
    size = 1
    while size < rows:
        size *= 2
    return min(max(size, rows), max(batch, rows))


def capture_graph(
    run: Callable[[Tensor], list[Tensor]], static: Tensor
) -> tuple[Any, list[Tensor]]:
    """`run` on `static` captured as a CUDA graph (the graph and its output tensors)."""
    return capture_call(lambda: run(static), static.device)


def capture_call(call: Callable[[], Any], device: torch.device) -> tuple[Any, Any]:
    """`call` captured as a CUDA graph (the graph and what the call returned): three warm-up
    runs on a side stream first, so cuDNN picks its kernels (and a call fills its caches)
    outside the capture."""
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            call()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    # A capture stream of its own (torch's default one is shared by every graph, and another
    # thread may capture at the same time); thread_local: other threads may sync or allocate.
    with torch.cuda.graph(graph, stream=side, capture_error_mode="thread_local"):
        outputs = call()
    return graph, outputs


# What runs after the model, in its graph: (the model's outputs, the context's buffers of the
# batch's size by name) → the tensors the caller reads (a task's device decoding).
Then = Callable[[list[Tensor], dict[str, Tensor]], list[Tensor]]


@dataclass
class _Context:
    stream: Any  # torch.cuda.Stream, or None on the CPU
    inputs: dict[int, Tensor] = field(default_factory=dict)
    buffers: dict[int, dict[str, Tensor]] = field(default_factory=dict)
    graphs: dict[tuple[int, Any], tuple[Any, list[Tensor], bool]] = field(default_factory=dict)
    preparing: dict[Any, Any] = field(default_factory=dict)  # key → its graph (None: eager)


class DeviceRunner:
    """`run` (the module's call, precision handling included) on device tensors of shape
    (rows, 3, *`input_hw`) in `dtype`; `graphs` replays CUDA graphs instead (CUDA only)."""

    def __init__(
        self,
        run: Callable[[Tensor], list[Tensor]],
        device: torch.device,
        dtype: torch.dtype,
        channels_last: bool,
        input_hw: tuple[int, int],
        batch: int,
        graphs: bool,
        streams: int,
        fixed_batch: bool = False,
    ) -> None:
        self._run, self.device, self.dtype = run, device, dtype
        self._fixed = fixed_batch  # the module runs `batch` rows only: fewer are padded
        self._layout = torch.channels_last if channels_last else torch.contiguous_format
        self._hw, self._batch, self._graphs = input_hw, batch, graphs
        cuda = device.type == "cuda"
        self._pool: queue.Queue[_Context] = queue.Queue()
        for _ in range(streams):
            self._pool.put(_Context(torch.cuda.Stream(device) if cuda else None))
        self._local = threading.local()

    @contextmanager
    def scope(self) -> Iterator[None]:
        """Hold a context (its stream current) for one batch's device work."""
        context = self._pool.get()
        self._local.context = context
        try:
            with torch.cuda.stream(context.stream) if context.stream is not None else nullcontext():
                yield
        finally:
            self._local.context = None
            self._pool.put(context)

    def _context(self) -> _Context:
        context = getattr(self._local, "context", None)
        if context is None:
            raise RuntimeError("device tensors are made and run inside backend.device_scope()")
        return context

    def _size(self, rows: int) -> int:
        """The rows a batch of `rows` runs at: the batch when fixed, else its graph's bucket."""
        if self._fixed:
            return max(rows, self._batch)
        return bucket(rows, self._batch) if self._graphs else rows

    def rows(self, rows: int) -> int:
        """The rows a batch of `rows` runs at (`input(rows)` is the first `rows` of them)."""
        return self._size(rows)

    def prepare(self, key: Any, call: Callable[[], Any]) -> None:
        """`call` (a batch's preparing: device work from this context's buffers into its
        input), replayed as a CUDA graph captured on first use of `key` in this context where
        graphs are on: one launch for its ~45 small operations. Where the capture fails, and
        without graphs, it runs as it is."""
        if not self._graphs:
            call()
            return
        context = self._context()
        if key not in context.preparing:
            try:
                context.preparing[key], _ = capture_call(call, self.device)
            except RuntimeError:  # an op the capture refuses: eager from now on
                torch.cuda.synchronize(self.device)
                context.preparing[key] = None
        graph = context.preparing[key]
        if graph is None:
            call()
        else:
            graph.replay()

    def input(self, rows: int) -> Tensor:
        """A (rows, 3, H, W) tensor to fill; valid until this context's next batch."""
        context = self._context()
        size = self._size(rows)
        static = context.inputs.get(size)
        if static is None:
            static = torch.empty((size, 3, *self._hw), dtype=self.dtype, device=self.device)
            context.inputs[size] = static = static.contiguous(memory_format=self._layout)
        return static[:rows]

    def buffer(self, name: str, rows: int, shape: tuple[int, ...], dtype: torch.dtype) -> Tensor:
        """A (rows, *shape) tensor named `name` that a `then` step reads (its batch's rows):
        one per context and graph size, so a graph reads the same memory at every replay."""
        context = self._context()
        size = self._size(rows)
        named = context.buffers.setdefault(size, {})
        if name not in named:
            named[name] = torch.zeros((size, *shape), dtype=dtype, device=self.device)
        return named[name][:rows]

    def infer(self, images: Tensor, then: Then | None = None) -> list[Tensor]:
        """The module's outputs for `images` (from `input`, or any tensor) on the device, or
        what `then` makes of them; with CUDA graphs `then` is captured with the model, or,
        where its capture fails, run after the model's graph."""
        rows, size = images.shape[0], self._size(images.shape[0])
        if not self._graphs:
            static = self.input(size)
            if images.data_ptr() != static.data_ptr() or size != rows:
                static[:rows].copy_(images)  # the rows past `rows` (padding) are stale
            outputs = [out[:rows] for out in self._run(static)]
        else:
            captured = self._replay(images, rows, size, then)
            if captured is not None:
                return [out[:rows] for out in captured]
            outputs = [out[:rows] for out in self._replay(images, rows, size, None) or []]
        if then is None:
            return outputs
        return [out[:rows] for out in then(outputs, self._context().buffers.get(size, {}))]

    def _replay(
        self, images: Tensor, rows: int, size: int, then: Then | None
    ) -> list[Tensor] | None:
        """Replay the graph of (`size`, `then`), captured on first use; None where `then` could
        not be captured (the caller runs it after the model's own graph)."""
        context = self._context()
        static = self.input(size)
        if images.data_ptr() != static.data_ptr():
            static[:rows].copy_(images)
        key = (size, then)
        if key not in context.graphs:
            context.graphs[key] = self._capture(static, size, then)
        graph, outputs, captured = context.graphs[key]
        if not captured:
            return None
        graph.replay()
        return outputs

    def _capture(
        self, static: Tensor, size: int, then: Then | None
    ) -> tuple[Any, list[Tensor], bool]:
        if then is None:
            return (*capture_graph(self._run, static), True)
        buffers = self._context().buffers.setdefault(size, {})
        try:
            return (*capture_graph(lambda x: then(self._run(x), buffers), static), True)
        except RuntimeError:  # an op the capture refuses: the model alone is graphed
            torch.cuda.synchronize(self.device)
            return None, [], False
