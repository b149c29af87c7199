"""The stage graph of one run: a reader thread per source → per-source inbox → preprocess (the
lanes the scheduler picks for the frame) → per-task batcher inbox → that task's inference
workers, which also decode their results → the consumer, which joins a frame's task results,
releases frames in order per source and runs the source's fusers into a FrameResult."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from visionrt.config.pipeline import PipelineOptions
from visionrt.errors import StageError, VisionRTError
from visionrt.fuse import Fused, Fuser
from visionrt.hardware import lower_priority
from visionrt.pipeline.flow import END, Flow, Item, Job
from visionrt.pipeline.gating import processed
from visionrt.pipeline.inbox import Inboxes
from visionrt.pipeline.lanes import Lane, numbered
from visionrt.pipeline.ordering import InOrder
from visionrt.pipeline.readers import FRESHER, Readers
from visionrt.pipeline.work import Inputs, Work
from visionrt.sources import Source
from visionrt.telemetry import Telemetry
from visionrt.types import Detections, FrameResult


class Graph:
    """Runs the stages for one pass over `inputs` doing `work` (work.py): each task, ladder
    variant and the region detector a lane.

    `service`: sources come and go while it runs (`add_source`, `retire`); its queues are sized
    for live sources and it ends when stopped, not when its last source ends."""

    def __init__(
        self,
        inputs: Inputs,
        work: Work,
        options: PipelineOptions,
        telemetry: Telemetry,
        flow: Flow,
        on_error: Callable[[BaseException], None],
        service: bool = False,
    ) -> None:
        sources, tasks, regions = inputs.sources, work.tasks, work.regions
        self.gating = work.gating
        self.options, self.telemetry, self.flow = options, telemetry, flow
        self.scheduler, self.class_names = work.scheduler, tuple(work.class_names)
        self.fusers = [list(steps) for steps in work.fusers]
        self._on_error = on_error
        any_live = any(s.live for s in sources) or service
        self.decoded: Inboxes[Item] = Inboxes(
            1 if any_live else options.queue_size, flow.aborting, flow.readers_overdue
        )
        # A lane's inbox that gets room for a source may let the preprocess thread take that
        # source's next frame again (`_has_room`).
        nudge = self.decoded.nudge
        self.lanes = [
            Lane(i, t, any_live, options, flow, numbered(tasks, i), nudge)
            for i, t in enumerate(tasks)
        ]
        # The ladder's detector variants: lanes of their own, idle until a rung uses them.
        self.lanes += [
            Lane(len(tasks) + j, t, any_live, options, flow, f"variant{j + 1}_", nudge)
            for j, t in enumerate(work.variants)
        ]
        self.region_lane = -1
        if regions is not None:
            self.region_lane = len(self.lanes)
            lane = Lane(self.region_lane, regions, any_live, options, flow, "region_", nudge)
            self.lanes.append(lane)
        self.detector = tasks[0].name
        self._owned: list[tuple[int, ...]] = []  # each source's own lanes (`_own_lanes`)
        self._owned_for = -1  # the number of sources they were worked out for
        in_flight = sum(lane.concurrency * lane.task.batch for lane in self.lanes)
        # Lists of jobs, a batch's at a time (one hand-off per batch, not per frame), or END.
        self.inferred: queue.Queue[Any] = queue.Queue(maxsize=options.queue_size + in_flight)
        self._next_seq = [0] * len(sources)
        # Decoders keep YUV frames as they are when the detector's device converts them.
        self.source_side = Readers(
            sources,
            inputs.labels,
            inputs.named,
            self.decoded,
            telemetry,
            flow,
            self._guard,
            service,
            i420=self.lanes[0].i420,
            shared=options.reader_threads,
            pinning=next((lane.pinning for lane in self.lanes if lane.pinning), None),
        )
        # The source side's lists, which grow as a service's sources are added.
        self.sources, self.labels = self.source_side.sources, self.source_side.labels
        self.live = self.source_side.live

    def depths(self) -> dict[str, Callable[[], int]]:
        """Readers of the frames waiting between stages, by queue name."""
        gauges: dict[str, Callable[[], int]] = {"decoded": self.decoded.depth}
        for lane in self.lanes:
            gauges[lane.stage["prepared"]] = lane.inbox.depth
        gauges["inferred"] = self._inferred_depth
        return gauges

    def _inferred_depth(self) -> int:
        # tuple() copies the deque in one step under the GIL; each list's length is fixed.
        return sum(len(jobs) for jobs in tuple(self.inferred.queue) if jobs is not END)

    def run(self) -> Iterator[FrameResult]:
        """Start the threads and yield results; the caller's `finally` must call `finish()`."""
        self.workers = [
            threading.Thread(target=self._guard, args=(self._preprocess,), name="preprocess"),
            *(
                threading.Thread(
                    target=self._guard,
                    args=(self._infer, lane),
                    name=f"infer-{i}" if lane.index == 0 else f"{lane.task.name}-infer-{i}",
                )
                for lane in self.lanes
                for i in range(lane.concurrency)
            ),
        ]
        for thread in self.workers:
            thread.daemon = True
            thread.start()
        self.source_side.start()
        return self._join()

    def add_source(self, source: Source, label: str, named: bool, fusers: Sequence[Fuser]) -> None:
        """Start reading `source` (a service's camera added while it runs; opened with the next
        source id and already known to the scheduler and gating). The other sources' frames are
        not held up: only lists grow, each before the first frame could need it."""
        if not self.source_side.accepting():
            raise RuntimeError("the service is stopping: no source can be added")  # (503)
        self.fusers.append(list(fusers))
        self._next_seq.append(0)
        self.source_side.add(source, label, named)

    def retire(self, source_id: int) -> None:
        """Stop reading a source (a service's camera removed); what it read is still delivered."""
        self.source_side.retire(source_id)

    def forget(self, source_id: int) -> None:
        """Let go of a source's per-frame state once its last frames are through: its fusers
        (tracks, last results, held depth maps) and its motion reference."""
        self.fusers[source_id] = []
        if self.gating is not None:
            self.gating.forget(source_id)

    def release(self) -> None:
        """A service was stopped: the graph ends once its readers have."""
        self.source_side.release()

    @property
    def readers(self) -> list[threading.Thread]:
        return self.source_side.threads

    def finish(self) -> None:
        """Wait for the threads to end, giving back what is left in the queues."""
        self.flow.wait_for(self.readers, self.workers, [self._drain])

    # -- threads ---------------------------------------------------------------------------
    def _guard(self, stage: Callable[..., None], *args: Any) -> None:
        """Run a stage; an exception aborts the run and reaches the caller as one line."""
        try:
            helpers = (self.source_side.read, self.source_side.read_shared, self._preprocess)
            if self.options.helper_nice and stage in helpers:
                lower_priority(self.options.helper_nice)
            stage(*args)
        except BaseException as err:
            if not isinstance(err, VisionRTError):
                name = threading.current_thread().name
                first = (str(err).strip().splitlines() or [""])[0]
                wrapped = StageError(f"{name} stage failed: {type(err).__name__}: {first}")
                wrapped.__cause__ = err
                err = wrapped
            self._on_error(err)

    def _preprocess(self) -> None:
        try:
            # A frame of each source that has room at a time (one take, one wake-up, for them
            # all): a source's own lanes had room for its one frame when it was taken.
            # At least one: a service may start with no source and get its first later.
            while taken := self.decoded.take(
                max(1, len(self.sources)), ready=self._has_room, one_each=True
            ):
                for item in taken:
                    if not self._prepare(item):
                        return
        finally:
            for lane in self.lanes:
                lane.inbox.close()

    def _has_room(self, source_id: int) -> bool:
        """The source's next frame can go on without holding up another source: none of its
        own lanes (those not every source runs: the rgb camera's depth, a detector of its frame
        size) is full for it. Otherwise its frames wait in the decoded inbox while the other
        sources' go on: the one preprocess thread waited in that lane's put, and the seed
        scenario's detect-only cameras ran at the depth camera's pace. A lane every source runs
        holds them all up alike, and its put still waits as before (a frame's windows are then
        planned from the boxes of as many frames back as before: regions mode's tracking
        depends on it). A live source's put never waits."""
        if self.live[source_id]:
            return True
        return not any(self.lanes[i].inbox.full(source_id) for i in self._own_lanes(source_id))

    def _own_lanes(self, source_id: int) -> tuple[int, ...]:
        """The lanes of the source's schedule that not every source's has (worked out again
        when a service adds a source)."""
        schedule = self.scheduler.schedule
        if self._owned_for != len(schedule):
            shared = set(schedule[0]).intersection(*schedule[1:]) if schedule else set()
            self._owned = [tuple(i for i in lanes if i not in shared) for lanes in schedule]
            self._owned_for = len(schedule)
        return self._owned[source_id]

    def _prepare(self, item: Item) -> bool:
        """Prepare a frame for each lane scheduled on it; False when the run is aborting."""
        frame = item.frame
        source_id = frame.source_id
        label = self.labels[source_id]
        moved, regions = self.gating.measure(item) if self.gating else (True, None)
        age = time.perf_counter() - frame.captured_at
        decision = self.scheduler.decide(source_id, age, frame.timestamp, moved, regions)
        if decision.dropped:
            self.telemetry.drop("preprocess", decision.dropped, label)
            return True
        if self.gating is not None:
            self.gating.decided(item, decision, label)
        # Numbered after the last drop that leaves no trace: the consumer never waits for a gap.
        item.seq = self._next_seq[source_id]
        self._next_seq[source_id] += 1
        if not decision.lanes:  # nothing to infer: straight to the consumer
            return self.flow.put(self.inferred, [Job(item, -1)])
        item.waiting = len(decision.lanes)
        for lane in (self.lanes[i] for i in decision.lanes):
            started = time.perf_counter()
            slot = self.flow.get(lane.free)
            if slot is END:
                return False
            if lane.index == self.region_lane:
                geometry = lane.task.prepare_windows(  # type: ignore[attr-defined]
                    frame.image, lane.buffers[slot], decision.windows
                )
            else:
                image = frame.pixels if lane.i420 else frame.image
                geometry = lane.task.prepare(image, lane.buffers[slot], lane.geometry[slot])
            lane.geometry[slot] = geometry
            seconds = time.perf_counter() - started
            item.timings[lane.stage["preprocess"]] = seconds
            self.telemetry.record(lane.stage["preprocess"], seconds)
            job = Job(item, lane.index, slot, geometry)
            if not lane.inbox.put(source_id, job, self.live[source_id], self._evicted_job):
                return False
        return True

    def _evicted_job(self, job: Job) -> None:
        """Live mode: a newer frame took this one's place before inference; the consumer
        learns of it so the frame's other tasks are not waited for."""
        self.lanes[job.lane].free.put(job.slot)
        job.slot, job.dropped = -1, True
        self.flow.put(self.inferred, [job])

    def _infer(self, lane: Lane) -> None:
        """Run batches and decode their rows here, beside the runtime: the consumer then only
        joins, orders and fuses (decode on one consumer thread capped multi-worker lanes)."""
        try:
            while jobs := lane.inbox.take(lane.task.batch, self.options.batch_wait_ms / 1e3):
                started = time.perf_counter()
                output = lane.task.infer([lane.buffers[job.slot] for job in jobs])
                seconds = time.perf_counter() - started
                self.telemetry.record(lane.stage["infer"], seconds)  # once per batch
                for job in jobs:
                    lane.free.put(job.slot)
                    job.slot = -1
                for i, job in enumerate(jobs):
                    job.item.timings[lane.stage["infer"]] = seconds
                    self._decode(lane, job, output[i])
                if not self.flow.put(self.inferred, jobs):
                    return
        finally:
            self.flow.put(self.inferred, END)

    def _decode(self, lane: Lane, job: Job, output: Any) -> None:
        started = time.perf_counter()
        job.output = lane.task.decode(output, job.geometry)
        seconds = time.perf_counter() - started
        label = self.labels[job.item.frame.source_id]
        for event, count in lane.task.drain_events().items():
            self.telemetry.count(event, label, count)
        job.item.timings[lane.stage["postprocess"]] = seconds
        self.telemetry.record(lane.stage["postprocess"], seconds)

    # -- the consumer (the caller's thread) ----------------------------------------------
    def _join(self) -> Iterator[FrameResult]:
        in_order: InOrder[Item] = InOrder()
        ended, workers = 0, sum(lane.concurrency for lane in self.lanes)
        while ended < workers:
            jobs = self.flow.get(self.inferred)
            if self.flow.aborting.is_set():
                return
            if jobs is END:
                ended += 1
                continue
            for job in jobs:
                item = self._joined(job)
                if item.waiting == 0:
                    for ready in in_order.push(item.frame.source_id, item.seq, item):
                        if not ready.dropped:
                            yield self._fuse(ready)
        for ready in in_order.flush():
            if not ready.dropped:
                yield self._fuse(ready)

    def _joined(self, job: Job) -> Item:
        """The frame `job` is part of, with the job's result in it."""
        if job.lane < 0:
            return job.item
        item, lane = job.item, self.lanes[job.lane]
        if job.dropped and not item.dropped:  # counted once per frame, whichever task lost it
            item.dropped = True
            label = self.labels[item.frame.source_id]
            self.telemetry.drop(lane.stage["preprocess"], FRESHER, label)
        elif not item.dropped:
            item.results[lane.task.name] = job.output
        job.output = None
        item.waiting -= 1
        return item

    def _fuse(self, item: Item) -> FrameResult:
        """The frame's task results through its source's fusers, in frame order per source."""
        started = time.perf_counter()
        frame = item.frame
        detections = item.results.get(self.detector, Detections.empty())
        fused = Fused(frame, item.results, detections, reused=item.reused, windows=item.windows)
        for fuser in self.fusers[frame.source_id]:
            fuser.fuse(fused)
        label = self.labels[frame.source_id]
        for event in fused.events:
            self.telemetry.count(event.label, label)
        if fused.analytics:
            self.telemetry.set_analytics(label, fused.analytics)
        done = time.perf_counter()
        item.timings["fuse"] = done - started
        self.telemetry.record("fuse", done - started)
        latency = done - frame.captured_at
        self.telemetry.frame_out(latency, label)
        self.scheduler.observe(latency)
        return FrameResult(
            frame,
            fused.detections,
            item.timings,
            self.class_names,
            fused.depth,
            fused.distance,
            fused.tracks,
            processed=processed(item) if self.gating else "",
            motion_boxes=item.motion_boxes,
            regions=item.windows,
            analytics=fused.analytics,
            events=tuple(fused.events),
            depth_from=fused.depth_from,
        )

    def _drain(self) -> None:
        """Give the buffers of abandoned jobs back (the end of a run)."""
        self.decoded.drain()
        for lane in self.lanes:
            for job in lane.inbox.drain():
                if job.slot >= 0:
                    lane.free.put(job.slot)
        while True:
            try:
                self.inferred.get_nowait()
            except queue.Empty:
                break
