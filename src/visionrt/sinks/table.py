"""CSV: one source's detections as a table, one row per detection, for spreadsheets and pandas."""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path
from typing import Any

from visionrt.sinks.base import FileSink
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


class CsvSink(FileSink):
    """Writes COLUMNS (a header, then a row per detection; `frame` is the frame index from 0 as
    in the JSONL, boxes in source pixels). A CSV holds one source: with `source_id` set only
    that source is written, without it a second source is a SinkError.

    Rows are flushed per frame, as in JsonlSink; the file is created with its header at the
    first result, so a run whose frames had no detections leaves the header alone, and a run
    that wrote no result leaves nothing."""

    what = "CSV"

    def __init__(self, path: str | Path, source_id: int | None = None) -> None:
        # newline="": the csv module writes its own line ends (csv docs).
        super().__init__(path, source_id, newline="")

    def write(self, result: FrameResult) -> None:
        if self.takes(result):
            self.append(_csv(table_rows(result)))

    def header(self) -> str:
        return _csv([list(COLUMNS)])


def _csv(rows: list[list[Any]]) -> str:
    text = io.StringIO()
    csv.writer(text).writerows(rows)
    return text.getvalue()
