"""Both ends of a `ProcessSource`'s worker: the worker process (open a source, copy its frames
into free slots of the shared-memory ring the parent offers, say which slot holds what) and the
parent's handles on it (`WorkerProcess`, `Ring`)."""

from __future__ import annotations

import contextlib
import os
import secrets
import selectors
import signal
import sys
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable
from dataclasses import replace
from math import prod
from multiprocessing.connection import Connection
from multiprocessing.context import SpawnContext
from multiprocessing.shared_memory import SharedMemory
from typing import Any

import numpy as np
import numpy.typing as npt

from visionrt.errors import SourceError, VisionRTError
from visionrt.sources.base import Source, SourceOptions, SourceStats
from visionrt.sources.kinds import open_here
from visionrt.spawning import ignore_interrupts, start_shielded

SLOT_ALIGN = 64  # bytes: each slot starts on a cache line
# Released slots go back to the worker this many to a message, or at once where it may be short
# of slots (Ring._due).
FREE_BATCH = 4
FREE_LOW = 2
FRAMES_BATCH = 4  # a file's frames announced to a message (_pump)
STOP_SECONDS = 1.0  # a stopped worker gets this long to end on its own, then SIGTERM, SIGKILL

Message = tuple[Any, ...]


def slot_bytes(shape: tuple[int, ...]) -> int:
    """Bytes of one slot for a uint8 frame of `shape`, rounded up to SLOT_ALIGN."""
    return -(-prod(shape) // SLOT_ALIGN) * SLOT_ALIGN


class ParentGone(Exception):
    """The parent closed its end of the pipe."""


def work(
    spec: str,
    source_id: int,
    options: SourceOptions,
    skip: int,
    commands: Connection,
    replies: Connection,
) -> None:
    """The worker process: open the source, say "ready" (or the error), then send each frame
    with an index from `skip` on through a free slot, until the end or the parent's "stop".

    Replies: ready, error, shape (asks for a ring), attached, frame, frames (a file's, several
    at once), stats, end. Commands: ring (offered, also unasked when the parent grows it), free
    (slots back), i420 (frames as
    YUV planes from now on: Source.want_i420), stop."""
    ignore_interrupts()  # Ctrl+C goes to the whole process group; the parent decides
    reply = _replier(replies)
    try:
        try:
            source = open_here(spec, source_id, options)
        except Exception as err:
            reply(("error", *_describe(err, spec), SourceStats()))
            return
        info = {
            "name": source.name,
            "live": source.live,
            "paced": getattr(source, "paced", False),
            "fps": source.fps,
            "frame_count": source.frame_count,
            "frame_count_estimated": source.frame_count_estimated,
            "damage_hint": source.damage_hint,
            "size": getattr(source, "size", None),
            "started": time.monotonic(),
        }
        reply(("ready", info))
        slots = _Slots(commands, source, reply)
        try:
            _pump(source, slots, reply, skip)
        except Exception as err:
            reply(("error", *_describe(err, spec), _snapshot(source.stats, slots)))
        else:
            reply(("end", _snapshot(source.stats, slots)))
        finally:
            slots.unmap()
            source.close()
    except ParentGone:
        pass


def _replier(replies: Connection) -> Callable[[Message], None]:
    def reply(message: Message) -> None:
        try:
            replies.send(message)
        except (BrokenPipeError, ConnectionResetError) as err:
            raise ParentGone from err

    return reply


def _pump(source: Source, slots: _Slots, reply: Callable[[Message], None], skip: int) -> None:
    reported: tuple[Any, ...] = ()
    # A file's frames are announced FRAMES_BATCH to a message: the parent's reader wakes, waits
    # and unpickles once for them all. Live ones go at once (latency), and what is held goes
    # before anything that must follow it (a wait for a slot, a ring asked for or taken, stats,
    # the end or an error).
    held: list[Message] = []

    def announce() -> None:
        if held:
            reply(held[0] if len(held) == 1 else ("frames", tuple(held)))
            held.clear()

    try:
        for frame in source.frames():
            if frame.index < skip:  # a restarted file worker: these were delivered already
                continue
            if held and not slots.can_place(frame.pixels.shape):
                announce()
            placed = slots.put(frame.pixels, wait=not source.live)
            if placed is None:
                if slots.stopped:
                    return
                slots.missed += 1
            else:
                generation, slot = placed
                captured = frame.captured_at - time.perf_counter() + time.monotonic()
                held.append(("frame", generation, slot, frame.index, frame.timestamp, captured,
                             frame.source_name, frame.item))  # fmt: skip
                if source.live or len(held) >= FRAMES_BATCH:
                    announce()
            counts = _counts(source.stats, slots)
            if counts != reported:
                reported = counts
                announce()
                reply(("stats", _snapshot(source.stats, slots)))
    finally:
        announce()


def _counts(stats: SourceStats, slots: _Slots) -> tuple[Any, ...]:
    """What the parent is told again (a "stats" reply) whenever it changes."""
    return (stats.corrupt, stats.lost, stats.reconnects, stats.gap_seconds, stats.ended_early,
            len(stats.events), len(stats.warnings), slots.missed)  # fmt: skip


def _snapshot(stats: SourceStats, slots: _Slots) -> SourceStats:
    return replace(
        stats, missed=slots.missed, events=list(stats.events), warnings=list(stats.warnings)
    )


def _describe(err: Exception, spec: str) -> tuple[str, str]:
    if isinstance(err, VisionRTError):
        return type(err).__name__, str(err)
    traceback.print_exc()  # a bug, not a bad input: the worker's stderr gets the details
    return "SourceError", f"'{spec}': worker process failed: {type(err).__name__}: {err}"


class _Slots:
    """The worker's side of the ring. A thread reads the parent's commands (free slots, rings
    offered, stop) so that the decoding thread can wait on them."""

    def __init__(self, commands: Connection, source: Source, reply: Callable[[Message], None]):
        self._commands, self._source, self._reply = commands, source, reply
        self._changed = threading.Condition()
        self._free: deque[int] = deque()
        self._offer: Message | None = None
        self._memory: SharedMemory | None = None
        self._shape: tuple[int, ...] = ()
        self._asked: tuple[int, ...] = ()
        self._generation = -1
        self.missed = 0  # live: frames that found no free slot
        self.stopped = False
        threading.Thread(target=self._read, name="commands", daemon=True).start()

    def _read(self) -> None:
        while True:
            try:
                message: Message = self._commands.recv()
            except (EOFError, OSError):
                message = ("stop",)  # the parent is gone
            with self._changed:
                if message[0] == "free" and message[1] == self._generation:
                    self._free.extend(message[2])
                elif message[0] == "ring":
                    self._offer = message[1:]
                elif message[0] == "stop":
                    self.stopped = True
                elif message[0] == "i420":
                    self._source.want_i420()
                self._changed.notify_all()
            if message[0] == "stop":
                self._source.stop()
                return

    def can_place(self, shape: tuple[int, ...]) -> bool:
        """Whether `put` would place a frame of `shape` at once, in the ring it has."""
        with self._changed:
            return self._offer is None and self._shape == shape and bool(self._free)

    def put(self, image: npt.NDArray[np.uint8], wait: bool) -> tuple[int, int] | None:
        """Copy `image` into a free slot of the newest ring offered (asking for a ring of its
        shape first) and return (generation, slot). With `wait`, waits for a slot to come back;
        without, None when none is free. None when stopped."""
        shape = image.shape
        while True:
            with self._changed:
                offer, self._offer = self._offer, None
                if offer is None and not self.stopped:
                    if self._shape == shape and self._free:
                        slot = self._free.popleft()
                        break
                    if self._shape == shape and not wait:
                        return None
                    if self._shape == shape or self._asked == shape:
                        self._changed.wait()
                        continue
            if self.stopped:
                return None
            if offer is not None:
                self._adopt(offer)
            else:
                self._asked = shape
                self._reply(("shape", shape))
        assert self._memory is not None
        view = np.ndarray(shape, np.uint8, self._memory.buf, slot * slot_bytes(shape))
        np.copyto(view, image)  # `view` goes on return: no array is left over the segment
        return self._generation, slot

    def _adopt(self, offer: Message) -> None:
        generation, name, shape, slots = offer
        self.unmap()
        self._memory = _attach(name)
        with self._changed:
            self._generation, self._shape = generation, tuple(shape)
            self._free = deque(range(slots))
        self._reply(("attached", generation))

    def unmap(self) -> None:
        if self._memory is not None:
            self._memory.close()
            self._memory = None


def _attach(name: str) -> SharedMemory:
    if sys.version_info >= (3, 13):
        return SharedMemory(name, track=False)  # type: ignore[call-arg]  # the parent unlinks it
    # Before 3.13 attaching registers the segment with the resource tracker; under spawn that
    # is the parent's own tracker, so the parent's unlink() still unregisters it once.
    return SharedMemory(name)


# -- the parent's side ---------------------------------------------------------------------------


class WorkerProcess:
    """The parent's side of one worker process: its two pipes, and what it said at open."""

    def __init__(
        self, context: SpawnContext, spec: str, source_id: int, options: SourceOptions, skip: int
    ) -> None:
        commands_in, self._commands = context.Pipe(duplex=False)
        self._replies, replies_out = context.Pipe(duplex=False)
        self.process = context.Process(
            target=work,
            args=(spec, source_id, options, skip, commands_in, replies_out),
            name=f"visionrt-source-{source_id}",
            daemon=True,
        )
        start_shielded(self.process).join()
        commands_in.close()  # the worker's ends: their EOF must come when the worker dies
        replies_out.close()
        self.info: dict[str, Any] = {}
        # Registered once: `multiprocessing.connection.wait` builds a selector on every call,
        # and the reader calls `receive` for every frame.
        self._ready = selectors.DefaultSelector()
        self._ready.register(self._replies, selectors.EVENT_READ, "replies")
        self._ready.register(self.process.sentinel, selectors.EVENT_READ, "sentinel")
        # Re-entrant: a lease collected in this thread while it sends must not deadlock. Each
        # message is one write of less than PIPE_BUF bytes, so a nested send cannot split one.
        self._lock = threading.RLock()
        self._closed = False

    def receive(self, timeout: float) -> Message | None:
        """The next message; None after `timeout` seconds; ("died", why) when the worker is gone."""
        try:
            ready = [key.data for key, _ in self._ready.select(timeout)]
            if not ready:
                return None
            if "replies" in ready:  # what it said before it died comes first
                message: Message = self._replies.recv()
                return message
        except (EOFError, OSError, ValueError):
            if self._closed:  # closed by another thread: not a death
                return ("died", "was stopped")
        return ("died", self._death())

    def _death(self) -> str:
        self.process.join(STOP_SECONDS)
        code = self.process.exitcode
        if code is None:
            return "closed its pipe"
        if code < 0:
            try:
                return f"was killed by {signal.Signals(-code).name}"
            except ValueError:
                return f"was killed by signal {-code}"
        return f"exited with code {code}"

    def send(self, message: Message) -> None:
        with self._lock:
            if self._closed:
                return
            # A worker that is gone is reported by receive().
            with contextlib.suppress(OSError, ValueError):
                self._commands.send(message)

    def close(self) -> None:
        """Stop the worker: asked first, then SIGTERM, then SIGKILL."""
        self.send(("stop",))
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._commands.close()
        process = self.process
        process.join(STOP_SECONDS)
        if process.exitcode is None:
            process.terminate()
            process.join(STOP_SECONDS)
        if process.exitcode is None:
            process.kill()
            process.join()
        self._ready.close()
        self._replies.close()
        process.close()


class Ring:
    """The parent's side of one shared-memory segment of `slots` frames of `shape`."""

    def __init__(self, generation: int, shape: tuple[int, ...], slots: int, worker: WorkerProcess):
        self.generation, self.shape, self.slots = generation, shape, slots
        self.slot_bytes = slot_bytes(shape)
        name = f"vrt{os.getpid()}_{secrets.token_hex(4)}"  # short: macOS allows 31 characters
        size = self.slot_bytes * slots
        self._memory = SharedMemory(name, create=True, size=size)
        self.name = self._memory.name
        if hasattr(os, "posix_fallocate"):
            # Reserve the pages now: a full /dev/shm otherwise shows as SIGBUS in the worker
            # at its first write, not as an error here. (`_fd`: SharedMemory has no public one.)
            try:
                os.posix_fallocate(self._memory._fd, 0, size)  # type: ignore[attr-defined]
            except OSError as err:
                self._memory.close()
                self._memory.unlink()
                raise SourceError(
                    f"cannot reserve a {size / 2**20:.1f} MB shared-memory ring ({slots} frames"
                    f" of {shape}) in /dev/shm: {err.strerror} (a container's /dev/shm is often"
                    " 64 MB: raise it with --shm-size)"
                ) from err
        self._address = _address(self._memory)
        self._worker: WorkerProcess | None = worker
        self.leased: set[int] = set()
        self._pending: list[int] = []  # slots released and not yet given back (`release`)
        self._lock = threading.RLock()
        self._linked = True
        self._retired = False

    def lease(self, slot: int) -> npt.NDArray[np.uint8]:
        with self._lock:
            self.leased.add(slot)
            due = self._due()
        self._give_back(due)
        return np.asarray(_Lease(self, slot))

    def interface(self, slot: int) -> dict[str, Any]:
        data = (self._address + slot * self.slot_bytes, False)
        return {"shape": self.shape, "typestr": "|u1", "data": data, "version": 3}

    def release(self, slot: int) -> None:
        """The slot's last user is done: give it back to the worker (`_due`), or unmap a
        retired ring."""
        with self._lock:
            self.leased.discard(slot)
            self._pending.append(slot)
            if self._worker is None and self._retired and not self.leased:
                self._unmap()
            due = self._due()
        self._give_back(due)

    def flush(self) -> None:
        """Give back every slot released so far (the reader waits for the worker: it may be
        waiting for one of them)."""
        with self._lock:
            due, self._pending = self._pending, []
        self._give_back(due)

    def _due(self) -> list[int]:
        """The released slots to give back now (taken from those pending), under the lock.
        One message per slot cost the reader's process a pipe write each frame, so they go
        FREE_BATCH at a time; at once where the worker may have only FREE_LOW slots or fewer:
        it has at most those neither leased nor pending (frames still in the pipe are among
        neither, and `lease` looks again as each arrives), so a worker waiting for a slot is
        never kept waiting by one held back."""
        if not self._pending:
            return []
        room = self.slots - len(self.leased) - len(self._pending)
        if len(self._pending) < FREE_BATCH and room > FREE_LOW:
            return []
        due, self._pending = self._pending, []
        return due

    def _give_back(self, slots: list[int]) -> None:
        # Outside the ring's lock: a lease collected while a thread sends (holding the
        # worker's lock) must not wait for a thread that holds this lock and waits for that.
        # Slots sent to a ring retired meanwhile are ignored by the worker.
        worker = self._worker
        if slots and worker is not None:
            worker.send(("free", self.generation, tuple(slots)))

    def unlink(self) -> None:
        with self._lock:
            if self._linked:
                self._linked = False
                with contextlib.suppress(FileNotFoundError):
                    self._memory.unlink()

    def retire(self) -> None:
        """No more frames go through this ring; unmapped when the last lease goes."""
        with self._lock:
            self._worker = None
            self._retired = True
            self.unlink()
            if not self.leased:
                self._unmap()

    def _unmap(self) -> None:
        # Leases hold raw addresses, not buffer exports, so this never raises BufferError; it
        # runs only once no array over the segment is left.
        self._memory.close()


class _Lease:
    """An array interface over one slot; the slot is released when this is collected, which
    happens after the last array over it is gone (they all hold it as their base)."""

    __slots__ = ("__array_interface__", "ring", "slot")

    def __init__(self, ring: Ring, slot: int) -> None:
        self.ring, self.slot = ring, slot
        self.__array_interface__ = ring.interface(slot)

    def __del__(self) -> None:
        self.ring.release(self.slot)


def _address(memory: SharedMemory) -> int:
    assert memory.buf is not None  # only closing the memory clears it; the ring just opened it
    view = np.frombuffer(memory.buf, np.uint8)  # gone on return: the export ends with it
    return int(view.ctypes.data)
