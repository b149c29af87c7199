"""The parent's handles on a `ProcessSource`'s worker (worker.py): `WorkerProcess`, its process
and pipes, and `Ring`, the shared-memory segment its frames arrive in, lent out a slot per frame
and given back to the worker a few slots at a time."""

from __future__ import annotations

import contextlib
import os
import secrets
import selectors
import signal
import threading
from multiprocessing.context import SpawnContext
from multiprocessing.shared_memory import SharedMemory
from typing import Any

import numpy as np
import numpy.typing as npt

from visionrt.errors import SourceError
from visionrt.frames import Pinning
from visionrt.sources.base import SourceOptions
from visionrt.sources.worker import Message, slot_bytes, work
from visionrt.spawning import start_shielded

# Released slots go back to the worker this many to a message, or at once where it may be short
# of slots (Ring._due).
FREE_BATCH = 4
FREE_LOW = 2
STOP_SECONDS = 1.0  # a stopped worker gets this long to end on its own, then SIGTERM, SIGKILL


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
    """The parent's side of one shared-memory segment of `slots` frames of `shape`; registered
    with `pinning` (`pin`) where a device reads its frames from where they are."""

    def __init__(
        self,
        generation: int,
        shape: tuple[int, ...],
        slots: int,
        worker: WorkerProcess,
        pinning: Pinning | None = None,
    ):
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
        self._pinning: Pinning | None = None
        self.pinned = False  # registered with `_pinning` (read by each lease: `in_pinned_memory`)
        if pinning is not None:
            self.pin(pinning)

    def pin(self, pinning: Pinning) -> None:
        """Register the segment with `pinning`, once; where that fails its frames are staged
        (copied) on their way to the device, as any frame's."""
        with self._lock:
            if self._pinning is not None or self._retired:
                return
            self._pinning = pinning
            try:
                self.pinned = pinning.register(self._address, self.slot_bytes * self.slots)
            except Exception:  # an unusable device here: staging still works
                self.pinned = False

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
        # runs only once no array over the segment is left, so no device copy reads it either.
        if self.pinned and self._pinning is not None:
            self.pinned = False
            with contextlib.suppress(Exception):
                self._pinning.unregister(self._address)
        self._memory.close()


class _Lease:
    """An array interface over one slot; the slot is released when this is collected, which
    happens after the last array over it is gone (they all hold it as their base)."""

    __slots__ = ("__array_interface__", "ring", "slot")

    def __init__(self, ring: Ring, slot: int) -> None:
        self.ring, self.slot = ring, slot
        self.__array_interface__ = ring.interface(slot)

    @property
    def pinned(self) -> bool:
        return self.ring.pinned

    def __del__(self) -> None:
        self.ring.release(self.slot)


def _address(memory: SharedMemory) -> int:
    assert memory.buf is not None  # only closing the memory clears it; the ring just opened it
    view = np.frombuffer(memory.buf, np.uint8)  # gone on return: the export ends with it
    return int(view.ctypes.data)
