"""The `Pipeline` facade: opens the sources, loads the tasks, runs the stage graph (graph.py) into
sinks and accounts for every frame."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import cv2

from visionrt.accuracy.audit_setup import build_auditor, finish_audit, planned_audit
from visionrt.accuracy.audit_window import AuditEvent
from visionrt.accuracy.geometry import settle
from visionrt.backends import Backend, BackendOptions
from visionrt.errors import ConfigError, SinkError
from visionrt.pipeline.degrade import Change, Degrader, build_ladder
from visionrt.pipeline.flow import Flow
from visionrt.pipeline.graph import Graph
from visionrt.pipeline.options import DepthOptions, PipelineOptions
from visionrt.pipeline.variants import degrade_variants
from visionrt.plans import Plan, plan_depth, plan_detector
from visionrt.postprocess import PostprocessOptions
from visionrt.postprocess.depth import DepthSmoother
from visionrt.sinks import Sink
from visionrt.sources import Source, SourceOptions
from visionrt.sources.registry import open_sources
from visionrt.tasks import DetectTask, TiledDetectTask
from visionrt.tasks.base import Task
from visionrt.telemetry import RunSummary, Telemetry
from visionrt.types import FrameResult

TRACK_LOW = 0.1  # ByteTrack's low-score floor
log = logging.getLogger("visionrt")


class Pipeline:
    """A detector over one or more sources, and optionally a depth model on some of them.

    Iterate it for per-frame `FrameResult`s (file-mode frames come in order per source), or call
    `run()` to write them into sinks and get a `RunSummary`; a Pipeline runs once. `stop()` is
    safe from a signal handler: reading stops, frames in flight are finished, sinks are
    finalized. A stage that raises stops the run within a second and its error reaches the
    caller. `backend` "" picks the runtime that reads the model file (see backends.registry).
    A source string may carry a name, `rgb=cam0.mp4`; a bare one is named after its stem.

    `plan`: None uses the plan `visionrt tune` cached for this model on this machine when the
    caller chose no backend or configuration-picking option (batch and threads compose with
    it); a path runs that plan; False runs the model as given (the reference). `notes` says
    which plan ran, or why none did (also logged at INFO on the "visionrt" logger and kept in
    the summary). A plan that runs is audited live against its FP32 reference
    (`options.audit`; `auditor`, `on_audit`, summary `audit`: see accuracy.audit).
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
        depth: DepthOptions | None = None,
        plan: str | Path | bool | None = None,
    ) -> None:
        if not sources:
            raise ConfigError("no source given")
        self.options = options or PipelineOptions()
        self.postprocess = postprocess or PostprocessOptions()
        source_options = source_options or SourceOptions()
        # Open sources before loading a model: a bad path fails fast.
        self.sources, self.names, self.named, specs = open_sources(sources, source_options)
        self.live = any(s.live for s in self.sources)
        self.notes: list[str] = []
        model, backend, backend_options, use = plan_detector(
            plan,
            model,
            backend,
            backend_options,
            bool(self.options.tile),
            self.live,
            settle=lambda use: settle(use, [s for s in specs if s], self.postprocess.conf),
        )
        # The plan whose configuration runs (None: the model as given), and how it was taken
        # (the CLI, which settles the plan itself, sets `plan_use`: the audit's verdict on a
        # source's size goes back into the cached plan).
        self.plan: Plan | None = use.plan if use.sections is not None else None
        self.plan_use = use
        self.options = planned_audit(self.options, self.plan)  # its reference and budget
        if use.note:
            self.notes.append(use.note)
            log.info("%s", use.note)
        # Tracking: the user's threshold starts tracks; ByteTrack's second stage also needs the
        # detector's boxes down to TRACK_LOW, which only ever extend tracks already there.
        self.tracker_high = self.postprocess.conf
        self.tracker_low = min(TRACK_LOW, self.postprocess.conf)
        if self.options.track:
            self.postprocess = replace(self.postprocess, conf=self.tracker_low)
        self.task: DetectTask | TiledDetectTask = (
            TiledDetectTask.for_sources(
                model,
                backend,
                backend_options,
                self.postprocess,
                self.options.tiling(),
                [s.size for s in self.sources if getattr(s, "size", None)],
            )
            if self.options.tile
            else DetectTask(model, backend, backend_options, self.postprocess)
        )
        self.tasks: list[Task] = [self.task]
        self.schedule: list[list[int]] = [[0] for _ in self.sources]
        self.depth_smoother: DepthSmoother | None = None
        self.depth_options: DepthOptions | None = None  # as it runs (plan applied)
        if depth is not None:
            self._add_depth(depth if plan is False else self._planned_depth(depth))
        self.variants: list[Task] = []
        self.degrader: Degrader | None = None
        # Told of each degrade step (the CLI prints it); set before the run.
        self.on_degrade: Callable[[Change], None] | None = None
        if self.options.slo_ms:
            self._add_degrade(model, backend, backend_options or BackendOptions())
        # The detector's facts, under the names callers use.
        self.backend, self.spec = self.task.backend, self.task.spec
        self.input_hw, self.layout = self.task.input_hw, self.task.layout
        self.class_names, self.batch = self.task.class_names, self.task.batch
        self.telemetry = Telemetry()
        self._flow = Flow()
        self._graph: Graph | None = None
        self._interrupted = False
        self._started = self._closed = False
        self._errors: list[BaseException] = []
        # The live accuracy audit (None: off); `on_audit` is told of each event (the CLI
        # prints it), on the audit's thread.
        self.on_audit: Callable[[AuditEvent], None] | None = None
        self.auditor, notes = build_auditor(self, model)
        self.notes.extend(notes)
        if self.auditor is not None:
            self.telemetry.add_figures(self.auditor.figures)
        for task in [*self.tasks, *self.variants]:
            task.warm_up(self.options.warmup)

    def _add_degrade(
        self, model: str | Path, backend: str | Backend, options: BackendOptions
    ) -> None:
        """The ladder's detector variants (smaller inputs, then a lighter model) and its
        controller."""
        if not self.live:
            raise ConfigError(
                "--slo-ms: a latency target needs live sources (cameras, streams, or files with"
                " --realtime); file mode processes every frame and its latency is queueing"
            )
        variants, labels, notes = degrade_variants(
            model, backend, options, self.options, self.task, self.postprocess
        )
        self.variants.extend(variants)
        self.notes.extend(notes)
        every = self.options.detect_every
        rungs = build_ladder(
            every, max(every, self.options.slo_max_every), self.options.track, labels
        )
        self.degrader = Degrader(
            self.options.slo_ms / 1e3, rungs, self.options.slo_window, on_change=self._degraded
        )

    def _degraded(self, change: Change) -> None:
        down = change.level_to > change.level_from
        self.telemetry.count("slo: step down" if down else "slo: step up")
        if self.on_degrade is not None:
            self.on_degrade(change)

    def _planned_depth(self, depth: DepthOptions) -> DepthOptions:
        """The depth model's cached plan (`tune --depth`) unless the caller chose its runtime."""
        model, backend, options, use = plan_depth(
            depth.model, depth.backend, depth.backend_options, depth.short_side
        )
        if use.note:
            self.notes.append(use.note)
            log.info("%s", use.note)
        depth = replace(depth, model=model, backend=backend, backend_options=options)
        return planned_audit(depth, use.plan if use.sections is not None else None)

    def _add_depth(self, depth: DepthOptions) -> None:
        from visionrt.tasks.depth import DepthTask

        unknown = sorted(set(depth.on) - set(self.names))
        if unknown:
            raise ConfigError(
                f"--depth-on: no source named '{unknown[0]}' (sources: {', '.join(self.names)})"
            )
        self.depth_options = depth
        on = [i for i, name in enumerate(self.names) if not depth.on or name in depth.on]
        first = self.sources[on[0]]
        size = getattr(first, "size", None)
        task = DepthTask(
            depth.model,
            depth.backend,
            depth.backend_options,
            short_side=depth.short_side,
            on_nonfinite=depth.on_nonfinite,
            source_hw=size,
        )
        self.tasks.append(task)
        if depth.smoothing:
            self.depth_smoother = DepthSmoother(depth.smoothing)
        for i in on:
            self.schedule[i].append(len(self.tasks) - 1)

    # -- public ----------------------------------------------------------------------------
    def stop(self) -> None:
        """Stop reading (a user's interrupt); frames already decoded are still finished."""
        self._interrupted = True
        self._halt()

    def abort(self) -> None:
        """Stop now: frames in flight are dropped, threads are not waited for (a second Ctrl-C)."""
        self._flow.aborting.set()
        self.stop()

    def fail(self, err: BaseException) -> None:
        """Stop the run on `err` as on a stage that raised: for a helper beside the stages that
        failed (the telemetry file); the run's first error is the one it raises."""
        self._fail(err)

    def _halt(self) -> None:
        self._flow.stopping.set()
        for source in self.sources:
            source.stop()

    def depth_sources(self) -> list[int]:
        """Indices of the sources a depth task runs on (none without one)."""
        return [i for i, lanes in enumerate(self.schedule) if len(lanes) > 1]

    def queue_depths(self) -> dict[str, int]:
        """Frames waiting between stages now (empty before the run starts)."""
        if self._graph is None:
            return {}
        return {name: read() for name, read in self._graph.depths().items()}

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
        for task in self.tasks[1:]:
            summary.backend[task.name] = task.describe()
        counts = self.telemetry.per_source()
        summary.sources = [
            {**s.report(), "name": name, "spec": s.name, **counts.get(name, {})}
            for s, name in zip(self.sources, self.names, strict=True)
        ]
        if self.degrader is not None:
            summary.slo = self.degrader.report()
        if self.auditor is not None:
            summary.audit = self.auditor.report()
        summary.notes = list(self.notes)
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
        readers = self._graph.readers if self._graph else []
        for source, reader in zip(self.sources, readers or [None] * len(self.sources), strict=True):
            if reader is not None and reader.is_alive():
                # Still blocked in FFmpeg: closing its container under it is not safe; the
                # thread is a daemon and lets go of it when its read times out.
                continue
            source.close()
        for task in [*self.tasks, *self.variants]:
            task.close()
        if self.auditor is not None:
            self.auditor.close()

    # -- the run ---------------------------------------------------------------------------
    def _results(self) -> Iterator[FrameResult]:
        graph = self._graph = Graph(
            self.sources,
            self.names,
            self.named,
            self.tasks,
            self.schedule,
            self.options,
            self.telemetry,
            self._flow,
            self._fail,
            self.tracker_high,
            self.tracker_low,
            variants=self.variants,
            degrader=self.degrader,
            depth_smoother=self.depth_smoother,
        )
        if self.options.opencv_threads:
            cv2.setNumThreads(self.options.opencv_threads)
        for name, read in graph.depths().items():
            self.telemetry.register_gauge(name, read)
        self.telemetry.start()
        auditor, completed = self.auditor, False
        if auditor is not None:
            auditor.start()
        try:
            for result in graph.run():
                if auditor is not None:
                    auditor.offer(result)  # before the sinks: the frame's buffer is reused after
                yield result
            completed = True
        except BaseException:  # Ctrl-C, or the consumer failed: nothing in flight is wanted
            self._flow.aborting.set()
            self._halt()
            raise
        finally:
            self._halt()
            self.telemetry.stop()
            graph.finish()
            # The audit: a file run that completed waits for queued samples; nothing else does.
            finish_audit(self, completed and not (self.live or self._interrupted or self._errors))
        if self._errors:
            raise self._errors[0]

    def _fail(self, err: BaseException) -> None:
        """A stage failed: remember the first error and stop everything now."""
        self._errors.append(err)
        self._flow.aborting.set()
        self._halt()


def _as_sink_error(sink: Sink, err: Exception) -> SinkError:
    if isinstance(err, SinkError):
        return err
    return SinkError(f"finalizing {type(sink).__name__} output failed: {err}")
