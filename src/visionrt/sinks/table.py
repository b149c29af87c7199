"""CSV: one source's detections as a table, one row per detection, for spreadsheets and pandas."""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any, TextIO

from visionrt.errors import SinkError
from visionrt.sinks.base import Sink, check_writable, finalize, partial_path
from visionrt.types import FrameResult

COLUMNS = (
    "frame", "timestamp", "class_id", "class_name", "confidence",
    "x1", "y1", "x2", "y2", "track_id", "distance",
)  # fmt: skip


def table_rows(result: FrameResult) -> list[list[Any]]:
    """The rows of `result`, in COLUMNS order and the JSONL's rounding; `track_id` and
    `distance` are "" where the run has none (no tracking, no depth, no finite depth)."""
    det, names = result.detections, result.class_names
    count = len(det)
    tracks = result.tracks.track_id.tolist() if result.tracks is not None else [""] * count
    distances = result.distance.tolist() if result.distance is not None else [math.nan] * count
    frame, timestamp = result.frame.index, round(result.frame.timestamp, 6)
    return [
        [
            frame,
            timestamp,
            cls,
            names[cls] if 0 <= cls < len(names) else "",
            round(conf, 4),
            *(round(v, 2) for v in box),
            track,
            round(distance, 4) if math.isfinite(distance) else "",
        ]
        for box, conf, cls, track, distance in zip(
            det.xyxy.tolist(),
            det.confidence.tolist(),
            det.class_id.tolist(),
            tracks,
            distances,
            strict=True,
        )
    ]


class CsvSink(Sink):
    """Writes COLUMNS (a header, then a row per detection; `frame` is the frame index from 0 as
    in the JSONL, boxes in source pixels). A CSV holds one source: with `source_id` set only
    that source is written, without it a second source is a SinkError.

    Rows are flushed per frame, as in JsonlSink; the file is created with its header at the
    first result, so a run whose frames had no detections leaves the header alone, and a run
    that wrote no result leaves nothing."""

    def __init__(self, path: str | Path, source_id: int | None = None) -> None:
        self.path = Path(path)
        self.source_id = source_id
        check_writable(self.path)
        self._partial = partial_path(self.path)
        self._file: TextIO | None = None
        self._writer: Any = None
        self._closed = False
        self._seen_source: int | None = None

    def write(self, result: FrameResult) -> None:
        if self._closed:
            raise SinkError(f"{self.path}: write after close")
        source = result.frame.source_id
        if self.source_id is not None and source != self.source_id:
            return
        if self._seen_source is None:
            self._seen_source = source
        elif source != self._seen_source:
            raise SinkError(
                f"{self.path}: a CSV holds one source, got source {source} after source"
                f" {self._seen_source}; give the sink a source_id"
            )
        rows = table_rows(result)
        try:
            if self._file is None:
                # newline="": the csv module writes its own line ends (csv docs).
                self._file = self._partial.open("w", encoding="utf-8", newline="")
                self._writer = csv.writer(self._file)
                self._writer.writerow(COLUMNS)
            if rows:
                self._writer.writerows(rows)
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
