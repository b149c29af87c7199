"""The live audit's lane: the FP32 reference run on a sample of a run's frames on one low-priority
thread beside the pipeline, never in its way, and the rolling fidelity per source of what the run
delivered on those frames (mAP50 through `fidelity.fidelity`; depth AbsRel and δ<1.25 through
`fidelity.depth.depth_fidelity`), with an event when it falls below the budget. Its figures
and summary section are read out of the sources' records by `audit_report`."""

from __future__ import annotations

import logging
import math
import queue
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from visionrt import fidelity as coco  # the one COCO-style implementation, called by module
from visionrt.accuracy.audit_report import audit_report, window_figures
from visionrt.accuracy.audit_window import (
    SPARED,
    AuditEvent,
    AuditSettings,
    Sample,
    SourceAudit,
    spared_turn,
    surely_below,
)
from visionrt.fidelity.depth import depth_fidelity
from visionrt.hardware import idle_priority, wake_idle_threads
from visionrt.tasks.base import Task, run_one
from visionrt.telemetry import Telemetry
from visionrt.types import DepthMap, FrameResult

log = logging.getLogger("visionrt")

# Frames waiting for the reference. Live: a few (a full queue means no headroom now: the sample
# is skipped, counted, rather than the run slowed; an old frame says little of now). File mode
# keeps every sample up to a memory budget: the pipeline saturates the cores, so the low-priority
# lane audits mostly after the last result, and skipping there would leave a few frames of the
# run's start (measured: 10 of 16 samples audited over vtest.avi, a figure 0.02 off the truth).
QUEUE_FRAMES = 8
FILE_QUEUE_BYTES = 256 << 20  # ~190 frames of 768×576, ~40 of 1080p
# How long the end of a run waits for samples still queued (leftovers are skipped, counted):
# live runs do not wait; a file run waits at most this long after its last result.
DRAIN_SECONDS = 30.0
# How long closing waits for the lane's last call once it runs at normal priority again.
CLOSE_SECONDS = 30.0
LANE = "audit"  # the lane's thread


def lane_running() -> bool:
    """Whether an audit lane's thread is still alive (inside a reference call that outlasted
    its run's close): the process must then end without finalizing under it."""
    return any(thread.name == LANE and thread.is_alive() for thread in threading.enumerate())


# An event needs this many audited frames in the window (or the whole window, when smaller).
MIN_EVENT_FRAMES = 10

SAMPLED, AUDITED, BELOW = "audit: sampled", "audit: audited", "audit: below budget"
BUSY, ENDED = "audit: skipped (busy)", "audit: skipped (run ended)"
FAILED = "audit: skipped (reference failed)"


class Auditor:
    """The audit lane of one run. `detect`/`depth` build the reference tasks (None: that task
    is not audited); they are called on the lane's thread after it lowered its priority, so the
    runtime's worker threads inherit it. `offer` is called on the pipeline's consumer thread for
    every result; `finish` at the end of the run, `close` when the pipeline closes.
    `on_event` is told of each crossing of the budget (on the lane's thread), and
    `on_spared_below` too of one by the frames motion gating spared on a source (reused or run
    on windows: see audit_window.SPARED_BOOST), for the pipeline to stop gating that source."""

    def __init__(
        self,
        settings: AuditSettings,
        names: Sequence[str],
        telemetry: Telemetry,
        detect: Callable[[], Task] | None = None,
        depth: Callable[[], Task] | None = None,
        on_event: Callable[[AuditEvent], None] | None = None,
        live: bool = True,
    ) -> None:
        self.settings, self.names, self.telemetry = settings, list(names), telemetry
        self.live = live
        self._builders = (detect, depth)
        self.on_event = on_event
        self.on_spared_below: Callable[[AuditEvent], None] | None = None
        self.events: list[AuditEvent] = []
        self.error = ""  # the first failure of the reference, for the summary
        self._dead = False  # the reference did not load: every sample is skipped
        self._queue: queue.Queue[Sample | None] = queue.Queue()
        self._queued = [0, 0]  # samples and bytes waiting (bounded: see QUEUE_FRAMES)
        self._counts = [0] * len(self.names)  # results seen per source (the consumer's)
        self._spared = [0] * len(self.names)  # spared results seen per source (the same)
        self._sources = {name: SourceAudit(settings.window) for name in dict.fromkeys(names)}
        self._lock = threading.Lock()
        self._busy: Sample | None = None
        self._ended = False
        self._thread = threading.Thread(target=self._lane, name=LANE, daemon=True)

    # -- the pipeline's side ---------------------------------------------------------------
    def add_source(self, name: str) -> None:
        """One more source, numbered next (a service's camera added while it runs); a name seen
        before keeps its window."""
        with self._lock:
            self.names.append(name)
            self._counts.append(0)
            self._spared.append(0)
            self._sources.setdefault(name, SourceAudit(self.settings.window))

    def start(self) -> None:
        self._thread.start()

    def offer(self, result: FrameResult) -> None:
        """Queue `result` for the reference when it is its source's turn; never blocks."""
        source_id = result.frame.source_id
        count = self._counts[source_id]
        self._counts[source_id] = count + 1
        # Gating spared the frame: it reused its source's last results, or ran on windows.
        regular, spared = count % self.settings.period == 0, result.processed not in ("", "full")
        if spared:
            seen = self._spared[source_id]
            self._spared[source_id] = seen + 1
            spared = spared_turn(seen, self.settings)
        if not (regular or spared):
            return
        name = self.names[source_id]
        with self._lock:
            self._sources[name].sampled += 1
        self.telemetry.count(SAMPLED, name)
        if self._dead:  # nothing to compare with
            self._skip(name, FAILED)
            return
        frame = result.frame
        size = frame.image.nbytes
        with self._lock:
            frames, held = self._queued
            full = (
                frames >= QUEUE_FRAMES if self.live else frames and held + size > FILE_QUEUE_BYTES
            )
            if not full:
                self._queued = [frames + 1, held + size]
        if full:
            self._skip(name, BUSY)
            return
        # An earlier frame's map (held: depth on 1 frame in N; or a frame motion gating
        # reused) is not this frame's: the audit scores the model, not the staleness chosen.
        depth = result.depth if result.depth_from is None else None
        sample = Sample(
            name, frame.index, frame.image.copy(), result.detections, depth, regular, spared
        )
        self._queue.put_nowait(sample)

    def finish(self, drain: bool) -> None:
        """The run ended: with `drain`, wait up to DRAIN_SECONDS for the queued samples; then
        skip (and count) what is left."""
        deadline = time.monotonic() + (DRAIN_SECONDS if drain else 0.0)
        if drain and self._queue.unfinished_tasks:
            wake_idle_threads()  # the pipeline is done: the lane's work is all that is left
        while self._queue.unfinished_tasks and time.monotonic() < deadline:
            if not self._thread.is_alive():
                break
            time.sleep(0.01)
        with self._lock:
            self._ended = True
            left = [self._busy] if self._busy is not None else []
            self._busy = None
        while True:
            try:
                sample = self._queue.get_nowait()
            except queue.Empty:
                break
            self._queue.task_done()
            if sample is not None:
                left.append(sample)
        for sample in left:
            self._skip(sample.source, ENDED)

    def close(self) -> None:
        """Stop the lane (what is queued is skipped) and wait for it: it closes the reference
        tasks itself. The lane runs at idle priority; its last call (or the reference's load)
        finishes at normal priority, or a loaded machine would starve it past the process's
        exit, which then aborts inside the runtime."""
        if not self._ended:
            self.finish(drain=False)
        if self._thread.is_alive():
            self._queue.put(None)
            wake_idle_threads()
            self._thread.join(timeout=CLOSE_SECONDS)  # a daemon still: a call that hangs

    def _skip(self, name: str, reason: str) -> None:
        with self._lock:
            self._sources[name].skipped += 1
        self.telemetry.count(reason, name)

    # -- the lane --------------------------------------------------------------------------
    def _lane(self) -> None:
        # Before the reference loads: its runtime's threads inherit the lane's priority.
        idle_priority()
        tasks: list[Task | None] = []
        try:
            for build in self._builders:
                tasks.append(build() if build is not None else None)
        except Exception as err:
            self.error = f"the audit's reference did not load: {_first_line(err)}"
            self._dead = True
            log.warning("%s; the run goes on without an audit", self.error)
        buffers = [task.new_buffer() if task is not None else None for task in tasks]
        try:
            while (sample := self._queue.get()) is not None:
                with self._lock:  # taken after `finish` looked: this lane counts it
                    self._queued = [self._queued[0] - 1, self._queued[1] - sample.image.nbytes]
                    late = self._ended
                    self._busy = None if late else sample
                if late:
                    self._skip(sample.source, ENDED)
                else:
                    self._audit(sample, tasks, buffers)
                self._queue.task_done()
        finally:
            for task in tasks:
                if task is not None:
                    task.close()

    def _audit(
        self, sample: Sample, tasks: list[Task | None], buffers: list[npt.NDArray[Any] | None]
    ) -> None:
        try:
            if self._dead:
                raise RuntimeError(self.error)
            detect, depth = tasks
            detect_buffer, depth_buffer = buffers  # each None exactly where its task is
            reference = None
            if detect is not None:
                assert detect_buffer is not None
                reference = run_one(detect, sample.image, detect_buffer)
            depth_score = None
            if depth is not None and sample.depth is not None and sample.regular:
                assert depth_buffer is not None
                truth: DepthMap = run_one(depth, sample.image, depth_buffer)
                depth_score = depth_fidelity(
                    sample.depth.values, truth.values, inverse=not truth.metric
                )
        except Exception as err:
            with self._lock:
                mine = self._busy is sample
                self._busy = None
            if mine:
                if not self.error:
                    self.error = f"the audit's reference failed: {_first_line(err)}"
                    log.warning("%s (frame %d of %s)", self.error, sample.frame, sample.source)
                self._skip(sample.source, FAILED)
            return
        with self._lock:
            if self._busy is not sample:  # the run ended meanwhile: counted as skipped there
                return
            self._busy = None
            state = self._sources[sample.source]
            state.audited += 1
            regular = reference is not None and sample.regular
            if reference is not None and sample.regular:
                state.pairs.append((reference, sample.detections))
                state.whole.append((sample.frame, reference, sample.detections))
                pairs = list(state.pairs)
            if reference is not None and sample.spared:
                state.spared.append((reference, sample.detections))
                spared = list(state.spared)
            if depth_score is not None and math.isfinite(depth_score.abs_rel):
                state.depth.append(depth_score)
                state.depth_sum[0] += depth_score.abs_rel
                state.depth_sum[1] += depth_score.delta1
                state.depth_sum[2] += 1
        self.telemetry.count(AUDITED, sample.source)
        if regular:
            report = coco.fidelity([r for r, _ in pairs], [c for _, c in pairs])
            with self._lock:
                state.map50 = report.map50
            self._check(state, sample, "fidelity", report.map50, len(pairs))
        if reference is not None and sample.spared:
            map50 = coco.fidelity([r for r, _ in spared], [c for _, c in spared]).map50
            with self._lock:
                state.spared_map50 = map50
            self._check(state, sample, SPARED, map50, len(spared))
        if depth_score is not None and state.depth:
            abs_rel = float(np.mean([d.abs_rel for d in state.depth]))
            self._check(state, sample, "depth", abs_rel, len(state.depth))

    def _check(
        self, state: SourceAudit, sample: Sample, kind: str, value: float, frames: int
    ) -> None:
        """An event when the window's figure crosses the budget; re-armed once it recovers."""
        settings = self.settings
        below = value > settings.max_abs_rel if kind == "depth" else value < settings.min_fidelity
        if not below:
            state.armed[kind] = True
            return
        if not state.armed[kind] or frames < min(settings.window, MIN_EVENT_FRAMES):
            return
        if not surely_below(state, kind, self.settings):
            return  # a few unlucky frames, not yet a drift: stays armed
        state.armed[kind] = False
        budget = settings.max_abs_rel if kind == "depth" else settings.min_fidelity
        metric = "depth AbsRel" if kind == "depth" else kind
        event = AuditEvent(
            self.telemetry.elapsed(), sample.source, metric, value, budget, frames, sample.frame
        )
        self.events.append(event)
        self.telemetry.count(BELOW, sample.source)
        if self.on_event is None:  # no one to tell: the logger says it (once, not twice)
            log.warning("%s", event)
        else:
            self._tell(self.on_event, event, "on_audit")
        if kind == SPARED and self.on_spared_below is not None:
            self._tell(self.on_spared_below, event, "turning motion gating off")

    def _tell(self, listener: Callable[[AuditEvent], None], event: AuditEvent, what: str) -> None:
        try:
            listener(event)
        except Exception as err:  # the caller's callback: it must not stop the audit
            self.error = self.error or f"{what} failed: {_first_line(err)}"

    # -- what it found ---------------------------------------------------------------------
    def audited_frames(self, source: str) -> list[int]:
        """Frame indices of `source`'s audited frames kept for the whole-run figure, in order."""
        with self._lock:
            return [frame for frame, _, _ in self._sources[source].whole]

    def figures(self) -> dict[str, dict[str, float]]:
        """The window's figures per source with audited frames: `fidelity` (mAP50) and its
        `fidelity_frames`, `depth_abs_rel` and `depth_delta1` (for the per-second telemetry and
        Prometheus)."""
        with self._lock:
            return window_figures(self._sources)

    def report(self) -> dict[str, Any]:
        """For the run summary: settings, per source the counts, the whole-run and window
        figures (mAP50 with its frames and reference boxes; depth AbsRel and δ<1.25), events,
        and the reference's first failure (`error`, read last)."""
        found = audit_report(self.settings, self._sources, self._lock, self.events)
        return {**found, "error": self.error}


def _first_line(err: BaseException) -> str:
    return (str(err).strip().splitlines() or [type(err).__name__])[0]
