"""MOTChallenge text: one line per tracked box, the format tracking benchmarks evaluate."""

from __future__ import annotations

from pathlib import Path
from typing import TextIO

from visionrt.errors import SinkError
from visionrt.sinks.base import Sink, check_writable, finalize, partial_path
from visionrt.types import FrameResult


class MotSink(Sink):
    """Writes `frame,id,left,top,width,height,conf,-1,-1,-1` per box of `result.tracks` (frame
    numbers from 1, box in source pixels, predicted boxes included with their track's last
    confidence); results without tracks are skipped. A MOT file holds one sequence: with
    `source_id` set only that source is written, without it a second source is a SinkError.

    Lines are flushed per frame, as in JsonlSink; the file is created at the first tracked
    result, so a tracked run with no boxes still leaves an (empty) file."""

    def __init__(self, path: str | Path, source_id: int | None = None) -> None:
        self.path = Path(path)
        self.source_id = source_id
        check_writable(self.path)
        self._partial = partial_path(self.path)
        self._file: TextIO | None = None
        self._closed = False
        self._seen_source: int | None = None

    def write(self, result: FrameResult) -> None:
        if self._closed:
            raise SinkError(f"{self.path}: write after close")
        tracks = getattr(result, "tracks", None)
        frame = result.frame
        if tracks is None or (self.source_id is not None and frame.source_id != self.source_id):
            return
        if self._seen_source is None:
            self._seen_source = frame.source_id
        elif frame.source_id != self._seen_source:
            raise SinkError(
                f"{self.path}: a MOT file holds one source, got source {frame.source_id} after "
                f"source {self._seen_source}; give the sink a source_id"
            )
        number = frame.index + 1
        det = tracks.detections
        left_top = det.xyxy[:, :2].tolist()
        size = (det.xyxy[:, 2:] - det.xyxy[:, :2]).tolist()
        lines = "".join(
            f"{number},{track_id},{left:.2f},{top:.2f},{width:.2f},{height:.2f},{conf:.4f},-1,-1,-1\n"
            for track_id, (left, top), (width, height), conf in zip(
                tracks.track_id.tolist(), left_top, size, det.confidence.tolist(), strict=True
            )
        )
        try:
            if self._file is None:
                self._file = self._partial.open("w", encoding="utf-8")
            self._file.write(lines)
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
            file.close()
        except OSError as err:  # a full disk at the last flush: the file stays partial
            raise SinkError(f"cannot finalize {self.path}: {err.strerror or err}") from err
        if not complete:
            return [self._partial]
        return [finalize(self._partial, self.path)]
