"""The `Pipeline`: a run opened (opening.py: sources, plan, tasks, audit) goes through its stage
graph (build.py, graph.py) into the output stage (output.py), every frame accounted for."""

from __future__ import annotations

import logging
from collections.abc import Callable, Generator, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import cv2

from visionrt.accuracy.audit_window import AuditEvent
from visionrt.backends import Backend, BackendOptions
from visionrt.config.pipeline import DepthOptions, PipelineOptions
from visionrt.config.sizes import Size, SizedDetector
from visionrt.errors import ConfigError
from visionrt.fuse import Checkpoint, parse_analytics, take_checkpoint
from visionrt.pipeline.audit import finish_audit
from visionrt.pipeline.build import build_graph
from visionrt.pipeline.degrade import Change
from visionrt.pipeline.flow import Flow
from visionrt.pipeline.gating import Gating
from visionrt.pipeline.graph import Graph
from visionrt.pipeline.hooks import Hooks
from visionrt.pipeline.opening import open_run
from visionrt.pipeline.output import OutputStage
from visionrt.pipeline.plan_run import PlannedRun
from visionrt.pipeline.report import run_summary
from visionrt.pipeline.roster import Roster
from visionrt.plans import Plan
from visionrt.postprocess import PostprocessOptions
from visionrt.sinks import Sink
from visionrt.sources import Source, SourceOptions
from visionrt.telemetry import RunSummary
from visionrt.types import FrameResult

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
    caller chose no backend or configuration-picking option (batch and threads compose with it);
    a path runs that plan; False runs the model as given (the reference); a `PlannedRun` is a
    plan the caller settled already (`pipeline_for`: the arguments are its configuration) — one
    decision for all of these (`pipeline.plan_run`). `notes` says which plan ran, or why none
    did (also logged at INFO on the "visionrt" logger and kept in the summary). `analytics`:
    zones and lines per source name (see fuse.analytics; needs `options.tracking.enabled`).
    With `options` None, the plan's motion gating (`tune` keeps it where it pays) runs too;
    regions with no region model run the plan's (`pipeline.planned.planned_regions`). A plan
    that runs is audited live against its FP32 reference (`options.audit`; `auditor`,
    `hooks.on_audit`, summary `audit`: see accuracy.audit).
    `frame_ranges`: each source's (`start_frame`, `end_frame`), in place of `source_options`'
    (a cluster's retries resume each source of a group where it stopped; a long file's ranges
    run on several workers); `checkpoints`: each source's fusion state to resume with (None:
    from nothing), as `checkpoint()` took it after the frame before its start. `sizes`: the
    detector the sources of a frame size (height, width) run instead of `model` (default: what
    the plan proved on each size; `pipeline.sizes`). `hooks`: what the caller is told as the
    run goes (`pipeline.hooks`).
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
        plan: str | Path | bool | PlannedRun | None = None,
        analytics: Mapping[str, Any] | None = None,
        service: bool = False,
        frame_ranges: Sequence[tuple[int, int]] | None = None,
        checkpoints: Sequence[Checkpoint | None] = (),
        sizes: Mapping[Size, SizedDetector] | None = None,
        hooks: Hooks | None = None,
    ) -> None:
        if isinstance(sources, str | Path):  # one source, not the characters of its name
            sources = [str(sources)]
        if not sources and not service:
            raise ConfigError("no source given")
        self.hooks = hooks or Hooks()
        self.analytics = parse_analytics(analytics or {})
        source_options = source_options or SourceOptions()
        run = self.opened = open_run(
            sources, model, backend, backend_options, postprocess or PostprocessOptions(),
            source_options, options, depth, plan, self.analytics, service, frame_ranges, sizes,
            self._degraded, self._audited,
        )  # fmt: skip
        self.sources, self.names, self.named = run.sources, run.names, run.named
        self.live = run.live
        self.options, self.parts, self.telemetry = run.options, run.parts, run.telemetry
        self.task, self.tasks = run.parts.detector, run.parts.tasks  # the detector, then depth
        self.notes, self.plan_use, self.auditor = run.notes, run.plan_use, run.auditor
        self.plan: Plan | None = run.plan_use.plan if run.plan_use.runs else None
        # A service's sources change while it runs (`add_source`, `remove_source`).
        self.roster = Roster(self, source_options) if service else None
        self._resume = list(checkpoints)
        self._flow = Flow()
        self._graph: Graph | None = None
        self._writer: OutputStage | None = None  # run(): the sink stage
        self._interrupted = self._started = self._closed = False
        self._errors: list[BaseException] = []

    def _degraded(self, change: Change) -> None:
        down = change.level_to > change.level_from
        self.telemetry.count("slo: step down" if down else "slo: step up")
        if self.hooks.on_degrade is not None:
            self.hooks.on_degrade(change)

    def _audited(self, event: AuditEvent) -> None:
        if self.hooks.on_audit is not None:  # read at the event: a service may set it late
            self.hooks.on_audit(event)
        else:  # no one to tell: the logger says it
            log.warning("%s", event)

    def note(self, note: str) -> None:
        """Keep `note` (summary `notes`) and say it now: to `hooks.on_note`, or as a warning."""
        self.notes.append(note)
        if self.hooks.on_note is not None:
            self.hooks.on_note(note)
        else:
            log.warning("%s", note)

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
        if self._graph is not None:
            self._graph.release()

    def add_source(
        self,
        name: str,
        spec: str,
        depth: bool = False,
        analytics: Mapping[str, Any] | None = None,
        on_open: Callable[[Source], None] | None = None,
    ) -> Source:
        """A service: open `spec` as source `name` and start it while the others run (see
        Roster.add); a source that cannot be opened raises and changes nothing."""
        if self.roster is None:
            raise ConfigError("sources are added to a Pipeline made with service=True")
        return self.roster.add(name, spec, depth, analytics, on_open)

    def remove_source(self, name: str) -> None:
        """A service: stop source `name` (KeyError: none runs); its frames read are delivered."""
        if self.roster is None:
            raise ConfigError("sources are removed from a Pipeline made with service=True")
        self.roster.remove(name)

    @property
    def graph(self) -> Graph | None:
        """The stage graph while it runs (None before)."""
        return self._graph

    def checkpoint(self, source_id: int) -> Checkpoint | None:
        """Source `source_id`'s fusion state after its latest result (None: before the run, or
        nothing to keep); call it where the results are taken, between two of them."""
        return take_checkpoint(self._graph.fusers[source_id]) if self._graph else None

    def depth_sources(self) -> list[int]:
        """Indices of the sources a depth task runs on (none without one)."""
        return [i for i, lanes in enumerate(self.parts.schedule) if len(lanes) > 1]

    def queue_depths(self) -> dict[str, int]:
        """Frames waiting between stages now (empty before the run starts)."""
        if self._graph is None:
            return {}
        depths = {name: read() for name, read in self._graph.depths().items()}
        if self._writer is not None:
            depths["fused"] = self._writer.queue.qsize()
        return depths

    @property
    def interrupted(self) -> bool:
        """True once `stop()` was called (not when the run stopped on an error)."""
        return self._interrupted

    def __iter__(self) -> Generator[FrameResult, None, None]:
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
        """Process every source into `sinks` (written on a thread of their own, in frame order
        per source; `on_result` is called there after each result's writes); always finalizes
        them, then returns the summary.

        Outputs are finalized with the frames processed so far when the run is interrupted or a
        stage fails; only a sink that failed itself keeps its `.partial` name. The error is
        raised after finalizing; `summary()` then carries it."""
        self._begin()
        stage = OutputStage(
            sinks, on_result, self.telemetry, self._fail, max(1, self.options.queue_size)
        )
        self._writer = stage
        stage.drain(self._results(), self._errors)
        return self.summary()

    def summary(self) -> RunSummary:
        summary = run_summary(self.opened, service=self.roster is not None)
        summary.interrupted = self._interrupted
        errors = [str(e) for e in self._errors[:1] if not isinstance(e, KeyboardInterrupt)]
        errors += [s.stats.ended_early for s in self.sources if s.stats.ended_early]
        summary.error = "; ".join(dict.fromkeys(errors))
        summary.outputs = list(self._writer.outputs) if self._writer is not None else []
        return summary

    def close(self) -> None:
        """Release sources, tasks and the audit; safe to call twice."""
        if self._closed:
            return
        self._closed = True
        readers = self._graph.readers if self._graph else []
        self.opened.close([reader.is_alive() for reader in readers])

    # -- the run ---------------------------------------------------------------------------
    def _results(self) -> Generator[FrameResult, None, None]:
        service = self.roster is not None
        graph = self._graph = build_graph(
            self.opened, self._flow, self._fail, self.note, self._resume, service
        )
        if self.options.opencv_threads:
            cv2.setNumThreads(self.options.opencv_threads)
        for name, read in graph.depths().items():
            self.telemetry.register_gauge(name, read)
        self.telemetry.start()
        auditor, completed = self.auditor, False
        if auditor is not None and graph.gating is not None:
            auditor.on_spared_below = partial(self._stop_gating, graph.gating)
        cut = ""  # why the results ended early: the frames still in flight are counted as dropped
        if auditor is not None:
            auditor.start()
        try:
            for result in graph.run():
                if auditor is not None:
                    auditor.offer(result)  # before the sinks: the frame's buffer is reused after
                yield result
            completed = True
        except BaseException as err:  # Ctrl-C, or the consumer failed: nothing in flight is wanted
            # GeneratorExit: a `break` (or close()) in the caller's loop.
            stopped = isinstance(err, GeneratorExit)
            cut = "the caller stopped taking results" if stopped else "the run was stopped"
            self._flow.aborting.set()
            self._halt()
            raise
        finally:
            self._halt()
            self.telemetry.stop()
            graph.finish()
            if not completed or self._flow.aborting.is_set():  # a failed stage aborts too
                cut = cut or ("the run failed" if self._errors else "the run was aborted")
                self.telemetry.settle("pipeline", f"not delivered: {cut}")
            # The audit: a file run that completed waits for queued samples; nothing else does.
            if self.auditor is not None:
                drain = completed and not (self.live or self._interrupted or self._errors)
                names, sources = self.names, self.sources
                self.notes += finish_audit(self.auditor, names, sources, self.plan_use, drain)
        if self._errors:
            raise self._errors[0]

    def _stop_gating(self, gating: Gating, event: AuditEvent) -> None:
        """The audit found the frames gating spared on a source below the budget: gating stops
        there."""
        # The latest source of that name: a service's camera added again under it.
        gating.turn_off(len(self.names) - 1 - self.names[::-1].index(event.source))
        self.note(
            f"motion gating off for {event.source}: the frames it spared scored {event.value:.3f}"
            f" against the FP32 reference (budget {event.budget:g}, {event.frames} frames); from"
            f" frame {event.frame} on, the detector runs on each of its frames, whole"
        )

    def _fail(self, err: BaseException) -> None:
        """A stage failed: remember the first error and stop everything now."""
        self._errors.append(err)
        self._flow.aborting.set()
        self._halt()
