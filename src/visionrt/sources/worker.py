"""A `ProcessSource`'s worker process: open a source, copy its frames into free slots of the
shared-memory ring the parent offers, say which slot holds what. The parent's handles on it
are in ring.py (`WorkerProcess`, `Ring`)."""

from __future__ import annotations

import sys
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable
from dataclasses import replace
from math import prod
from multiprocessing.connection import Connection
from multiprocessing.shared_memory import SharedMemory
from typing import Any

import numpy as np
import numpy.typing as npt

from visionrt.errors import VisionRTError
from visionrt.sources.base import Source, SourceOptions, SourceStats
from visionrt.sources.kinds import open_here
from visionrt.spawning import ignore_interrupts

SLOT_ALIGN = 64  # bytes: each slot starts on a cache line
FRAMES_BATCH = 4  # a file's frames announced to a message (_pump)

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
