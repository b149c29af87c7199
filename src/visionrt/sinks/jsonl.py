"""JSON Lines: one line per frame with its detections in source pixels."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from visionrt.errors import SinkError
from visionrt.sinks.base import Sink, check_writable, finalize, partial_path
from visionrt.types import FrameResult


class JsonlSink(Sink):
    """Lines are flushed per frame, so a killed process leaves every line written so far (in the
    `.partial` file); the file is created at the first line, so a run that fails before its
    first frame leaves nothing behind.

    `names[i]` is source i's name (`vtest`, `vtest-1`, `rgb`: what summary.json calls it) and
    becomes each line's `source`; a frame whose own name is neither that nor `paths[i]` (the
    source as given) — an image of a folder, named by its file — keeps it as `image`. Without
    `names`, `source` is the frame's own name."""

    def __init__(
        self, path: str | Path, names: Sequence[str] = (), paths: Sequence[str] = ()
    ) -> None:
        self.path = Path(path)
        self.names, self.paths = list(names), list(paths)
        check_writable(self.path)
        self._partial = partial_path(self.path)
        self._file: TextIO | None = None
        self._closed = False

    def write(self, result: FrameResult) -> None:
        if self._closed:
            raise SinkError(f"{self.path}: write after close")
        record = result.to_json()
        source, own = result.frame.source_id, result.frame.source_name
        if source < len(self.names):
            name = self.names[source]
            image = own and own != name and own not in self.paths[source : source + 1]
            rest = {key: value for key, value in record.items() if key != "source"}
            record = {"source": name, **({"image": own} if image else {}), **rest}
        line = json.dumps(record, separators=(",", ":")) + "\n"
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
