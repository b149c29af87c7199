"""COCO detection results: one source's boxes as the JSON list that COCO evaluation tools load."""

from __future__ import annotations

import json
from pathlib import Path

from visionrt.sinks.base import FileSink
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


class CocoSink(FileSink):
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

    what = "COCO results file"

    def __init__(self, path: str | Path, source_id: int | None = None) -> None:
        super().__init__(path, source_id)
        self._rows = 0

    def write(self, result: FrameResult) -> None:
        if not self.takes(result):
            return
        rows = [json.dumps(row, separators=(",", ":")) for row in coco_rows(result)]
        self.append((",\n" if self._rows and rows else "") + ",\n".join(rows))
        self._rows += len(rows)

    def header(self) -> str:
        return "[\n"

    def footer(self) -> str:
        # Also when incomplete: the partial file then parses, with what was written.
        return "\n]\n" if self._rows else "]\n"
