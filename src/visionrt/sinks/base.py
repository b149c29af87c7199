"""The sink contract: results are written to a `.partial` file that becomes final on close."""

from __future__ import annotations

import tempfile
from abc import ABC, abstractmethod
from pathlib import Path

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
        raise SinkError(f"cannot write {what} {path}: it is a file, not a folder")
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
    """The one line for `path` that cannot be written: a file standing where one of its folders
    must be is named (mkdir's "File exists" says nothing useful), else the system's reason."""
    why = err.strerror or str(err)
    if isinstance(err, FileExistsError | NotADirectoryError):
        blocker = next((p for p in Path(path).parents if p.is_file()), None)
        why = f"{blocker} is a file, not a folder" if blocker else why
    return SinkError(f"cannot write {what} {path}: {why}")


def finalize(partial: Path, final: Path) -> Path:
    """Rename a sink's finished `.partial` file to its final name, or raise a SinkError."""
    try:
        partial.replace(final)
    except OSError as err:
        raise SinkError(f"cannot finalize {final}: {err.strerror or err}") from err
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
