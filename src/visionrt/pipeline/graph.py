"""The stage graph of one run: a reader thread per source → per-source inbox → preprocess (every
task scheduled on the frame) → per-task batcher inbox → that task's inference workers → the
consumer, which decodes, joins a frame's task results, releases frames in order per source and
fuses them into a FrameResult."""

from __future__ import annotations

import dataclasses
import queue
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from visionrt.errors import StageError, VisionRTError
from visionrt.pipeline.degrade import Degrader
from visionrt.pipeline.flow import END, Flow, Item, Job, lower_priority
from visionrt.pipeline.inbox import Inboxes
from visionrt.pipeline.options import PipelineOptions
from visionrt.pipeline.ordering import InOrder
from visionrt.postprocess.depth import DepthSmoother
from visionrt.postprocess.track import Tracker, make_tracker
from visionrt.sources import Source
from visionrt.tasks.base import Task
from visionrt.telemetry import Telemetry
from visionrt.types import Detections, FrameResult

FRESHER = "queue full, newer frame kept"
LARGE_BUFFER = 64 * 2**20  # bytes of one frame's input above which a lane keeps few of them
# A source's counts that are also telemetry events (summary `events`, visionrt_events_total).
SOURCE_EVENTS = (("reconnects", "source: reconnect"), ("restarts", "source: worker restart"))


class Lane:
    """One task's part of the graph: its input buffers, the inbox its batches are taken from
    (one per source, so batches mix cameras round-robin), and its inference workers.

    The first lane's stage names are the plain ones ("infer"); others are prefixed with the
    task's name ("depth_infer")."""

    def __init__(
        self,
        index: int,
        task: Task,
        live: bool,
        options: PipelineOptions,
        flow: Flow,
        prefix: str | None = None,
    ) -> None:
        self.index, self.task = index, task
        self.concurrency = max(1, task.backend.concurrency)
        # Live: a frame or two waits per source at most, so latency cannot build up. Large
        # buffers (a 4K frame's tiles: ~160 MB) wait one per source: memory, not speed, binds.
        per_source = self.concurrency * task.batch if live else options.queue_size
        if task.new_buffer().nbytes > LARGE_BUFFER:
            per_source = min(per_source, 1)
        self.inbox: Inboxes[Job] = Inboxes(per_source, flow.aborting)
        pool = per_source + 2 * self.concurrency * task.batch + 2
        self.buffers = [task.new_buffer() for _ in range(pool)]
        self.geometry: list[Any] = [None] * pool
        self.free: queue.Queue[int] = queue.Queue()
        for slot in range(pool):
            self.free.put(slot)
        if prefix is None:
            prefix = "" if index == 0 else f"{task.name}_"
        self.stage = {s: prefix + s for s in ("preprocess", "prepared", "infer", "postprocess")}


class Graph:
    """Runs the stages for one pass over `sources`; `schedule[i]` lists the lanes (tasks) run
    on source i's frames, the first lane's result being the frame's detections."""

    def __init__(
        self,
        sources: Sequence[Source],
        labels: Sequence[str],
        named: Sequence[bool],
        tasks: Sequence[Task],
        schedule: Sequence[Sequence[int]],
        options: PipelineOptions,
        telemetry: Telemetry,
        flow: Flow,
        on_error: Callable[[BaseException], None],
        tracker_high: float = 0.5,
        tracker_low: float = 0.1,
        variants: Sequence[Task] = (),
        degrader: Degrader | None = None,
        depth_smoother: DepthSmoother | None = None,
    ) -> None:
        self.sources, self.labels, self.named = sources, labels, named
        self.options, self.telemetry, self.flow = options, telemetry, flow
        self._on_error = on_error
        self.live = [s.live for s in sources]
        any_live = any(self.live)
        self.lanes = [Lane(i, t, any_live, options, flow) for i, t in enumerate(tasks)]
        self.schedule = [[self.lanes[i] for i in lanes] for lanes in schedule]
        # The degrade ladder's detector variants: lanes of their own, idle until a rung uses them.
        self.variant_lanes = [
            Lane(len(tasks) + j, t, any_live, options, flow, prefix=f"variant{j + 1}_")
            for j, t in enumerate(variants)
        ]
        self.lanes += self.variant_lanes
        self.degrader = degrader
        self.depth_smoother = depth_smoother
        # Frames of each source until the detector runs again (detect-every-N), and frames
        # since the last kept one (the degrade ladder's frame skipping without tracking).
        self._until_detect = [0] * len(sources)
        self._skipped = [0] * len(sources)
        self.decoded: Inboxes[Item] = Inboxes(
            1 if any_live else options.queue_size, flow.aborting, flow.readers_overdue
        )
        in_flight = sum(lane.concurrency * lane.task.batch for lane in self.lanes)
        self.inferred: queue.Queue[Any] = queue.Queue(maxsize=options.queue_size + in_flight)
        self.readers: list[threading.Thread] = []
        self._next_seq = [0] * len(sources)
        self.trackers: list[Tracker] = (
            [
                make_tracker(
                    options.tracker,
                    tracker_high,
                    tracker_low,
                    options.track_match_iou,
                    options.track_lost_seconds,
                    options.track_per_class,
                )
                for _ in sources
            ]
            if options.track
            else []
        )

    def depths(self) -> dict[str, Callable[[], int]]:
        """Readers of the frames waiting between stages, by queue name."""
        gauges: dict[str, Callable[[], int]] = {"decoded": self.decoded.depth}
        for lane in self.lanes:
            gauges[lane.stage["prepared"]] = lane.inbox.depth
        gauges["inferred"] = self.inferred.qsize
        return gauges

    def run(self) -> Iterator[FrameResult]:
        """Start the threads and yield results; the caller's `finally` must call `finish()`."""
        self.readers = [
            threading.Thread(
                target=self._guard, args=(self._read, i, s), name=f"source-{i}", daemon=True
            )
            for i, s in enumerate(self.sources)
        ]
        self._readers_left = len(self.readers)
        self._readers_lock = threading.Lock()
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
        for thread in [*self.readers, *self.workers]:
            thread.daemon = True
            thread.start()
        return self._join()

    def finish(self) -> None:
        """Wait for the threads to end, giving back what is left in the queues."""
        self.flow.wait_for(self.readers, self.workers, [self._drain])

    # -- threads ---------------------------------------------------------------------------
    def _guard(self, stage: Callable[..., None], *args: Any) -> None:
        """Run a stage; an exception aborts the run and reaches the caller as one line."""
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
            self._on_error(err)

    def _read(self, source_id: int, source: Source) -> None:
        label = self.labels[source_id]
        seen = {key: 0 for key, _ in SOURCE_EVENTS}
        try:
            frames = source.frames()
            while True:
                started = time.perf_counter()
                frame = next(frames, None)
                if frame is None:
                    break
                if self.named[source_id]:  # the user's name for it, not its path
                    frame = dataclasses.replace(frame, source_name=label)
                self.telemetry.frame_in(label)
                # Live, the wait for the camera (or a paced file's next frame time) is not
                # decoding: only what follows the capture counts.
                since = max(started, frame.captured_at) if source.live else started
                decode = time.perf_counter() - since
                item = Item(frame, timings={"decode": decode})
                self.telemetry.record("decode", decode)
                self._count_events(source, label, seen)
                if not self.decoded.put(source_id, item, source.live, self._evicted):
                    break
        finally:
            self._count_events(source, label, seen)
            with self._readers_lock:
                self._readers_left -= 1
                if self._readers_left == 0:
                    self.decoded.close()

    def _count_events(self, source: Source, label: str, seen: dict[str, int]) -> None:
        """The source's reconnects and worker restarts since the last look, as events. Polled
        per frame (two integer reads): a worker process's counts reach its stats only with the
        frames it hands over, so no call at the moment of the event could see them."""
        for key, event in SOURCE_EVENTS:
            count = getattr(source.stats, key)
            if count > seen[key]:
                self.telemetry.count(event, label, count - seen[key])
                seen[key] = count

    def _evicted(self, item: Item) -> None:
        self.telemetry.drop("decode", FRESHER, self.labels[item.frame.source_id])

    def _preprocess(self) -> None:
        try:
            while taken := self.decoded.take(1):
                if not self._prepare(taken[0]):
                    return
        finally:
            for lane in self.lanes:
                lane.inbox.close()

    def _prepare(self, item: Item) -> bool:
        """Prepare a frame for each task scheduled on it; False when the run is aborting."""
        frame = item.frame
        source_id, live = frame.source_id, self.live[frame.source_id]
        if live and time.perf_counter() - frame.captured_at > self.options.stale_after:
            reason = f"older than {self.options.stale_after}s"
            self.telemetry.drop("preprocess", reason, self.labels[source_id])
            return True
        rung = self.degrader.rung if self.degrader is not None else None
        every = rung.every if rung is not None else self.options.detect_every
        if every > 1 and not self.options.track:  # the ladder thins the frame rate
            self._skipped[source_id] = (self._skipped[source_id] + 1) % every
            if self._skipped[source_id]:
                reason = f"slo: 1 frame in {every}"
                self.telemetry.drop("preprocess", reason, self.labels[source_id])
                return True
        # Numbered after the last drop that leaves no trace: the consumer never waits for a gap.
        item.seq = self._next_seq[source_id]
        self._next_seq[source_id] += 1
        lanes = self.schedule[source_id]
        if rung is not None and rung.variant:
            lanes = [self.variant_lanes[rung.variant - 1], *lanes[1:]]
        if self.options.track and every > 1:
            if self._until_detect[source_id] > 0:  # tracking alone on this frame
                self._until_detect[source_id] -= 1
                lanes = lanes[1:]
            else:
                self._until_detect[source_id] = every - 1
        if not lanes:  # nothing to infer: straight to the consumer
            return self.flow.put(self.inferred, Job(item, -1))
        item.waiting = len(lanes)
        for lane in lanes:
            started = time.perf_counter()
            slot = self.flow.get(lane.free)
            if slot is END:
                return False
            geometry = lane.task.prepare(frame.image, lane.buffers[slot], lane.geometry[slot])
            lane.geometry[slot] = geometry
            seconds = time.perf_counter() - started
            item.timings[lane.stage["preprocess"]] = seconds
            self.telemetry.record(lane.stage["preprocess"], seconds)
            job = Job(item, lane.index, slot, geometry)
            if not lane.inbox.put(source_id, job, live, self._evicted_job):
                return False
        return True

    def _evicted_job(self, job: Job) -> None:
        """Live mode: a newer frame took this one's place before inference; the consumer
        learns of it so the frame's other tasks are not waited for."""
        self.lanes[job.lane].free.put(job.slot)
        job.slot, job.dropped = -1, True
        self.flow.put(self.inferred, job)

    def _infer(self, lane: Lane) -> None:
        try:
            while jobs := lane.inbox.take(lane.task.batch, self.options.batch_wait_ms / 1e3):
                started = time.perf_counter()
                output = lane.task.infer([lane.buffers[job.slot] for job in jobs])
                seconds = time.perf_counter() - started
                for i, job in enumerate(jobs):
                    lane.free.put(job.slot)
                    job.slot, job.output = -1, output[i]
                    job.item.timings[lane.stage["infer"]] = seconds
                    self.telemetry.record(lane.stage["infer"], seconds)
                    if not self.flow.put(self.inferred, job):
                        return
        finally:
            self.flow.put(self.inferred, END)

    # -- the consumer (the caller's thread) ----------------------------------------------
    def _join(self) -> Iterator[FrameResult]:
        in_order: InOrder[Item] = InOrder()
        ended, workers = 0, sum(lane.concurrency for lane in self.lanes)
        while ended < workers:
            job = self.flow.get(self.inferred)
            if self.flow.aborting.is_set():
                return
            if job is END:
                ended += 1
                continue
            item = self._decode(job)
            if item.waiting == 0:
                for ready in in_order.push(item.frame.source_id, item.seq, item):
                    if not ready.dropped:
                        yield self._fuse(ready)
        for ready in in_order.flush():
            if not ready.dropped:
                yield self._fuse(ready)

    def _decode(self, job: Job) -> Item:
        if job.lane < 0:
            return job.item
        item, lane = job.item, self.lanes[job.lane]
        if job.dropped and not item.dropped:  # counted once per frame, whichever task lost it
            item.dropped = True
            label = self.labels[item.frame.source_id]
            self.telemetry.drop(lane.stage["preprocess"], FRESHER, label)
        elif not item.dropped:
            started = time.perf_counter()
            item.results[lane.task.name] = lane.task.decode(job.output, job.geometry)
            seconds = time.perf_counter() - started
            drain = getattr(lane.task, "drain_events", None)  # optional part of the contract
            if drain is not None:
                label = self.labels[item.frame.source_id]
                for event, count in drain().items():
                    self.telemetry.count(event, label, count)
            item.timings[lane.stage["postprocess"]] = seconds
            self.telemetry.record(lane.stage["postprocess"], seconds)
        job.output = None
        item.waiting -= 1
        return item

    def _fuse(self, item: Item) -> FrameResult:
        """The frame's task results as one FrameResult: each detection gets its distance."""
        name = self.lanes[0].task.name
        detections = item.results.get(name, Detections.empty())
        frame = item.frame
        tracks = None
        if self.trackers:  # in order per source: the consumer releases frames in sequence
            tracker = self.trackers[frame.source_id]
            if name in item.results:
                tracks = tracker.update(detections, frame.timestamp)
            else:
                tracks = tracker.predict(frame.timestamp)
            detections = tracks.detections
        depth = item.results.get("depth")
        distance = None
        if depth is not None:
            from visionrt.postprocess.depth import box_distance

            if self.depth_smoother is not None:  # in order per source, as EMA needs
                depth = self.depth_smoother.smooth(frame.source_id, depth, frame.timestamp)
            distance = box_distance(depth, detections.xyxy)
        latency = time.perf_counter() - frame.captured_at
        self.telemetry.frame_out(latency, self.labels[frame.source_id])
        if self.degrader is not None:
            self.degrader.observe(latency)
        names = getattr(self.lanes[0].task, "class_names", ())
        return FrameResult(frame, detections, item.timings, names, depth, distance, tracks)

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
