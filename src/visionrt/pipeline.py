"""Wires source → preprocess → backend → postprocess → sinks as threads with bounded queues."""

from __future__ import annotations

import heapq
import os
import queue
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import numpy.typing as npt

from visionrt.backends import Backend, BackendOptions, load_backend
from visionrt.errors import ConfigError, SinkError
from visionrt.model import ModelSpec, read_model_spec
from visionrt.postprocess import PostprocessOptions, detect_layout
from visionrt.postprocess.yolo import decode_one
from visionrt.preprocess import InputLayout, Letterbox, compute_letterbox, letterbox_into
from visionrt.sinks import Sink
from visionrt.sources import Source, SourceOptions, open_source
from visionrt.telemetry import RunSummary, Telemetry
from visionrt.types import Frame, FrameResult

_POLL = 0.1  # seconds a blocked stage waits before re-checking for stop


@dataclass(frozen=True, slots=True)
class PipelineOptions:
    """`queue_size` bounds each queue between stages; `stale_after` (seconds) is the live-mode
    age past which a frame is dropped before inference; `warmup` inferences run at load;
    `opencv_threads` sizes OpenCV's process-wide pool while the pipeline runs (0: its default)."""

    queue_size: int = 4
    stale_after: float = 0.5
    warmup: int = 2
    # OpenCV's own thread pool: its parallel resize only competes with the inference threads.
    opencv_threads: int = 1
    # Niceness of the decode and preprocess threads: they then run in the inference runtime's
    # idle moments instead of preempting its workers (which stalls all of them at the next
    # barrier). 0 leaves them at the process's priority.
    helper_nice: int = 10

    def __post_init__(self) -> None:
        if self.queue_size < 1:
            raise ConfigError(f"pipeline.queue_size: expected >= 1, got {self.queue_size}")
        if self.stale_after <= 0:
            raise ConfigError(f"pipeline.stale_after: expected > 0 seconds, got {self.stale_after}")
        if self.warmup < 0:
            raise ConfigError(f"pipeline.warmup: expected >= 0, got {self.warmup}")


@dataclass(slots=True)
class _Item:
    """A frame on its way through the stages (internal: never leaves this module)."""

    frame: Frame
    seq: int = 0
    letterbox: Letterbox | None = None
    slot: int = -1
    output: npt.NDArray[np.float32] | None = None
    timings: dict[str, float] = field(default_factory=dict)


class _End:
    """Marks the end of a stage's input."""


_END = _End()


class Pipeline:
    """A detector over one or more sources.

    Iterate it for per-frame `FrameResult`s (file-mode frames come in order per source), or call
    `run()` to write them into sinks and get a `RunSummary`. `stop()` is safe from a signal
    handler: reading stops, frames in flight are finished, sinks are finalized.
    """

    def __init__(
        self,
        sources: Sequence[str | Source],
        model: str | Path,
        backend: str | Backend = "onnxruntime",
        backend_options: BackendOptions | None = None,
        postprocess: PostprocessOptions | None = None,
        source_options: SourceOptions | None = None,
        options: PipelineOptions | None = None,
    ) -> None:
        if not sources:
            raise ConfigError("no source given")
        self.options = options or PipelineOptions()
        self.postprocess = postprocess or PostprocessOptions()
        source_options = source_options or SourceOptions()
        # Open sources before loading the model: a bad path fails fast.
        self.sources: list[Source] = [
            s if isinstance(s, Source) else open_source(s, i, source_options)
            for i, s in enumerate(sources)
        ]
        self.live = any(s.live for s in self.sources)
        self.spec: ModelSpec = read_model_spec(model)
        # A loaded Backend can be shared by several pipelines in turn; its caller closes it.
        self._owns_backend = isinstance(backend, str)
        self.backend: Backend = (
            load_backend(backend, model, backend_options) if isinstance(backend, str) else backend
        )
        self.class_names = self.spec.class_names
        info = self.backend.info
        in_shape = info.inputs[0].shape
        self.layout = (
            InputLayout.NHWC_U8_BGR if info.inputs[0].dtype == "uint8" else InputLayout.NCHW_FLOAT
        )
        hw = in_shape[1:3] if self.layout is InputLayout.NHWC_U8_BGR else in_shape[2:4]
        self.input_hw: tuple[int, int] = (
            (int(hw[0]), int(hw[1]))
            if all(isinstance(d, int) and d > 0 for d in hw)
            else (
                backend_options.input_size
                if backend_options and backend_options.input_size
                else self.spec.input_size
            )
        )
        out_shape = [d if isinstance(d, int) else -1 for d in info.outputs[0].shape]
        self.head = detect_layout(
            out_shape, len(self.class_names), self.spec.end2end, self.postprocess.head
        )
        self.batch = max(1, (backend_options or BackendOptions()).batch)
        fixed = in_shape[0]
        if isinstance(fixed, int) and fixed > 0 and fixed != self.batch:
            raise ConfigError(
                f"inference.batch: {info.runtime} runs this model with its batch axis fixed at"
                f" {fixed}, got {self.batch} (export with a dynamic batch)"
            )
        self.telemetry = Telemetry()
        self._stop = threading.Event()
        self._errors: list[BaseException] = []
        self._buffers: list[npt.NDArray[Any]] = []
        self._free: queue.Queue[int] = queue.Queue()
        self._take_lock = threading.Lock()
        self._next_seq: dict[int, int] = {}
        self._warm_up()

    # -- public ----------------------------------------------------------------------------
    def stop(self) -> None:
        """Stop reading; frames already decoded are still finished."""
        self._stop.set()
        for source in self.sources:
            source.stop()

    @property
    def interrupted(self) -> bool:
        return self._stop.is_set()

    def __iter__(self) -> Iterator[FrameResult]:
        return self._results()

    def run(self, sinks: Sequence[Sink] = (), on_result: Any = None) -> RunSummary:
        """Process every source into `sinks`; always finalizes them, then returns the summary."""
        complete = False
        outputs: list[Path] = []
        try:
            for result in self._results():
                started = time.perf_counter()
                for sink in sinks:
                    try:
                        sink.write(result)
                    except SinkError:
                        raise
                    except OSError as err:  # a full disk, a vanished folder: one line, not a trace
                        raise SinkError(
                            f"writing {type(sink).__name__} output failed: {err}"
                        ) from err
                self.telemetry.record("sink", time.perf_counter() - started)
                if on_result is not None:
                    on_result(result)
            complete = True
        finally:
            for sink in sinks:
                try:
                    outputs.extend(sink.close(complete=complete))
                except Exception:
                    if complete:  # on the error path the first error is the one to report
                        raise
        summary = self.summary()
        summary.outputs = [str(p) for p in outputs]
        return summary

    def summary(self) -> RunSummary:
        summary = self.telemetry.summary()
        info = self.backend.info
        summary.backend = {
            "runtime": info.runtime,
            "version": info.version,
            "device": info.device,
            "precision": info.precision,
            "input_hw": list(self.input_hw),
            "batch": self.batch,
            "concurrency": self.backend.concurrency,
            **info.details,
        }
        summary.sources = [
            {
                "name": s.name,
                "live": s.live,
                "frames": s.stats.frames,
                "corrupt": s.stats.corrupt,
                "reconnects": s.stats.reconnects,
                "gap_seconds": round(s.stats.gap_seconds, 3),
                "ended_early": s.stats.ended_early,
            }
            for s in self.sources
        ]
        summary.interrupted = self._stop.is_set()
        summary.error = "; ".join(s.stats.ended_early for s in self.sources if s.stats.ended_early)
        return summary

    def close(self) -> None:
        for source in self.sources:
            source.close()
        if self._owns_backend:
            self.backend.close()

    # -- stages ----------------------------------------------------------------------------
    def _new_buffer(self) -> npt.NDArray[Any]:
        height, width = self.input_hw
        if self.layout is InputLayout.NHWC_U8_BGR:
            return np.empty((1, height, width, 3), np.uint8)
        return np.empty((1, 3, height, width), np.float32)

    def _warm_up(self) -> None:
        name = self.backend.info.inputs[0].name
        blank = self._new_buffer()
        blank[...] = 0
        if self.batch > 1:
            blank = np.repeat(blank, self.batch, axis=0)
        for _ in range(self.options.warmup):
            self.backend.infer({name: blank})

    def _results(self) -> Iterator[FrameResult]:
        concurrency = max(1, self.backend.concurrency)
        # Live: one frame waits per stage at most, so latency cannot build up behind a queue;
        # the freshest decoded frame replaces the waiting one.
        size = concurrency * self.batch if self.live else self.options.queue_size
        pool = size + concurrency * self.batch + 2
        self._buffers = [self._new_buffer() for _ in range(pool)]
        self._geometry: list[Letterbox | None] = [None] * pool
        for slot in range(pool):
            self._free.put(slot)
        decoded: queue.Queue[Any] = queue.Queue(maxsize=size)
        prepared: queue.Queue[Any] = queue.Queue(maxsize=size)
        inferred: queue.Queue[Any] = queue.Queue(maxsize=size + concurrency)
        readers = [
            threading.Thread(
                target=self._guard, args=(self._read, s, decoded), name=f"source-{i}", daemon=True
            )
            for i, s in enumerate(self.sources)
        ]
        workers = [
            threading.Thread(
                target=self._guard,
                args=(self._preprocess, decoded, prepared, len(readers), concurrency),
                name="preprocess",
                daemon=True,
            ),
            *(
                threading.Thread(
                    target=self._guard,
                    args=(self._infer, prepared, inferred),
                    name=f"infer-{i}",
                    daemon=True,
                )
                for i in range(concurrency)
            ),
        ]
        if self.options.opencv_threads:
            cv2.setNumThreads(self.options.opencv_threads)
        self.telemetry.start()
        for thread in [*readers, *workers]:
            thread.start()
        try:
            yield from self._postprocess(inferred, concurrency)
        finally:
            if self._errors:
                self.stop()
            self.telemetry.stop()
            self._stop_threads(readers + workers, [decoded, prepared, inferred])
        if self._errors:
            raise self._errors[0]

    def _guard(self, stage: Any, *args: Any) -> None:
        """Run a stage; an exception stops the pipeline and reaches the caller."""
        try:
            if self.options.helper_nice and stage in (self._read, self._preprocess):
                _lower_priority(self.options.helper_nice)
            stage(*args)
        except BaseException as err:
            self._errors.append(err)
            self.stop()

    def _put(self, target: queue.Queue[Any], item: Any) -> bool:
        """Blocking put that gives up when the pipeline is stopping with an error."""
        while True:
            try:
                target.put(item, timeout=_POLL)
                return True
            except queue.Full:
                if self._errors:
                    return False

    def _read(self, source: Source, decoded: queue.Queue[Any]) -> None:
        try:
            frames = source.frames()
            while True:
                started = time.perf_counter()
                frame = next(frames, None)
                if frame is None:
                    break
                self.telemetry.frame_in()
                item = _Item(frame, timings={"decode": time.perf_counter() - started})
                self.telemetry.record("decode", item.timings["decode"])
                if source.live:
                    self._put_latest(decoded, item, "decode")
                elif not self._put(decoded, item):
                    break
        finally:
            self._put(decoded, _END)

    def _put_latest(self, target: queue.Queue[Any], item: _Item, stage: str) -> None:
        """Live mode: never wait; the oldest waiting frame makes room and is counted as dropped
        by `stage` (its input buffer goes back to the pool)."""
        while True:
            try:
                target.put_nowait(item)
                return
            except queue.Full:
                try:
                    old = target.get_nowait()
                except queue.Empty:
                    continue
                if old is _END:  # keep end markers; they are not frames
                    target.put(old)
                    continue
                if old.slot >= 0:
                    self._free.put(old.slot)
                self.telemetry.drop(stage, "queue full, newer frame kept")

    def _preprocess(
        self, decoded: queue.Queue[Any], prepared: queue.Queue[Any], readers: int, concurrency: int
    ) -> None:
        ended = 0
        while ended < readers:
            item = decoded.get()
            if item is _END:
                ended += 1
                continue
            frame = item.frame
            if self.sources[frame.source_id].live and (
                time.perf_counter() - frame.captured_at > self.options.stale_after
            ):
                self.telemetry.drop("preprocess", f"older than {self.options.stale_after}s")
                continue
            started = time.perf_counter()
            slot = self._free.get()
            box = compute_letterbox(frame.image.shape[:2], self.input_hw)
            letterbox_into(
                frame.image,
                self._buffers[slot][0],
                box,
                self.layout,
                fill_padding=self._geometry[slot] != box,
            )
            self._geometry[slot] = box
            item.letterbox, item.slot = box, slot
            item.timings["preprocess"] = time.perf_counter() - started
            self.telemetry.record("preprocess", item.timings["preprocess"])
            if self.sources[frame.source_id].live:
                self._put_latest(prepared, item, "preprocess")
            elif not self._put(prepared, item):
                return
        for _ in range(concurrency):
            self._put(prepared, _END)

    def _infer(self, prepared: queue.Queue[Any], inferred: queue.Queue[Any]) -> None:
        name = self.backend.info.inputs[0].name
        while True:
            batch = self._take(prepared)
            if not batch:
                self._put(inferred, _END)
                return
            item = batch[0]
            started = time.perf_counter()
            if len(batch) == 1:
                tensor = self._buffers[item.slot]
            else:
                tensor = np.concatenate([self._buffers[b.slot] for b in batch])
            if self.batch > 1 and tensor.shape[0] < self.batch and self._fixed_batch():
                pad = np.repeat(tensor[:1], self.batch - tensor.shape[0], axis=0)
                tensor = np.concatenate([tensor, pad])
            output = self.backend.infer({name: tensor})[0]
            seconds = time.perf_counter() - started
            for i, member in enumerate(batch):
                self._free.put(member.slot)
                member.output = output[i]
                member.timings["infer"] = seconds
                self.telemetry.record("infer", seconds)
                if not self._put(inferred, member):
                    return

    def _take(self, prepared: queue.Queue[Any]) -> list[_Item]:
        """The next batch (empty at the end), numbered per source in the order taken: frames
        dropped before this point leave no gap, so the consumer's reordering never waits."""
        with self._take_lock:
            item = prepared.get()
            if item is _END:
                return []
            batch = [item]
            while len(batch) < self.batch:  # take what is already waiting; never wait for more
                try:
                    extra = prepared.get_nowait()
                except queue.Empty:
                    break
                if extra is _END:
                    prepared.put(_END)
                    break
                batch.append(extra)
            for member in batch:
                source_id = member.frame.source_id
                member.seq = self._next_seq.get(source_id, 0)
                self._next_seq[source_id] = member.seq + 1
            return batch

    def _fixed_batch(self) -> bool:
        first = self.backend.info.inputs[0].shape[0]
        return isinstance(first, int) and first > 1

    def _postprocess(self, inferred: queue.Queue[Any], workers: int) -> Iterator[FrameResult]:
        ended = 0
        waiting: list[tuple[int, int, int, _Item]] = []  # (source, seq, tiebreak, item)
        expected: dict[int, int] = {}
        counter = 0
        while ended < workers:
            try:
                item = inferred.get(timeout=_POLL)
            except queue.Empty:
                continue
            if item is _END:
                ended += 1
                continue
            counter += 1
            heapq.heappush(waiting, (item.frame.source_id, item.seq, counter, item))
            yield from self._release_in_order(waiting, expected)
        yield from self._release_in_order(waiting, expected, flush=True)

    def _release_in_order(
        self,
        waiting: list[tuple[int, int, int, _Item]],
        expected: dict[int, int],
        flush: bool = False,
    ) -> Iterator[FrameResult]:
        # With several inference workers results can overtake each other; per source, release
        # only the next expected sequence number so file-mode output stays in order.
        held: list[tuple[int, int, int, _Item]] = []
        while waiting:
            entry = heapq.heappop(waiting)
            source_id, seq, _, item = entry
            if flush or seq == expected.get(source_id, 0):
                expected[source_id] = seq + 1
                yield self._finish(item)
            else:
                held.append(entry)
        for entry in held:
            heapq.heappush(waiting, entry)

    def _finish(self, item: _Item) -> FrameResult:
        started = time.perf_counter()
        assert item.output is not None
        assert item.letterbox is not None
        detections = decode_one(item.output, self.head, item.letterbox, self.postprocess)
        now = time.perf_counter()
        item.timings["postprocess"] = now - started
        self.telemetry.record("postprocess", item.timings["postprocess"])
        self.telemetry.frame_out(now - item.frame.captured_at)
        return FrameResult(item.frame, detections, item.timings, self.class_names)

    def _stop_threads(
        self, threads: list[threading.Thread], queues: list[queue.Queue[Any]]
    ) -> None:
        if any(t.is_alive() for t in threads):
            self.stop()
            deadline = time.monotonic() + 10
            while any(t.is_alive() for t in threads) and time.monotonic() < deadline:
                for q in queues:  # unblock producers of a consumer that left early
                    while True:
                        try:
                            item = q.get_nowait()
                        except queue.Empty:
                            break
                        if isinstance(item, _Item) and item.slot >= 0 and item.output is None:
                            self._free.put(item.slot)
                time.sleep(0.01)


def _lower_priority(nice: int) -> None:
    """Raise the calling thread's niceness by `nice` (Linux threads have their own)."""
    try:
        current = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), min(19, current + nice))
    except (AttributeError, OSError):  # not Linux, or not allowed: run at normal priority
        pass
