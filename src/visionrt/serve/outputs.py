"""A service's files: one JSONL for every source, and per source (opened when it is added) the
files `SourceFiles` chooses; each source's files carry a number when its name
was used before in the same service, so a camera removed and added again never overwrites its
earlier files."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

from visionrt.errors import SinkError
from visionrt.pipeline.output import close_sinks
from visionrt.sinks import JsonlSink, Sink, SourceFiles, named_after
from visionrt.types import FrameResult

log = logging.getLogger("visionrt")
RETIRE_AFTER = 5.0  # seconds after a removed source's reader ended


class ServiceSinks(Sink):
    """One sink for the pipeline's sink thread: `shared` sinks take every result; a source's own
    sinks (`open_source`) take its results only. Written from the sink thread; `open_source` is
    called from the HTTP API's, `settle` from the service's watcher."""

    def __init__(self, folder: Path, jsonl: bool, files: SourceFiles) -> None:
        self.folder, self.files = folder, files
        self.shared: list[Sink] = [JsonlSink(folder / "detections.jsonl")] if jsonl else []
        self._own: dict[int, list[Sink]] = {}
        self._stems: set[str] = set()
        self._lock = threading.Lock()  # `_own`, `_stems`, `_retired`
        # Held while a source's own sinks are written or closed: `settle` closes them on
        # another thread than the sink thread's.
        self._writing = threading.Lock()
        # Removed sources: their reader, and when it was first seen ended (None: not yet).
        self._retired: dict[int, tuple[threading.Thread, float | None]] = {}
        self._closed: list[Path] = []
        # Told of each retired source once its files are finalized (its last frames through).
        self.on_settled: Callable[[int], None] | None = None

    def open_source(self, source_id: int, name: str, fps: float = 0.0) -> list[Path]:
        """Open source `source_id`'s own files (named after `name`; `fps` its frame rate, for
        the MP4); the paths they will have."""
        stem, n = name, 1
        with self._lock:
            while stem in self._stems:
                n += 1
                stem = f"{name}-{n}"
            self._stems.add(stem)
            path = named_after(self.folder, stem)
            self._own[source_id] = self.files.sinks(path, source_id, fps or 25.0)
        return [path(suffix) for suffix in self.files.suffixes()]

    def retire_source(self, source_id: int, reader: threading.Thread) -> None:
        """Source `source_id` was removed or ended: `settle` finalizes its own files
        RETIRE_AFTER seconds after `reader` ended (its last frames are through by then: a live
        frame is dropped as stale long before), so a long service keeps no file open per camera
        it ever had. A frame later still goes to the shared JSONL only. Safe to call again."""
        with self._lock:
            if source_id in self._own and source_id not in self._retired:
                self._retired[source_id] = (reader, None)

    def write(self, result: FrameResult) -> None:
        for sink in self.shared:
            sink.write(result)
        with self._writing:
            with self._lock:
                own = self._own.get(result.frame.source_id, ())
            for sink in own:
                sink.write(result)

    def settle(self) -> list[Path]:
        """Finalize the retired sources' files that are due (called now and then, whether or
        not any other source writes); the files finalized."""
        now = time.monotonic()
        closed: list[Path] = []
        settled: list[int] = []
        with self._writing:
            due: list[Sink] = []
            with self._lock:
                for source_id, (reader, ended) in list(self._retired.items()):
                    if reader.is_alive():
                        continue
                    if ended is None:  # its grace counts from the first look that saw it end
                        ended = now
                        self._retired[source_id] = (reader, ended)
                    if now - ended >= RETIRE_AFTER:
                        del self._retired[source_id]
                        due.extend(self._own.pop(source_id, []))
                        settled.append(source_id)
            for sink in due:
                try:
                    closed.extend(sink.close())
                except SinkError as err:  # one camera's file (a full disk): the service goes on
                    log.warning("%s", err)
        with self._lock:
            self._closed.extend(closed)
        if self.on_settled is not None:
            for source_id in settled:
                self.on_settled(source_id)
        return closed

    def close(self, complete: bool = True) -> list[Path]:
        with self._lock:
            sinks = [*self.shared, *(s for own in self._own.values() for s in own)]
            paths = list(self._closed)
        closed, first = close_sinks(sinks, complete=complete)  # every file; the first failure
        if first is not None:
            raise first
        return paths + closed
