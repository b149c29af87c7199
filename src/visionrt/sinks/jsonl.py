"""JSON Lines: one line per frame with its detections in source pixels."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TextIO

from visionrt.sinks.base import Sink, check_writable, partial_path
from visionrt.types import FrameResult


class JsonlSink(Sink):
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        check_writable(self.path)
        self._partial = partial_path(self.path)
        self._file: TextIO | None = self._partial.open("w", encoding="utf-8", buffering=1 << 16)

    def write(self, result: FrameResult) -> None:
        assert self._file is not None, "write after close"
        self._file.write(json.dumps(result.to_json(), separators=(",", ":")))
        self._file.write("\n")

    def close(self, complete: bool = True) -> list[Path]:
        if self._file is None:
            return []
        self._file.close()
        self._file = None
        if not complete:
            return [self._partial]
        self._partial.replace(self.path)
        return [self.path]
