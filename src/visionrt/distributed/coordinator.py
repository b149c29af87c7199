"""The coordinator on the driver: hands work units to idle workers from one queue, commits each
source's frames in order and once (the only writer of its outputs), and puts a unit whose worker
died back on the queue with its next attempt, resuming after the last committed frame. Where
units run (`executor.Executor`), how a run is stopped (`stop.RunStop`, both re-exported here) and
which units start together (`grouping`) are in modules of their own."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

from visionrt.distributed.executor import Executor as Executor
from visionrt.distributed.grouping import group_units
from visionrt.distributed.ranges import SourceRanges
from visionrt.distributed.report import UNREPORTED, ClusterReport, SourceState
from visionrt.distributed.stop import RunStop as RunStop
from visionrt.distributed.units import Batch, Done, Group, Lost, Report, Sample, WorkUnit

# How long the queue may wait with no worker alive before its units are failed: a shrinking
# cluster that lost every node must end the run, not hang.
NO_WORKERS_GRACE = 30.0
# How long a live stream put back on the queue waits for an idle worker before a busy worker
# of live streams (which never comes free) is told to take it in: that worker restarts its
# group with the stream added, its own streams losing the frames of the restart (counted).
REGROUP_AFTER = 5.0
STOP_GRACE = 30.0  # a worker told to end its group that has not, after this: ask another
# After a stop was asked (Ctrl-C): how long the running groups get to end theirs and send
# what they read; a worker that has not by then is left (its frames since are not written).
INTERRUPT_GRACE = 15.0


class Coordinator:
    """Runs `units` on `executor`'s workers. `write(name, frame, line)` is called for each
    frame of each source in order, once (from this thread only); a unit is tried at most
    `max_attempts` times; a user error (Failed with retry False) fails its source at once (a
    unit that failed in a group runs again alone first: the error may be another source's).
    An idle worker takes up to `group` files at once (fewer when that leaves other idle
    workers nothing), so one Pipeline batches across them; live streams are spread over the
    idle workers by cost, all of them placed at once (they never end).
    `on_progress(report)` is called after each round of reports; `stop` ends the run early.
    A source's frame ranges (several units of one name, in frame order) are written in order:
    a later range's frames are held in `spool_dir` until every range before it is done."""

    def __init__(
        self,
        units: Iterable[WorkUnit],
        executor: Executor,
        write: Callable[[str, int, str], None],
        max_attempts: int = 3,
        on_progress: Callable[[ClusterReport], None] | None = None,
        no_workers_grace: float = NO_WORKERS_GRACE,
        group: int = 1,
        regroup_after: float = REGROUP_AFTER,
        on_sample: Callable[[str, dict[str, Any]], None] | None = None,
        stop: RunStop | None = None,
        spool_dir: Path | None = None,
    ) -> None:
        self.executor, self.write, self.max_attempts = executor, write, max_attempts
        self.group = max(1, group)
        self.on_progress, self.on_sample = on_progress, on_sample
        self.stop = stop or RunStop()
        self._ending: float | None = None  # when the stop was acted on (monotonic)
        self._started = time.monotonic()  # run() starts the clock again
        self.no_workers_grace, self.regroup_after = no_workers_grace, regroup_after
        self.queue: deque[WorkUnit] = deque(units)
        self.report = ClusterReport()
        by_name: dict[str, list[WorkUnit]] = {}
        for unit in self.queue:
            state = self.report.sources.setdefault(unit.name, SourceState())
            state.units += 1
            by_name.setdefault(unit.name, []).append(unit)
        self._ranges = {
            name: SourceRanges(
                [u.unit_id for u in sorted(ranges, key=lambda u: u.first_frame)], spool_dir
            )
            for name, ranges in by_name.items()
            if len(ranges) > 1
        }
        # Each unit's last frame received (the next attempt resumes after it), and its
        # source's fusion state after that frame (the next attempt's tracks and counts).
        self._received = {u.unit_id: u.start_frame - 1 for u in self.queue}
        self._checkpoints = {u.unit_id: u.checkpoint for u in self.queue}
        self.running: dict[str, dict[int, WorkUnit]] = {}  # worker → its units by id
        self._sizes: dict[str, int] = {}  # worker → how many units its group started with
        self._current: dict[int, int] = {u.unit_id: u.attempt for u in self.queue}
        self._waiting: dict[int, float] = {}  # a live unit put back → since when (monotonic)
        self._stopping: dict[str, float] = {}  # workers told to end their group → since when
        self._regrouped: dict[int, int] = {}  # unit id → its attempts that were regroups
        # A live unit's current attempt: [the first frame it wrote, frames it wrote]. A frame
        # number between them not written is one the attempt dropped (stale, say): counted
        # from its summary, or here when its worker died with its counts.
        self._spans: dict[int, list[int]] = {}

    def run(self) -> ClusterReport:
        """Until every unit is done or its source failed; the report (its `failed` sources)."""
        started = self._started = time.monotonic()
        alone_since: float | None = None
        self.stop.started.set()
        try:
            while self.queue or self.running:
                if self.stop.asked.is_set() and self._end():
                    break
                self._assign()
                if not self.running and self.queue:
                    # Nobody to run the queue: wait for a worker (a restarted actor, a node
                    # that joins), then give up on what is left.
                    alone_since = alone_since or time.monotonic()
                    if time.monotonic() - alone_since > self.no_workers_grace:
                        self._fail_queue("no worker left to run it")
                        break
                else:
                    alone_since = None
                for report in self.executor.reports(timeout=0.5):
                    self._handle(report)
                self.report.seconds = time.monotonic() - started
                if self.on_progress is not None:
                    self.on_progress(self.report)
            # Ranges still held (a run stopped, or a range that failed): written after what
            # was, in order, so nothing a worker sent is lost.
            for name, ranges in self._ranges.items():
                for frame, line in ranges.rest():
                    self._write(name, frame, line)
                self.report.sources[name].held = ranges.held
        finally:
            self.report.seconds = time.monotonic() - started
        return self.report

    def _end(self) -> bool:
        """A stop was asked: the queue is dropped and every running group told to end, once.
        True when the run must end now: aborted, or past INTERRUPT_GRACE."""
        now = time.monotonic()
        if self._ending is None:
            self._ending = now
            self.queue.clear()
            for worker in self.running:
                self.executor.stop(worker)
        return self.stop.aborted.is_set() or now - self._ending > INTERRUPT_GRACE

    # -- scheduling ------------------------------------------------------------------------
    def _assign(self) -> None:
        """Idle workers take the next units (a pull queue: fast workers take more)."""
        self.queue = deque(u for u in self.queue if not self.report.sources[u.name].error)
        idle = sorted(self.executor.workers() - set(self.running))
        groups, self.queue = group_units(self.queue, len(idle), self.group)
        for group in groups:
            self._start(idle.pop(0), group)
        self._regroup()

    def _regroup(self) -> None:
        """A live stream waiting past `regroup_after` with no idle worker: the lightest busy
        worker whose group is all live streams (it would never come free) is told to stop;
        when its group has ended its streams are back on the queue beside the waiting one,
        and it takes them all (`_groups`)."""
        now = time.monotonic()
        # One regroup at a time; a worker that did not stop (nor die) within STOP_GRACE no
        # longer holds the others back (its group, when it ends, is still a regroup).
        pending = any(now - since <= STOP_GRACE for since in self._stopping.values())
        overdue = any(
            u.live and now - self._waiting.get(u.unit_id, now) >= self.regroup_after
            for u in self.queue
        )
        if pending or not overdue:
            return
        alive = self.executor.workers()
        busy = [
            worker
            for worker, units in self.running.items()
            if worker in alive and units and all(u.live for u in units.values())
        ]
        if not busy:
            return
        worker = min(busy, key=lambda w: sum(u.cost for u in self.running[w].values()))
        if self.executor.stop(worker):
            self._stopping[worker] = now
            self.report.regroups += 1

    def _start(self, worker: str, group: Group) -> None:
        # A file read in real time starts again where its stream has got to by now (its last
        # frame at most: the frames it passed over are counted when that one comes).
        now = time.monotonic()
        group = tuple(
            replace(u, start_frame=_capped(self.report.sources[u.name].reached(now), u.frames))
            if u.paced and u.attempt > 1
            else u
            for u in group
        )
        self.running[worker] = {unit.unit_id: unit for unit in group}
        self._sizes[worker] = len(group)
        self.report.workers_seen.add(worker)
        # Its node from the start (progress by node); its Done adds memory and the rest.
        self.report.worker_info.setdefault(worker, dict(self.executor.info(worker)))
        for unit in group:
            self._waiting.pop(unit.unit_id, None)
            self._current[unit.unit_id] = unit.attempt
            self.report.attempts += 1
            self.report.sources[unit.name].attempts += 1
        self.executor.start(worker, group)

    def _handle(self, report: Report) -> None:
        if isinstance(report, Sample):  # a worker's telemetry line
            if self.on_sample is not None:
                self.on_sample(report.worker, report.line)
            return
        if isinstance(report, Lost):
            self.report.lost_workers += 1
            self._stopping.pop(report.worker, None)
            # Back first in the queue in their order (each goes to its front).
            for lost in reversed(self.running.pop(report.worker, {}).values()):
                self._again(lost, f"worker {report.worker} lost")
            return
        if self._current.get(report.unit_id) != report.attempt:
            # An attempt already given up (its actor was presumed dead, then answered):
            # its frames are not written; the current attempt writes them.
            self.report.stale_batches += 1
            return
        units = self.running.get(report.worker, {})
        unit = units.get(report.unit_id)
        if unit is None:
            return
        if isinstance(report, Batch):
            if not self.report.first_result:  # the workers' start ends here, roughly
                self.report.first_result = time.monotonic() - self._started
                self.report.first_frames = len(report.frames)
            self._commit(unit, report)
            return
        del units[report.unit_id]
        stopping = report.worker in self._stopping
        if not units:
            self.running.pop(report.worker, None)
            self._stopping.pop(report.worker, None)
        if isinstance(report, Done) and stopping and unit.live and self._ending is None:
            state = self.report.sources[unit.name]
            state.regrouped += 1
            for reason, count in report.summary.get("dropped", {}).items():
                state.dropped_before[reason] = state.dropped_before.get(reason, 0) + count
            self._again(unit, "regrouped", counted=False)  # its stream goes on, regrouped
        elif isinstance(report, Done):
            state = self.report.sources[unit.name]
            state.done_units += 1
            state.summary = report.summary
            state.unit_summaries[unit.unit_id] = report.summary
            if "worker" in report.summary:
                self.report.worker_info[report.worker] = dict(report.summary["worker"])
            ranges = self._ranges.get(unit.name)
            if ranges is not None:  # the ranges after it that are due now
                for frame, line in ranges.finish(unit.unit_id):
                    self._write(unit.name, frame, line)
                state.held = ranges.held
        elif report.retry:
            self._again(unit, report.error)
        elif self._sizes.get(report.worker, 1) > 1 and not (unit.alone or report.own):
            # A group's Pipeline failed on the user's error: whose, its own run tells (not
            # after a stop: no unit starts then).
            if self._ending is None:
                self._current[unit.unit_id] = unit.attempt + 1
                self.queue.appendleft(replace(unit, attempt=unit.attempt + 1, alone=True))
        else:
            self._fail(unit.name, report.error)

    def _commit(self, unit: WorkUnit, batch: Batch) -> None:
        state = self.report.sources[unit.name]
        frames = batch.frames
        now = time.monotonic()
        if unit.live and state.base is None:  # a live retry's first frames: after the gap
            if unit.paced:  # numbered by the file: the gap is what it passed over
                gap, state.base = max(0, frames[0][0] - state.committed - 1), 0
            else:
                gap = max(0, state.reached(now) - len(frames) - state.committed - 1)
                state.base = state.committed + 1 + gap
            state.lost += gap
        base = state.base if unit.live else 0
        ranges = self._ranges.get(unit.name)
        held = ranges is not None and ranges.holds(unit.unit_id)
        fresh = False  # the batch's last frame is new: its checkpoint is the one after it
        for frame, line in frames:
            frame += base or 0
            fresh = frame > self._received[unit.unit_id]
            if not fresh:  # sent again by a retried attempt
                state.duplicates += 1
                continue
            self._received[unit.unit_id] = frame
            if unit.live:
                self._spans.setdefault(unit.unit_id, [frame, 0])[1] += 1
            self.report.frames_by_worker[batch.worker] = (
                self.report.frames_by_worker.get(batch.worker, 0) + 1
            )
            if held:  # a later range: written once the ranges before it are
                assert ranges is not None
                ranges.hold(unit.unit_id, frame, line)
                continue
            self._write(unit.name, frame, line, now)
        if fresh:
            self._checkpoints[unit.unit_id] = batch.checkpoint
        if ranges is not None:
            state.held = ranges.held

    def _write(self, name: str, frame: int, line: str, now: float | None = None) -> None:
        """Frame `frame` of source `name` into the outputs (in order, once)."""
        state = self.report.sources[name]
        self.write(name, frame, line)
        state.committed = frame
        state.written += 1
        now = time.monotonic() if now is None else now
        state.first_at = state.first_at or now
        state.last_at = now

    def _again(self, unit: WorkUnit, reason: str, counted: bool = True) -> None:
        """The unit's next attempt, after the last frame committed, first in the queue; one
        not `counted` (a regroup, not a failure) is not held against `max_attempts`."""
        state = self.report.sources[unit.name]
        span = self._spans.pop(unit.unit_id, None)
        if counted and span is not None:  # its own counts went with it: what it skipped
            unseen = self._received[unit.unit_id] - span[0] + 1 - span[1]
            if unseen > 0:
                state.dropped_before[UNREPORTED] = state.dropped_before.get(UNREPORTED, 0) + unseen
        if self._ending is not None:  # a stop was asked: no other attempt
            return
        tries = unit.attempt - self._regrouped.get(unit.unit_id, 0)
        if counted and tries >= self.max_attempts:
            self._fail(unit.name, f"gave up after {tries} attempts ({reason})")
            return
        if counted:
            self.report.reassignments += 1
        else:
            self._regrouped[unit.unit_id] = self._regrouped.get(unit.unit_id, 0) + 1
        if unit.live:
            state.base = None  # placed after the gap when its frames come
            self._waiting[unit.unit_id] = time.monotonic()
        retry = unit.retried(self._received[unit.unit_id] + 1, self._checkpoints[unit.unit_id])
        self._current[unit.unit_id] = retry.attempt
        self.queue.appendleft(retry)

    def _fail(self, name: str, error: str) -> None:
        state = self.report.sources[name]
        state.error = state.error or error

    def _fail_queue(self, error: str) -> None:
        for unit in list(self.queue):
            self._fail(unit.name, error)
        self.queue.clear()


def _capped(frame: int, frames: int) -> int:
    """`frame`, or a stream of `frames` frames' last one (0 frames: not known, or looped)."""
    return min(frame, frames - 1) if frames > 0 else frame
