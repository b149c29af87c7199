"""A service's files: one JSONL for every source, and per source (opened when it is added) its
COCO results and CSV; each source's files carry a number when its name was used before in the
same service, so a camera removed and added again never overwrites its earlier files."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from visionrt.errors import SinkError
from visionrt.sinks import CocoSink, CsvSink, JsonlSink, Sink
from visionrt.types import FrameResult


class ServiceSinks(Sink):
    """One sink for the pipeline's sink thread: `shared` sinks take every result; a source's own
    sinks (`open_source`) take its results only. Written from the sink thread; `open_source` is
    called from the HTTP API's."""

    def __init__(self, folder: Path, jsonl: bool, coco: bool, csv: bool) -> None:
        self.folder, self.coco, self.csv = folder, coco, csv
        self.shared: list[Sink] = [JsonlSink(folder / "detections.jsonl")] if jsonl else []
        self._own: dict[int, list[Sink]] = {}
        self._stems: set[str] = set()
        self._lock = threading.Lock()

    def open_source(self, source_id: int, name: str) -> list[Path]:
        """Open source `source_id`'s own files (named after `name`); the paths they will have."""
        stem, n = name, 1
        with self._lock:
            while stem in self._stems:
                n += 1
                stem = f"{name}-{n}"
            self._stems.add(stem)
            makers: list[tuple[str, Callable[[Path, int], Sink]]] = []
            if self.coco:
                makers.append((".coco.json", CocoSink))
            if self.csv:
                makers.append((".csv", CsvSink))
            sinks = [make(self.folder / f"{stem}{suffix}", source_id) for suffix, make in makers]
            self._own[source_id] = sinks
        return [self.folder / f"{stem}{suffix}" for suffix, _ in makers]

    def write(self, result: FrameResult) -> None:
        for sink in self.shared:
            sink.write(result)
        with self._lock:
            own = self._own.get(result.frame.source_id, ())
        for sink in own:
            sink.write(result)

    def close(self, complete: bool = True) -> list[Path]:
        paths: list[Path] = []
        first: SinkError | None = None
        with self._lock:
            sinks = [*self.shared, *(s for own in self._own.values() for s in own)]
        for sink in sinks:  # finalize every file; report the first failure
            try:
                paths.extend(sink.close(complete))
            except SinkError as err:
                first = first or err
        if first is not None:
            raise first
        return paths
