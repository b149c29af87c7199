"""MOTChallenge text: one line per tracked box, the format tracking benchmarks evaluate."""

from __future__ import annotations

from visionrt.sinks.base import FileSink
from visionrt.types import FrameResult


class MotSink(FileSink):
    """Writes `frame,id,left,top,width,height,conf,-1,-1,-1` per box of `result.tracks` (frame
    numbers from 1, box in source pixels, predicted boxes included with their track's last
    confidence); results without tracks are skipped. A MOT file holds one sequence: with
    `source_id` set only that source is written, without it a second source is a SinkError.

    Lines are flushed per frame, as in JsonlSink; the file is created at the first tracked
    result, so a tracked run with no boxes still leaves an (empty) file."""

    what = "MOT file"

    def write(self, result: FrameResult) -> None:
        tracks = getattr(result, "tracks", None)
        if tracks is None or not self.takes(result):
            return
        number = result.frame.index + 1
        det = tracks.detections
        left_top = det.xyxy[:, :2].tolist()
        size = (det.xyxy[:, 2:] - det.xyxy[:, :2]).tolist()
        lines = "".join(
            f"{number},{track_id},{left:.2f},{top:.2f},{width:.2f},{height:.2f},{conf:.4f},-1,-1,-1\n"
            for track_id, (left, top), (width, height), conf in zip(
                tracks.track_id.tolist(), left_top, size, det.confidence.tolist(), strict=True
            )
        )
        self.append(lines)
