"""The graph's source side: readers that decode the sources' frames into the decoded inbox, count
them in, and report their reconnects — a thread per live source, and files shared by a few
threads; a service's sources are added and retired while it runs."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from visionrt.errors import VisionRTError
from visionrt.frames import Pinning
from visionrt.pipeline.flow import POLL, Flow, Item
from visionrt.pipeline.inbox import Inboxes
from visionrt.sources import Source
from visionrt.sources.registry import usable_cores
from visionrt.telemetry import Telemetry

FRESHER = "queue full, newer frame kept"
# A source's counts that are also telemetry events (summary `events`, visionrt_events_total).
SOURCE_EVENTS = (("reconnects", "source: reconnect"), ("restarts", "source: worker restart"))
SOURCE_FAILED = "source: failed"  # a service's source that raised: it ended, the others run on
# Frames a shared reader decodes from one file before it turns to the next (fewer once the
# file's inbox is full): a decoder's state stays in cache over a burst. PyAV alone, 32 files on
# 2 threads: bursts of 8 decoded 18 % faster than one frame a file in turn (docs/benchmarks.md).
BURST = 8


class Readers:
    """`sources[i]` is read into `decoded` under the name `labels[i]` (`named[i]`: the user's
    name, which replaces its path in its frames). `guard` runs a thread's work and reports what
    it raises; `i420` asks each source for YUV frames (Source.want_i420), `pinning` to register
    the memory they arrive in for the device (Source.pin_memory). The last source to
    end closes `decoded`; a service's (`service`) hold it open until `release()`.

    A live source (a camera, a stream, a paced file) has a thread of its own: it is read as its
    frames come. A run's files, read as fast as they decode, are shared by `shared` threads
    (never more than the files), each taking the next file in turn for a burst of frames: 32
    files on 2 cores in 32 threads took twice one file's CPU a frame (the GIL handed around)
    and ran at 0.62 of its frame rate (docs/benchmarks.md). `shared` 0 is one per usable core
    where the host letterboxes (its work runs without the GIL, and 2 readers beat 1 by half
    at 32 files on 2 cores), half of them where the frames go to a device whole (`i420`: the
    host's work then mostly holds the GIL, and one reader ran 32 files on 2 cores at one
    file's rate, two at 0.88 of it). A service's sources come and go: each has its own."""

    def __init__(
        self,
        sources: Sequence[Source],
        labels: Sequence[str],
        named: Sequence[bool],
        decoded: Inboxes[Item],
        telemetry: Telemetry,
        flow: Flow,
        guard: Callable[..., None],
        service: bool = False,
        i420: bool = False,
        shared: int = 0,
        pinning: Pinning | None = None,
    ) -> None:
        # Own lists: a service appends to them (`add`) while the stages index them.
        self.sources, self.labels, self.named = list(sources), list(labels), list(named)
        self.live = [s.live for s in sources]
        self.decoded, self.telemetry, self.flow, self._guard = decoded, telemetry, flow, guard
        self.service, self.i420, self.pinning = service, i420, pinning
        # A service's source that fails ends alone (its error in `failures`); a run's fails it.
        # (`service` itself turns False when the service is stopped.)
        self.serving = service
        self.failures: dict[int, str] = {}
        self.shared = shared
        self.threads: list[threading.Thread] = []
        self.started = threading.Event()  # every reader `start` made is running (or ran)
        self._left = 0  # sources not ended (and a service's hold)
        self._lock = threading.Lock()
        self._turns: deque[int] = deque()  # the shared files waiting for a reader, in turn
        self._readings: dict[int, Iterator[bool]] = {}  # each shared file's `_reading`

    def start(self) -> None:
        with self._lock:
            files = [] if self.service else [i for i, live in enumerate(self.live) if not live]
            readers = min(len(files), self.shared or self._default_readers())
            if readers == len(files):  # a thread for each file anyway: its own
                files = []
            own = sorted(set(range(len(self.sources))) - set(files))
            self.threads = [self._thread(i, self.sources[i]) for i in own]
            if files:
                self._turns.extend(files)
                self._readings = {i: self._reading(i, self.sources[i]) for i in files}
                self.threads += [
                    threading.Thread(
                        target=self._guard, args=(self.read_shared,), name=f"files-{k}", daemon=True
                    )
                    for k in range(readers)
                ]
            # Those of the sources there now: a source a service adds from here on (`add`, on
            # another thread) starts its own reader, and must not be started here again.
            starting = list(self.threads)
            # A service holds the inbox open for sources still to come, until it is released.
            self._left = len(self.sources) + (1 if self.service else 0)
            if self._left == 0:
                self.decoded.close()
        for thread in starting:
            thread.start()
        self.started.set()

    def _default_readers(self) -> int:
        cores = usable_cores()
        return max(1, cores // 2) if self.i420 else cores

    def accepting(self) -> bool:
        """A source can still be added (a service that runs and was not stopped)."""
        return self.service and self._left > 0 and not self.flow.stopping.is_set()

    def add(self, source: Source, label: str, named: bool) -> None:
        """Start reading `source`, opened with the next source id (`len(sources)`)."""
        if source.source_id != len(self.sources):
            raise ValueError(f"source id {source.source_id}: expected {len(self.sources)}")
        with self._lock:
            if not self.accepting():
                raise RuntimeError("the service is stopping: no source can be added")
            self._left += 1
            self.labels.append(label)
            self.named.append(named)
            self.live.append(source.live)
            self.sources.append(source)
            thread = self._thread(source.source_id, source)
            self.threads.append(thread)
        thread.start()

    def retire(self, source_id: int) -> None:
        """Stop reading a source: the frames it read are still finished and delivered; its
        reader closes it once out of its read."""
        self.sources[source_id].stop()

    def release(self) -> None:
        """The service was stopped: once its readers end, the stages after them end too."""
        with self._lock:
            if self.service:
                self.service = False
                self._done()

    def _thread(self, source_id: int, source: Source) -> threading.Thread:
        # A daemon: a reader stuck in I/O (a stalled stream) must not keep the process alive.
        return threading.Thread(
            target=self._guard,
            args=(self.read, source_id, source),
            name=f"source-{source_id}",
            daemon=True,
        )

    def read(self, source_id: int, source: Source) -> None:
        """A source's own reader: all of its frames."""
        for _ in self._reading(source_id, source):
            pass

    def read_shared(self) -> None:
        """A shared reader: the next file in turn whose inbox has room, for up to BURST frames
        or until its inbox is full, then back in line; it ends when no file waits (each file is
        read by one thread at a time: its decoder is not shared). A file whose frames wait
        (its camera's depth is slower than the others' detector) keeps its place in line
        without holding the reader: waiting on its full inbox held up every other file the
        reader had."""
        while True:
            with self._lock:
                if not self._turns:
                    return
                source_id = self._turn()
                waiting = list(self._turns) if source_id is None else []
            if source_id is None:  # every file in line has a full inbox
                self.decoded.wait_for_room(waiting, POLL)
                continue
            reading, ended = self._readings[source_id], False
            for _ in range(BURST):
                if not next(reading, False):
                    ended = True
                    break
                if self.decoded.full(source_id):
                    break
            if not ended:
                with self._lock:
                    self._turns.append(source_id)

    def _turn(self) -> int | None:
        """The first file in line whose inbox has room (out of the line); None when every one
        is full. Aborting, the first: its next put returns at once and its reading ends."""
        for place, source_id in enumerate(self._turns):
            if self.flow.aborting.is_set() or not self.decoded.full(source_id):
                del self._turns[place]
                return source_id
        return None

    def _reading(self, source_id: int, source: Source) -> Iterator[bool]:
        """Read `source` into the decoded inbox, a frame per step (True each); its end (or a
        failure, which a run raises) calls `_done`."""
        label = self.labels[source_id]
        seen = {key: 0 for key, _ in SOURCE_EVENTS}
        try:
            if self.i420:
                source.want_i420()
            if self.pinning is not None:
                source.pin_memory(self.pinning)
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
                yield True
        except (VisionRTError, OSError) as err:
            if not self.serving:
                raise
            self.failures[source_id] = str(err)
            self.telemetry.count(SOURCE_FAILED, label)
        finally:
            self._count_events(source, label, seen)
            # A service's source is let go of as its reader ends, removed or ended on its own
            # (its decoder threads, a worker process): a service runs for weeks and keeps each
            # source it ever had for its summary. A run's are closed by the Pipeline.
            if self.serving:
                source.close()
            with self._lock:
                self._done()

    def _done(self) -> None:
        """A source (or a service's hold) ended; the last one closes the decoded inbox."""
        self._left -= 1
        if self._left == 0:
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

    def _evicted(self, item: Any) -> None:
        self.telemetry.drop("decode", FRESHER, self.labels[item.frame.source_id])
