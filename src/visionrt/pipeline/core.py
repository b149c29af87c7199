"""The `Pipeline`: a run opened (opening.py: sources, plan, tasks, audit) goes through its stage
graph (build.py, graph.py) into the output stage (output.py), every frame accounted for."""

from __future__ import annotations

import logging
from collections.abc import Generator, Mapping, Sequence
from pathlib import Path
from typing import Any

from visionrt.backends import Backend, BackendOptions
from visionrt.config.pipeline import DepthOptions, PipelineOptions
from visionrt.config.sizes import Size, SizedDetector
from visionrt.errors import ConfigError
from visionrt.fuse import Checkpoint, parse_analytics, take_checkpoint
from visionrt.pipeline.audit import finish_audit
from visionrt.pipeline.build import start_graph
from visionrt.pipeline.degrade import Change
from visionrt.pipeline.flow import Flow
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

    Iterate it for `FrameResult`s (file-mode frames in order per source), or `run()` them into
    sinks for a `RunSummary`; it runs once. `stop()` is safe from a signal handler (reading
    stops, frames in flight finish, sinks are finalized); a stage that raises stops the run
    within a second and its error reaches the caller. `backend` "": the runtime that reads the
    model file. A source may carry a name (`rgb=cam0.mp4`); a bare one is named by its stem.

    `plan`: None runs the plan `tune` cached for this model and machine unless the caller chose
    a backend or configuration (batch and threads compose with it); a path runs that plan;
    False the model as given; a `PlannedRun` is one already settled (`pipeline_for`) — one
    decision for all (`pipeline.plan_run`), said in `notes`. A plan that runs is audited live
    against its FP32 reference (`options.audit`, summary `audit`). `analytics`: zones and lines
    by source name (needs tracking). `frame_ranges` replace `source_options`' start and end per
    source, `checkpoints` resume each source's fusion state (`checkpoint()`), `sizes` name the
    detector per frame size (default: the plan's), `hooks` what the caller is told as it goes.
    `service`: sources are added and removed while it runs (`roster`). With `options` None the
    plan's motion gating runs too."""

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
            self._degraded, self.hooks.audited,
        )  # fmt: skip
        self.sources, self.names, self.named = run.sources, run.names, run.named
        self.live = run.live
        self.options, self.parts, self.telemetry = run.options, run.parts, run.telemetry
        self.task, self.tasks = run.parts.detector, run.parts.tasks  # the detector, then depth
        self.notes, self.plan_use, self.auditor = run.notes, run.plan_use, run.auditor
        self.plan: Plan | None = run.plan_use.plan if run.plan_use.runs else None
        # A service's sources change while it runs (`roster.add`, `roster.remove`).
        self.roster = (
            Roster(run, lambda: self._graph, self.note, source_options) if service else None
        )
        self._resume = list(checkpoints)
        self._flow = Flow()
        self._graph: Graph | None = None
        self._writer: OutputStage | None = None  # run(): the sink stage
        self._interrupted = self._started = self._closed = False
        self._errors: list[BaseException] = []

    def _degraded(self, change: Change) -> None:
        down = change.level_to > change.level_from
        self.telemetry.count("slo: step down" if down else "slo: step up")
        self.hooks.degraded(change)

    def note(self, note: str) -> None:
        """Keep `note` (summary `notes`) and say it now: to `hooks.on_note`, or as a warning."""
        self.notes.append(note)
        self.hooks.noted(note)

    def stop(self) -> None:
        """Stop reading (a user's interrupt); frames already decoded are still finished."""
        self._interrupted = True
        self._halt()

    def abort(self) -> None:
        """Stop now: frames in flight are dropped, threads are not waited for (a second Ctrl-C)."""
        self._flow.aborting.set()
        self.stop()

    def fail(self, err: BaseException) -> None:
        """Stop the run on `err` now, as a stage that raises does (a helper beside the stages
        that failed, such as the telemetry file, calls it too); the first error is raised."""
        self._errors.append(err)
        self._flow.aborting.set()
        self._halt()

    def _halt(self) -> None:
        self._flow.stopping.set()
        for source in self.sources:
            source.stop()
        if self._graph is not None:
            self._graph.release()

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
        gauges = dict(self._graph.depths()) if self._graph else {}
        if self._writer is not None and gauges:
            gauges["fused"] = self._writer.queue.qsize
        return {name: read() for name, read in gauges.items()}

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
        per source; `on_result` is called there after each result's writes), then return the
        summary. The sinks are finalized however the run ends, with the frames so far; only one
        that failed itself keeps its `.partial` name; an error is raised after that (and is in
        `summary()`)."""
        self._begin()
        size = max(1, self.options.queue_size)
        self._writer = OutputStage(sinks, on_result, self.telemetry, self.fail, size)
        self._writer.drain(self._results(), self._errors)
        return self.summary()

    def summary(self) -> RunSummary:
        writer, service = self._writer, self.roster is not None
        outputs = list(writer.outputs) if writer is not None else []
        return run_summary(self.opened, service, self._interrupted, self._errors, outputs)

    def close(self) -> None:
        """Release sources, tasks and the audit; safe to call twice."""
        if self._closed:
            return
        self._closed = True
        readers = self._graph.readers if self._graph else []
        self.opened.close([reader.is_alive() for reader in readers])

    def _results(self) -> Generator[FrameResult, None, None]:
        service = self.roster is not None
        graph = self._graph = start_graph(
            self.opened, self._flow, self.fail, self.note, self._resume, service
        )
        auditor, completed = self.auditor, False
        cut = ""  # why the results ended early: the frames still in flight are counted as dropped
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
            if auditor is not None:  # a file run that completed waits for queued samples
                drain = completed and not (self.live or self._interrupted or self._errors)
                self.notes += finish_audit(auditor, self.names, self.sources, self.plan_use, drain)
        if self._errors:
            raise self._errors[0]
