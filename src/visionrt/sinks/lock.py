"""One run per output folder: a lock file naming its owner, held while the run writes there and
released when the process ends however it ends (an advisory `flock`: a lock file a crash left
behind locks nothing)."""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import os
from pathlib import Path
from typing import IO

from visionrt.errors import SinkError
from visionrt.sinks.base import unwritable

LOCK_NAME = ".visionrt.lock"


class OutputLock:
    """`acquire()` takes `folder` for this process or raises SinkError naming the run that
    holds it; `release()` lets go (also done by the OS when the process exits)."""

    def __init__(self, folder: Path, command: str = "visionrt run") -> None:
        self.folder, self.command = Path(folder), command
        self._handle: IO[str] | None = None
        self._made_folder = False

    @property
    def path(self) -> Path:
        return self.folder / LOCK_NAME

    def acquire(self) -> OutputLock:
        self._made_folder = not self.folder.exists()
        for _ in range(10):  # the file can be replaced between open and lock: take it again
            handle = self._open()
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.seek(0)
                owner = handle.read().strip() or "another process"
                handle.close()
                raise SinkError(
                    f"output folder {self.folder} is in use by {owner}: wait for it to end or"
                    " give another --out (two runs would overwrite each other's files)"
                ) from None
            if self._same_file(handle):
                break
            handle.close()
        started = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
        handle.seek(0)
        handle.truncate()
        handle.write(f"{self.command} (pid {os.getpid()}, since {started})\n")
        handle.flush()
        self._handle = handle
        return self

    def _open(self) -> IO[str]:
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            return self.path.open("a+", encoding="utf-8")
        except OSError as err:
            raise unwritable(self.path, err) from err

    def _same_file(self, handle: IO[str]) -> bool:
        """Whether the locked file is still the one at `path` (a run that let go removed it)."""
        try:
            return os.stat(self.path).st_ino == os.fstat(handle.fileno()).st_ino
        except OSError:
            return False

    def release(self) -> None:
        """Let go: the lock file is removed while still held (a run that opened it meanwhile
        sees it replaced and takes the new one), and so is the folder if this run made it and
        left nothing in it (a run refused at start-up leaves no trace)."""
        handle, self._handle = self._handle, None
        if handle is None:
            return
        with contextlib.suppress(OSError):
            self.path.unlink()
        with contextlib.suppress(OSError):
            fcntl.flock(handle, fcntl.LOCK_UN)
        handle.close()
        if self._made_folder:
            with contextlib.suppress(OSError):
                self.folder.rmdir()  # only when empty

    def __enter__(self) -> OutputLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()
