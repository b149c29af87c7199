"""MOTChallenge text: one line per tracked box, the format tracking benchmarks evaluate."""

from __future__ import annotations

from visionrt.sinks.base import FileSink
from visionrt.types import FrameResult


class MotSink(FileSink):
    """Writes `frame,id,left,top,width,height,conf,-1,-1,-1` per box of `result.tracks` (frame
    numbers from 1, box in source pixels rounded to 0.01 as in the JSONL, predicted boxes
    included with their track's last confidence); results without tracks are skipped. A MOT
    file holds one sequence: with `source_id` set only that source is written, without it a
    second source is a SinkError.

    Lines are flushed per frame, as in JsonlSink; the file is created at the first tracked
    result, so a tracked run with no boxes still leaves an (empty) file."""

    what = "MOT file"

    def write(self, result: FrameResult) -> None:
        tracks = getattr(result, "tracks", None)
        if tracks is None or not self.takes(result):
            return
        number = result.frame.index + 1
        det = tracks.detections
        lines = ""
        for track_id, box, conf in zip(
            tracks.track_id.tolist(), det.xyxy.tolist(), det.confidence.tolist(), strict=True
        ):
            # The corners as the JSONL rounds them, so the files agree (and one written from
            # the JSONL, as a cluster's driver does, is the same file).
            left, top, right, bottom = (round(v, 2) for v in box)
            width, height = right - left, bottom - top
            lines += f"{number},{track_id},{left:.2f},{top:.2f},{width:.2f},{height:.2f},"
            lines += f"{conf:.4f},-1,-1,-1\n"
        self.append(lines)
