"""A source decoded in a worker process of its own, its frames handed over through a ring of
shared-memory slots (`SourceOptions(workers="process")`).

- Start method: spawn, since the parent has threads and fork would copy their locks. The worker
  imports `visionrt` (NumPy, PyAV, OpenCV) and no inference runtime, and opens the source with
  `open_source(..., workers="thread")` before `ProcessSource()` returns: a bad path fails there,
  with the worker's own error class and one-line message. As with any spawned process, a script
  that opens one must do so under `if __name__ == "__main__":` (spawn imports it again).
- Ring: `slots` frames in one `SharedMemory` segment, created by the parent for the shape the
  worker reports with its first frame (again after a resolution change, and for each new worker).
  The parent unlinks the segment as soon as the worker has mapped it, so nothing is left in
  /dev/shm whichever process dies later. Only (slot, index, timestamps) cross the pipe.
- Leases: a frame's `image` is an array over its slot whose base is a small lease object. NumPy
  points every view or slice of the image at the image, which holds the lease; when the lease is
  collected the slot goes back to the worker (four to a message, at once where the worker may be
  short of slots), so a frame stays valid until its last user is done and the pipeline needs to
  know nothing of it. File mode: the worker waits for a free slot,
  every frame is delivered in order. A reader that holds every slot and asks for more waits
  `STALL_SECONDS` (room for other threads to release); then the parent collects garbage once
  (frames in reference cycles) and, if no slot came back, offers a ring twice the size, so that
  `list(source.frames())` works as with a thread source (an event says so). Live mode: the worker
  never waits, a frame with no free slot is dropped and counted (`missed`); when several frames
  wait in the pipe the parent hands out the newest and drops the others.
- Clocks: the worker sends capture times on `time.monotonic()`, CLOCK_MONOTONIC on Linux and one
  clock for every process; the parent maps them onto its own `time.perf_counter()`, whose origin
  need not be shared between processes.
- A worker that dies is seen at once (its process sentinel), reported in `warnings` and
  `events`, and started again after `reconnect_backoff` seconds, doubling up to
  `reconnect_max_backoff`, at most `reconnect_attempts` times in a row (`restarts` counts them).
  A file source resumes after the last frame handed over: the new worker decodes from the start
  and skips those, so no frame is given twice. A live source starts again, its indices and
  timestamps continuing (so does a paced `realtime` file, which stands for a camera). After the
  last attempt the source ends with `ended_early` set.
"""

from __future__ import annotations

import gc
import itertools
import multiprocessing
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import replace

from visionrt import errors
from visionrt.errors import ConfigError, SourceError, VisionRTError
from visionrt.frames import Pinning
from visionrt.sources.base import Source, SourceOptions, SourceStats
from visionrt.sources.ring import Ring, WorkerProcess
from visionrt.sources.worker import Message
from visionrt.types import Frame

RING_SLOTS = 8  # frames in flight per source: a batch, the sinks, and one being decoded
POLL_SECONDS = 0.1  # how often a waiting parent looks at stop()
START_SECONDS = 30.0  # interpreter start and imports, on top of the source's read_timeout
STALL_SECONDS = 0.5  # file mode: the reader holds every slot this long before the ring grows


class ProcessSource(Source):
    """`spec` opened by `open_source` in a worker process; frames arrive through shared memory.

    `slots` bounds the frames in flight: decoded and not yet released by every user. The module
    docstring says how leases, restarts and clocks work."""

    def __init__(
        self,
        spec: str,
        source_id: int = 0,
        options: SourceOptions | None = None,
        slots: int = RING_SLOTS,
    ) -> None:
        super().__init__()
        if slots < 1:
            raise ConfigError(f"process source: expected at least 1 ring slot, got {slots}")
        self.spec = self.name = spec
        self.source_id = source_id
        self.options = options or SourceOptions(workers="process")
        self._worker_options = replace(self.options, workers="thread")
        self.slots = slots
        self.size: tuple[int, int] | None = None
        self._context = multiprocessing.get_context("spawn")
        self._generations = itertools.count()
        self._rings: dict[int, Ring] = {}  # generation → ring the worker may still write
        self._ring: Ring | None = None  # the newest offered
        self._pinning: Pinning | None = None  # every ring is registered with it (pin_memory)
        self._backlog: deque[Message] = deque()
        self._child = SourceStats()  # the current worker's last report
        self._carried = SourceStats()  # dead live workers' counts, and this side's own
        self._last_index = -1
        # A restart's gap runs from the last frame before the death to the first frame after.
        self._last_frame_at = time.perf_counter()
        self._gap_since: float | None = None
        self._index_base = 0
        self._time_base = 0.0
        self._attempt = 0
        self._idle = 0
        worker = WorkerProcess(self._context, spec, source_id, self._worker_options, skip=0)
        self._worker: WorkerProcess | None = worker
        self._await_ready(worker)
        self._started = worker.info["started"]
        self._adopt(worker)

    def frames(self) -> Iterator[Frame]:
        try:
            while not self._stopped and self._worker is not None:
                message: Message | None
                if self._backlog:
                    message = self._backlog.popleft()
                else:
                    message = self._worker.receive(POLL_SECONDS)
                if message is None:
                    self._unstick()
                    continue
                self._idle = 0
                kind = message[0]
                if kind == "frames":  # a file's, several at once: each in turn
                    self._backlog.extendleft(reversed(message[1]))
                    continue
                if kind == "frame":
                    frame = self._take(self._freshest(message))
                    if frame is not None:
                        yield frame
                elif kind == "shape":
                    self._offer(message[1], self.slots)
                elif kind == "attached":
                    self._attached(message[1])
                elif kind in ("stats", "end"):
                    self._compose(message[1])
                    if kind == "end":
                        return
                elif kind == "error":
                    self._compose(message[3])
                    raise _error(message[1], message[2])
                elif kind == "died" and not self._stopped and not self._restart(message[1]):
                    if not self.live and self.stats.frames == 0:
                        raise SourceError(self.stats.ended_early)
                    self.check_ending()
                    return
        finally:
            self._close_gap()  # none came after the last death
            self._finish()

    @property
    def pid(self) -> int | None:
        """The current worker's process id (None between workers and after the end)."""
        worker = self._worker
        return worker.process.pid if worker is not None else None

    def want_i420(self) -> None:
        super().want_i420()
        if self.i420:  # the worker running now is told; one started later starts so
            self._worker_options = replace(self._worker_options, pixels="i420")
            if self._worker is not None:
                self._worker.send(("i420",))

    def pin_memory(self, pinning: Pinning) -> None:
        self._pinning = pinning
        for ring in list(self._rings.values()):
            ring.pin(pinning)

    def stop(self) -> None:
        super().stop()
        worker = self._worker
        if worker is not None:
            worker.send(("stop",))

    def close(self) -> None:
        """End the worker and unlink the ring; frames still held stay valid until released."""
        self._stopped = True
        self._finish()

    # -- frames -------------------------------------------------------------------------------

    def _take(self, message: Message) -> Frame | None:
        _, generation, slot, index, stamp, captured, source_name, item = message
        ring = self._rings.get(generation)
        if ring is None:  # closed by another thread meanwhile
            return None
        if self.live:
            index += self._index_base
            stamp += self._time_base
        elif index <= self._last_index:  # a restarted worker never repeats one, but be sure
            ring.release(slot)
            return None
        self._last_index = index
        self._attempt = 0
        self.stats.frames += 1
        self._last_frame_at = time.perf_counter()
        self._close_gap()
        return Frame(
            source_id=self.source_id,
            index=index,
            pixels=ring.lease(slot),
            timestamp=stamp,
            captured_at=captured - time.monotonic() + time.perf_counter(),
            source_name=source_name,
            item=item,
        )

    def _freshest(self, message: Message) -> Message:
        """Live mode: the newest of the frames waiting in the pipe; the older ones are dropped."""
        while self.live and not self._backlog and self._worker is not None:
            following = self._worker.receive(0)
            if following is None:
                break
            if following[0] != "frame":
                self._backlog.append(following)
                break
            ring = self._rings.get(message[1])
            if ring is not None:
                ring.release(message[2])
            self._carried.missed += 1
            self._compose()
            message = following
        return message

    def _offer(self, shape: tuple[int, ...], slots: int) -> None:
        assert self._worker is not None
        ring = Ring(next(self._generations), tuple(shape), slots, self._worker, self._pinning)
        self._rings[ring.generation] = self._ring = ring
        self._worker.send(("ring", ring.generation, ring.name, ring.shape, slots))

    def _attached(self, generation: int) -> None:
        """The worker mapped this ring and writes no older one: unlink it, retire those."""
        self._rings[generation].unlink()
        for older in [g for g in self._rings if g < generation]:
            self._rings.pop(older).retire()

    def _unstick(self) -> None:
        """Nothing came for a while. If the reader holds every slot of a file source, free
        frames kept only by reference cycles, and if that is not enough, grow the ring."""
        self._idle += 1
        for held in list(self._rings.values()):
            held.flush()  # the worker may wait for a slot released and not yet given back
        ring = self._ring
        if (
            self.live
            or ring is None
            or self._idle * POLL_SECONDS < STALL_SECONDS
            or len(self._rings) > 1  # a ring offered and not yet taken
            or len(ring.leased) < ring.slots
        ):
            return
        self._idle = 0
        gc.collect()
        if len(ring.leased) == ring.slots:
            self._carried.events.append(
                f"{self.name}: the reader held all {ring.slots} ring slots for"
                f" {STALL_SECONDS} s; ring grown to {2 * ring.slots}"
            )
            self._compose()
            self._offer(ring.shape, 2 * ring.slots)

    # -- workers ------------------------------------------------------------------------------

    def _await_ready(self, worker: WorkerProcess) -> bool:
        """Wait for the worker's "ready"; raise what it raised at open. False when stopped."""
        deadline = time.monotonic() + START_SECONDS + self.options.read_timeout
        while True:
            message = worker.receive(POLL_SECONDS)
            if message is not None and message[0] == "ready":
                worker.info = message[1]
                return True
            if message is None and not self._stopped and time.monotonic() < deadline:
                continue
            worker.close()
            if message is None and self._stopped:
                return False
            if message is None:
                raise SourceError(f"'{self.spec}': worker process did not start in time")
            if message[0] == "error":
                raise _error(message[1], message[2])
            # Its traceback is on stderr: often a script that starts workers outside
            # `if __name__ == "__main__":`, which spawn imports again in the worker.
            raise SourceError(
                f"'{self.spec}': worker process {message[1]} while opening (see its stderr)"
            )

    def _adopt(self, worker: WorkerProcess) -> None:
        info = worker.info
        self._worker = worker
        self._child = SourceStats()
        self.name, self.live, self.paced = info["name"], info["live"], info["paced"]
        self.fps = info["fps"]
        self.frame_count = info["frame_count"]
        self.frame_count_estimated = info["frame_count_estimated"]
        self.damage_hint, self.size = info["damage_hint"], info["size"]
        if self.live:
            self._index_base = self._last_index + 1
            self._time_base = info["started"] - self._started

    def _restart(self, reason: str) -> bool:
        """The worker died: report it and start another, with backoff. False when given up or
        stopped."""
        if self._gap_since is None:
            self._gap_since = self._last_frame_at
        self._drop_worker()
        if self.live:  # a file's new worker reads from the start and counts everything again
            self._fold(self._child)
        self._child = SourceStats()
        after = f"after frame {self._last_index}" if self._last_index >= 0 else "before a frame"
        line = f"{self.name}: worker process {reason} {after}"
        self._carried.warnings.append(line)
        self._carried.events.append(line)
        self._compose()
        options = self.options
        while not self._stopped:
            self._attempt += 1
            if self._attempt > options.reconnect_attempts:
                self._carried.ended_early = (
                    f"{self.name}: gave up after {options.reconnect_attempts} worker restarts"
                    f" ({reason})"
                )
                self._compose()
                return False
            delay = min(
                options.reconnect_backoff * 2 ** (self._attempt - 1), options.reconnect_max_backoff
            )
            self._carried.events.append(f"worker restart {self._attempt} in {delay:.2f} s")
            deadline = time.monotonic() + delay
            while time.monotonic() < deadline and not self._stopped:
                time.sleep(min(0.05, delay))
            if self._stopped:
                break
            self.stats.restarts += 1
            skip = 0 if self.live else self._last_index + 1
            worker = WorkerProcess(
                self._context, self.spec, self.source_id, self._worker_options, skip
            )
            try:
                if not self._await_ready(worker):
                    break
            except VisionRTError as err:
                reason = str(err)
                self._carried.events.append(reason)
                continue
            self._adopt(worker)
            self._compose()
            return True
        return False

    def _drop_worker(self) -> None:
        worker, self._worker = self._worker, None
        if worker is not None:
            worker.close()
        rings, self._rings, self._ring = self._rings, {}, None
        for ring in rings.values():
            ring.retire()
        self._backlog.clear()

    def _finish(self) -> None:
        self._drop_worker()

    def _close_gap(self) -> None:
        """A gap after a worker's death ends here (a frame came, or the source ended)."""
        if self._gap_since is not None:
            gap = time.perf_counter() - self._gap_since
            self._gap_since = None
            self._carried.gap_seconds += gap
            self.stats.gap_seconds += gap  # not _compose(): that would undo check_ending's lost

    # -- accounting ---------------------------------------------------------------------------

    def _fold(self, child: SourceStats) -> None:
        carried = self._carried
        carried.corrupt += child.corrupt
        carried.missed += child.missed
        carried.reconnects += child.reconnects
        carried.gap_seconds += child.gap_seconds
        carried.events.extend(child.events)
        carried.warnings.extend(child.warnings)

    def _compose(self, child: SourceStats | None = None) -> None:
        """This source's stats: the current worker's, plus what earlier ones and this side
        counted (`frames` and `restarts` are counted here only)."""
        if child is not None:
            self._child = child
        child, carried, stats = self._child, self._carried, self.stats
        stats.corrupt = carried.corrupt + child.corrupt
        stats.missed = carried.missed + child.missed
        stats.reconnects = carried.reconnects + child.reconnects
        stats.gap_seconds = carried.gap_seconds + child.gap_seconds
        stats.lost = child.lost
        stats.ended_early = carried.ended_early or child.ended_early
        stats.events = carried.events + child.events
        stats.warnings = carried.warnings + child.warnings


def _error(class_name: str, text: str) -> VisionRTError:
    """The worker's error as the same class of the visionrt hierarchy."""
    cls = getattr(errors, class_name, None)
    if not (isinstance(cls, type) and issubclass(cls, VisionRTError)):
        cls = SourceError
    return cls(text)
