"""JSON Lines: one line per frame with its detections in source pixels."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TextIO

from visionrt.errors import SinkError
from visionrt.sinks.base import Sink, check_writable, finalize, partial_path
from visionrt.types import FrameResult


class JsonlSink(Sink):
    """Lines are flushed per frame, so a killed process leaves every line written so far (in the
    `.partial` file); the file is created at the first line, so a run that fails before its
    first frame leaves nothing behind."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        check_writable(self.path)
        self._partial = partial_path(self.path)
        self._file: TextIO | None = None
        self._closed = False

    def write(self, result: FrameResult) -> None:
        if self._closed:
            raise SinkError(f"{self.path}: write after close")
        line = json.dumps(result.to_json(), separators=(",", ":")) + "\n"
        try:
            if self._file is None:
                self._file = self._partial.open("w", encoding="utf-8")
            self._file.write(line)
            # ~3 µs per frame (one write call): to the OS, which keeps it through a SIGKILL;
            # fsync, for power loss, would cost milliseconds.
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
            file.close()  # closes the descriptor even when its last flush fails
        except OSError as err:  # a full disk at the last flush: the file stays partial
            raise SinkError(f"cannot finalize {self.path}: {err.strerror or err}") from err
        if not complete:
            return [self._partial]
        return [finalize(self._partial, self.path)]
