"""COCO detection results: one source's boxes as the JSON list that COCO evaluation tools load."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TextIO

from visionrt.errors import SinkError
from visionrt.sinks.base import Sink, check_writable, finalize, partial_path
from visionrt.types import FrameResult


def coco_rows(result: FrameResult) -> list[dict[str, object]]:
    """`{"image_id", "category_id", "bbox": [x, y, w, h], "score"}` per detection of `result`:
    image_id is the frame index, category_id the model's class index. The box is the JSONL's
    (source pixels rounded to 0.01) as left, top, width, height, so both files say the same."""
    det = result.detections
    image = result.frame.index
    rows: list[dict[str, object]] = []
    for (x1, y1, x2, y2), score, cls in zip(
        det.xyxy.tolist(), det.confidence.tolist(), det.class_id.tolist(), strict=True
    ):
        left, top, right, bottom = (round(v, 2) for v in (x1, y1, x2, y2))
        bbox = [left, top, round(right - left, 2), round(bottom - top, 2)]
        rows.append({"image_id": image, "category_id": cls, "bbox": bbox, "score": round(score, 4)})
    return rows


class CocoSink(Sink):
    """Writes a COCO results file (what pycocotools' `COCO.loadRes` reads): a JSON list with an
    entry per detection, every detection of the results (with tracking, the predicted boxes
    too, as in the JSONL). `category_id` is the model's class index as it is: COCO's ground
    truth numbers its 80 classes 1-90, so mapping the index to a dataset's ids (YOLO's
    coco80-to-91 table) is the evaluator's step. Class names and track ids are not COCO
    fields and are left out.

    A COCO file holds one sequence of image ids: with `source_id` set only that source is
    written, without it a second source is a SinkError. The list is streamed — "[" when the
    first result arrives, entries flushed per frame, "]" at close — so a service that runs for
    weeks holds nothing in memory; a closed file parses (an incomplete one keeps its
    `.partial` name), one a killed process left lacks its "]". A run that wrote no result
    leaves no file; one whose frames had no detections leaves `[]`."""

    def __init__(self, path: str | Path, source_id: int | None = None) -> None:
        self.path = Path(path)
        self.source_id = source_id
        check_writable(self.path)
        self._partial = partial_path(self.path)
        self._file: TextIO | None = None
        self._closed = False
        self._seen_source: int | None = None
        self._rows = 0

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
                f"{self.path}: a COCO results file holds one source, got source {source} after"
                f" source {self._seen_source}; give the sink a source_id"
            )
        rows = [json.dumps(row, separators=(",", ":")) for row in coco_rows(result)]
        text = (",\n" if self._rows and rows else "") + ",\n".join(rows)
        try:
            if self._file is None:
                self._file = self._partial.open("w", encoding="utf-8")
                self._file.write("[\n")
            if text:
                self._file.write(text)
                self._file.flush()
        except OSError as err:
            raise SinkError(f"cannot write {self._partial}: {err.strerror or err}") from err
        self._rows += len(rows)

    def close(self, complete: bool = True) -> list[Path]:
        if self._closed:
            return []
        self._closed = True
        if self._file is None:
            return []
        file, self._file = self._file, None
        try:
            try:
                # Also when incomplete: the partial file then parses, with what was written.
                file.write("\n]\n" if self._rows else "]\n")
            finally:
                file.close()  # closes the descriptor even when its last flush fails
        except OSError as err:  # a full disk at the last flush: the file stays partial
            raise SinkError(f"cannot finalize {self.path}: {err.strerror or err}") from err
        if not complete:
            return [self._partial]
        return [finalize(self._partial, self.path)]
