"""The sink contract: results are written to a `.partial` file that becomes final on close."""

from __future__ import annotations

import contextlib
import tempfile
from abc import ABC, abstractmethod
from pathlib import Path
from typing import TextIO

from visionrt.errors import SinkError
from visionrt.types import FrameResult


def partial_path(final: Path) -> Path:
    """Where a sink writes until it is finalized; the suffix is kept so muxers infer the format."""
    return final.with_name(f"{final.stem}.partial{final.suffix}")


def check_writable(path: Path, what: str = "output", folder: bool = False) -> None:
    """Fail now, before any work, with a one-line SinkError when `path` could not be written at
    the end: a read-only place, a folder where a file goes (or a file where a folder goes,
    `folder`), a parent that cannot be made. `what` names it in the message (an output, a
    flag such as "--json"). Makes the missing folders and leaves no file (an existing one is
    opened to append, not changed)."""
    path = Path(path)
    where = path if folder else path.parent
    if not folder and path.is_dir():
        raise SinkError(f"cannot write {what} {path}: it is a folder")
    if folder and path.exists() and not path.is_dir():
        raise SinkError(f"cannot write {what} {path}: it is {_not_a_folder(path)}")
    try:
        where.mkdir(parents=True, exist_ok=True)
        if not folder and path.exists():
            with path.open("ab"):
                pass
        else:
            with tempfile.NamedTemporaryFile(dir=where, prefix=".visionrt-probe-"):
                pass
    except OSError as err:
        raise unwritable(path, err, what) from err


def unwritable(path: Path, err: OSError, what: str = "output") -> SinkError:
    """The one line for `path` that cannot be written: what stands where one of its folders
    must be (a file, or a device such as /dev/null) is named (mkdir's "File exists" says
    nothing useful), else the system's reason."""
    why = reason(err)
    if isinstance(err, FileExistsError | NotADirectoryError):
        parents = Path(path).parents
        blocker = next((p for p in parents if p.exists() and not p.is_dir()), None)
        why = f"{blocker} is {_not_a_folder(blocker)}" if blocker else why
    return SinkError(f"cannot write {what} {path}: {why}")


def _not_a_folder(path: Path) -> str:
    return "a file, not a folder" if path.is_file() else "not a folder"


def reason(err: BaseException) -> str:
    """Why an OS call failed, without the path that an OSError's (or PyAV's) text repeats after
    it: the system's reason ("No space left on device") where there is one, else the text."""
    return getattr(err, "strerror", None) or str(err)


def write_output(path: Path, data: str | bytes, what: str = "output") -> Path:
    """Write a command's output file in one go, or raise the one-line SinkError naming it: a
    full disk shows only as the bytes are written, however writable the place was found at the
    start (`check_writable`). A file is written whole or not at all (as its `.partial`, then
    renamed); a device or pipe standing at `path` (/dev/stdout) is written where it is."""
    path = Path(path)
    target = path if path.exists() and not path.is_file() else partial_path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(data, bytes):
            target.write_bytes(data)
        else:
            target.write_text(data, encoding="utf-8")
        if target != path:
            target.replace(path)
    except OSError as err:
        if target != path:
            with contextlib.suppress(OSError):
                target.unlink(missing_ok=True)
        raise unwritable(path, err, what) from err
    return path


def finalize(partial: Path, final: Path) -> Path:
    """Rename a sink's finished `.partial` file to its final name, or raise a SinkError."""
    try:
        partial.replace(final)
    except OSError as err:
        raise SinkError(f"cannot finalize {final}: {reason(err)}") from err
    return final


class Sink(ABC):
    """Writes results; `close(complete=True)` finalizes and returns the paths written."""

    @abstractmethod
    def write(self, result: FrameResult) -> None:
        """Write one result; an output that cannot be written raises a SinkError naming it."""

    @abstractmethod
    def close(self, complete: bool = True) -> list[Path]:
        """Finalize, all or nothing, and return the files left (none when nothing was written).

        With `complete=False` (a crash) files keep their `.partial` name. With `complete=True`
        a file is renamed only once everything reached it; when the last flush fails it keeps
        its `.partial` name and a SinkError names the file and the OS error. Twice is fine."""


class FileSink(Sink):
    """A text file written as results come: created (as `.partial`) at the first `append`, its
    `header()` first; flushed on each append, so what a killed process wrote is in the partial
    file; `footer()` written at close, complete or not; renamed to `path` when complete. A run
    that wrote nothing leaves no file. `takes(result)` says whether a result is the file's: with
    `source_id` only that source's; a `one_source` file (`what` names it in errors) refuses a
    second source unless `source_id` picks one."""

    what = "file"

    def __init__(
        self,
        path: str | Path,
        source_id: int | None = None,
        one_source: bool = True,
        newline: str | None = None,
    ) -> None:
        self.path = Path(path)
        self.source_id, self.one_source = source_id, one_source
        check_writable(self.path)
        self._partial = partial_path(self.path)
        self._newline = newline  # "" for the csv module, which writes its own line ends
        self._file: TextIO | None = None
        self._closed = False
        self._seen: int | None = None

    def takes(self, result: FrameResult) -> bool:
        if self._closed:
            raise SinkError(f"{self.path}: write after close")
        source = result.frame.source_id
        if self.source_id is not None and source != self.source_id:
            return False
        if self.one_source:
            if self._seen is None:
                self._seen = source
            elif source != self._seen:
                raise SinkError(
                    f"{self.path}: a {self.what} holds one source, got source {source} after"
                    f" source {self._seen}; give the sink a source_id"
                )
        return True

    def header(self) -> str:
        return ""

    def footer(self) -> str:
        return ""

    def append(self, text: str) -> None:
        try:
            if self._file is None:
                self._file = self._partial.open("w", encoding="utf-8", newline=self._newline)
                self._file.write(self.header())
            if text:
                self._file.write(text)
                # ~3 µs (one write call): to the OS, which keeps it through a SIGKILL; fsync,
                # for power loss, would cost milliseconds.
                self._file.flush()
        except OSError as err:
            raise SinkError(f"cannot write {self._partial}: {err.strerror or err}") from err

    def close(self, complete: bool = True) -> list[Path]:
        if self._closed:
            return []
        self._closed = True
        if self._file is None:
            return []
        file, self._file = self._file, None
        try:
            try:
                file.write(self.footer())
            finally:
                file.close()  # closes the descriptor even when its last flush fails
        except OSError as err:  # a full disk at the last flush: the file stays partial
            raise SinkError(f"cannot finalize {self.path}: {err.strerror or err}") from err
        if not complete:
            return [self._partial]
        return [finalize(self._partial, self.path)]
