"""The `Pipeline` facade: sources → preprocess → inference workers → in-order decode → sinks, as
threads joined by bounded queues."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import cv2
import numpy.typing as npt

from visionrt.backends import Backend, BackendOptions
from visionrt.errors import ConfigError, SinkError, StageError, VisionRTError
from visionrt.pipeline.flow import END, Flow, Item, lower_priority
from visionrt.pipeline.options import PipelineOptions
from visionrt.pipeline.ordering import InOrder
from visionrt.postprocess import PostprocessOptions
from visionrt.sinks import Sink
from visionrt.sources import Source, SourceOptions, open_source
from visionrt.tasks import DetectTask
from visionrt.telemetry import RunSummary, Telemetry
from visionrt.types import FrameResult, Letterbox


class Pipeline:
    """A detector over one or more sources.

    Iterate it for per-frame `FrameResult`s (file-mode frames come in order per source), or call
    `run()` to write them into sinks and get a `RunSummary`; a Pipeline runs once. `stop()` is
    safe from a signal handler: reading stops, frames in flight are finished, sinks are
    finalized. A stage that raises stops the run within a second and its error reaches the
    caller. `backend` "" picks the runtime that reads the model file (see backends.registry).
    """

    def __init__(
        self,
        sources: Sequence[str | Source],
        model: str | Path,
        backend: str | Backend = "",
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
        self.task = DetectTask(model, backend, backend_options, self.postprocess)
        # The task's facts, under the names callers use.
        self.backend, self.spec = self.task.backend, self.task.spec
        self.input_hw, self.layout = self.task.input_hw, self.task.layout
        self.class_names, self.batch = self.task.class_names, self.task.batch
        self.telemetry = Telemetry()
        self._flow = Flow()
        self._interrupted = False
        self._started = self._closed = False
        self._readers: list[threading.Thread] = []
        self._errors: list[BaseException] = []
        self._buffers: list[npt.NDArray[Any]] = []
        self._free: queue.Queue[int] = queue.Queue()
        self._queues: dict[str, queue.Queue[Any]] = {}
        self._take_lock = threading.Lock()
        self._next_seq: dict[int, int] = {}
        self.task.warm_up(self.options.warmup)

    # -- public ----------------------------------------------------------------------------
    def stop(self) -> None:
        """Stop reading (a user's interrupt); frames already decoded are still finished."""
        self._interrupted = True
        self._halt()

    def abort(self) -> None:
        """Stop now: frames in flight are dropped, threads are not waited for (a second Ctrl-C)."""
        self._flow.aborting.set()
        self.stop()

    def _halt(self) -> None:
        self._flow.stopping.set()
        for source in self.sources:
            source.stop()

    def queue_depths(self) -> dict[str, int]:
        """Frames waiting between stages now (empty before the run starts)."""
        return {name: waiting.qsize() for name, waiting in self._queues.items()}

    @property
    def interrupted(self) -> bool:
        """True once `stop()` was called (not when the run stopped on an error)."""
        return self._interrupted

    def __iter__(self) -> Iterator[FrameResult]:
        self._begin()
        return self._results()

    def _begin(self) -> None:
        # A second pass would continue the sources where the first ended and share buffer slots.
        if self._closed:
            raise RuntimeError("this Pipeline is closed: create a new one to run again")
        if self._started:
            raise RuntimeError("a Pipeline runs once: create a new one to run again")
        self._started = True

    def run(self, sinks: Sequence[Sink] = (), on_result: Any = None) -> RunSummary:
        """Process every source into `sinks`; always finalizes them, then returns the summary.

        Outputs are finalized with the frames processed so far when the run is interrupted or a
        stage fails; only a sink that failed itself keeps its `.partial` name. The error is
        raised after finalizing; `summary()` then carries it."""
        self._begin()
        failed: Sink | None = None
        outputs: list[Path] = []
        try:
            for result in self._results():
                started = time.perf_counter()
                for sink in sinks:
                    try:
                        sink.write(result)
                    except Exception as err:
                        failed = sink
                        if isinstance(err, SinkError):
                            raise
                        # A full disk, a vanished folder: one line, not a trace.
                        raise SinkError(
                            f"writing {type(sink).__name__} output failed: {err}"
                        ) from err
                self.telemetry.record("sink", time.perf_counter() - started)
                if on_result is not None:
                    on_result(result)
        except BaseException as err:
            self._errors.append(err)
            raise
        finally:
            close_error: SinkError | None = None
            for sink in sinks:
                try:
                    outputs.extend(sink.close(complete=sink is not failed))
                except Exception as err:  # finalize the others; report the first failure
                    close_error = close_error or _as_sink_error(sink, err)
            self._outputs = [str(p) for p in outputs]
            if close_error is not None and not self._errors:
                self._errors.append(close_error)
                raise close_error
        summary = self.summary()
        return summary

    def summary(self) -> RunSummary:
        summary = self.telemetry.summary()
        summary.backend = self.task.describe()
        summary.sources = [s.report() for s in self.sources]
        summary.interrupted = self._interrupted
        errors = [str(e) for e in self._errors[:1] if not isinstance(e, KeyboardInterrupt)]
        errors += [s.stats.ended_early for s in self.sources if s.stats.ended_early]
        summary.error = "; ".join(dict.fromkeys(errors))
        summary.outputs = list(getattr(self, "_outputs", []))
        return summary

    def close(self) -> None:
        """Release sources and (when it loaded it) the backend; safe to call twice."""
        if self._closed:
            return
        self._closed = True
        for source, reader in zip(
            self.sources, self._readers or [None] * len(self.sources), strict=True
        ):
            if reader is not None and reader.is_alive():
                # Still blocked in FFmpeg: closing its container under it is not safe; the
                # thread is a daemon and lets go of it when its read times out.
                continue
            source.close()
        self.task.close()

    # -- stages ----------------------------------------------------------------------------
    def _results(self) -> Iterator[FrameResult]:
        concurrency = max(1, self.backend.concurrency)
        # Live: one frame waits per stage at most, so latency cannot build up behind a queue;
        # the freshest decoded frame replaces the waiting one.
        size = concurrency * self.batch if self.live else self.options.queue_size
        pool = size + concurrency * self.batch + 2
        self._buffers = [self.task.new_buffer() for _ in range(pool)]
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
        self._readers = readers
        self._queues = {"decoded": decoded, "prepared": prepared, "inferred": inferred}
        for name, waiting in self._queues.items():
            self.telemetry.register_gauge(name, waiting.qsize)
        self.telemetry.start()
        for thread in [*readers, *workers]:
            thread.start()
        try:
            yield from self._postprocess(inferred, concurrency)
        except BaseException:  # Ctrl-C, or the consumer failed: nothing in flight is wanted
            self._flow.aborting.set()
            self._halt()
            raise
        finally:
            self._halt()
            self.telemetry.stop()
            self._flow.wait_for(readers, workers, [decoded, prepared, inferred], self._release)
        if self._errors:
            raise self._errors[0]

    def _guard(self, stage: Any, *args: Any) -> None:
        """Run a stage; an exception aborts the pipeline and reaches the caller as one line."""
        try:
            if self.options.helper_nice and stage in (self._read, self._preprocess):
                lower_priority(self.options.helper_nice)
            stage(*args)
        except BaseException as err:
            if not isinstance(err, VisionRTError):
                name = threading.current_thread().name
                first = (str(err).strip().splitlines() or [""])[0]
                wrapped = StageError(f"{name} stage failed: {type(err).__name__}: {first}")
                wrapped.__cause__ = err
                err = wrapped
            self._errors.append(err)
            self._flow.aborting.set()
            self._halt()

    def _read(self, source: Source, decoded: queue.Queue[Any]) -> None:
        try:
            frames = source.frames()
            while True:
                started = time.perf_counter()
                frame = next(frames, None)
                if frame is None:
                    break
                self.telemetry.frame_in()
                item = Item(frame, timings={"decode": time.perf_counter() - started})
                self.telemetry.record("decode", item.timings["decode"])
                if source.live:
                    self._flow.put_latest(decoded, item, self._dropper("decode"))
                elif not self._flow.put(decoded, item):
                    break
        finally:
            self._flow.put(decoded, END)

    def _dropper(self, stage: str) -> Any:
        def drop(item: Item) -> None:
            self._release(item)
            self.telemetry.drop(stage, "queue full, newer frame kept")

        return drop

    def _release(self, item: Item) -> None:
        """Give an abandoned item's input buffer back to the pool."""
        if item.slot >= 0 and item.output is None:
            self._free.put(item.slot)
            item.slot = -1

    def _preprocess(
        self, decoded: queue.Queue[Any], prepared: queue.Queue[Any], readers: int, concurrency: int
    ) -> None:
        flow = self._flow
        ended = 0
        while ended < readers:
            item = flow.get(decoded, readers_grace=True)
            if item is END:
                if flow.aborting.is_set() or flow.readers_given_up:
                    break  # aborting, or the readers left are stuck in I/O after stop()
                ended += 1
                continue
            frame = item.frame
            if self.sources[frame.source_id].live and (
                time.perf_counter() - frame.captured_at > self.options.stale_after
            ):
                self.telemetry.drop("preprocess", f"older than {self.options.stale_after}s")
                continue
            started = time.perf_counter()
            slot = flow.get(self._free)
            if slot is END:
                break
            box = self.task.prepare(frame.image, self._buffers[slot], self._geometry[slot])
            self._geometry[slot] = box
            item.letterbox, item.slot = box, slot
            item.timings["preprocess"] = time.perf_counter() - started
            self.telemetry.record("preprocess", item.timings["preprocess"])
            if self.sources[frame.source_id].live:
                flow.put_latest(prepared, item, self._dropper("preprocess"))
            elif not flow.put(prepared, item):
                return
        if flow.aborting.is_set():
            return
        for _ in range(concurrency):
            flow.put(prepared, END)

    def _infer(self, prepared: queue.Queue[Any], inferred: queue.Queue[Any]) -> None:
        while True:
            batch = self._take(prepared)
            if not batch:
                self._flow.put(inferred, END)
                return
            started = time.perf_counter()
            output = self.task.infer([self._buffers[member.slot] for member in batch])
            seconds = time.perf_counter() - started
            for i, member in enumerate(batch):
                self._free.put(member.slot)
                member.slot, member.output = -1, output[i]
                member.timings["infer"] = seconds
                self.telemetry.record("infer", seconds)
                if not self._flow.put(inferred, member):
                    return

    def _take(self, prepared: queue.Queue[Any]) -> list[Item]:
        """The next batch (empty at the end), numbered per source in the order taken: frames
        dropped before this point leave no gap, so the consumer's reordering never waits."""
        with self._take_lock:
            item = self._flow.get(prepared)
            if item is END:
                return []
            batch = [item]
            while len(batch) < self.batch:  # take what is already waiting; never wait for more
                try:
                    extra = prepared.get_nowait()
                except queue.Empty:
                    break
                if extra is END:
                    prepared.put(END)
                    break
                batch.append(extra)
            for member in batch:
                source_id = member.frame.source_id
                member.seq = self._next_seq.get(source_id, 0)
                self._next_seq[source_id] = member.seq + 1
            return batch

    def _postprocess(self, inferred: queue.Queue[Any], workers: int) -> Iterator[FrameResult]:
        # Several inference workers finish out of order; release per source in sequence order.
        in_order: InOrder[Item] = InOrder()
        ended = 0
        while ended < workers:
            item = self._flow.get(inferred)
            if self._flow.aborting.is_set():
                return
            if item is END:
                ended += 1
                continue
            for ready in in_order.push(item.frame.source_id, item.seq, item):
                yield self._finish(ready)
        for ready in in_order.flush():
            yield self._finish(ready)

    def _finish(self, item: Item) -> FrameResult:
        started = time.perf_counter()
        assert item.output is not None
        assert item.letterbox is not None
        detections = self.task.decode(item.output, item.letterbox)
        now = time.perf_counter()
        item.timings["postprocess"] = now - started
        self.telemetry.record("postprocess", item.timings["postprocess"])
        self.telemetry.frame_out(now - item.frame.captured_at)
        return FrameResult(item.frame, detections, item.timings, self.class_names)


def _as_sink_error(sink: Sink, err: Exception) -> SinkError:
    if isinstance(err, SinkError):
        return err
    return SinkError(f"finalizing {type(sink).__name__} output failed: {err}")
