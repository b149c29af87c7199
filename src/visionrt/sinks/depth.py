"""Depth outputs: a colourised depth MP4, and every depth map as a 16-bit PNG or NPY file in a
folder; results without a depth map are skipped."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path
from typing import TextIO

import cv2
import numpy as np
import numpy.typing as npt

from visionrt.errors import ConfigError, SinkError
from visionrt.sinks.base import Sink, check_writable, finalize, partial_path
from visionrt.sinks.video import VideoSink
from visionrt.types import DepthMap, Detections, FrameResult

MAP_FORMATS = ("png", "npy")
PNG_LEVELS = 65534  # finite values map to 1..65535; 0 marks a pixel without depth (NaN/Inf)


def _normalized(values: npt.NDArray[np.float32]) -> tuple[npt.NDArray[np.float64], float, float]:
    """`values` min–max scaled to [0, 1] over its finite pixels (non-finite → NaN), with the
    min and max (NaN, NaN when nothing is finite; a flat map scales to 0)."""
    finite = np.isfinite(values)
    if not finite.any():
        return np.full(values.shape, np.nan), float("nan"), float("nan")
    low, high = float(values[finite].min()), float(values[finite].max())
    span = high - low
    scaled = (values.astype(np.float64) - low) / span if span > 0 else np.zeros(values.shape)
    scaled[~finite] = np.nan
    return scaled, low, high


def colorize_depth(depth: DepthMap, colormap: int = cv2.COLORMAP_INFERNO) -> npt.NDArray[np.uint8]:
    """An H×W×3 BGR picture of `depth`, min–max normalized per frame: near is bright (relative
    inverse depth as it is, metric depth inverted); pixels without depth are black."""
    scaled, _, _ = _normalized(depth.values)
    if depth.metric:
        scaled = 1.0 - scaled
    levels = np.nan_to_num(scaled * 255.0, nan=0.0).astype(np.uint8)
    picture = np.asarray(cv2.applyColorMap(levels, colormap), np.uint8)
    picture[~np.isfinite(scaled)] = 0
    return picture


class DepthVideoSink(VideoSink):
    """The colourised depth of one source (when `source_id` is set) as an MP4, through the
    annotated-video sink's encoder and its `.partial` contract; `boxes` draws the detections
    on it too."""

    def __init__(
        self,
        path: str | Path,
        fps: float = 30.0,
        codec: str = "libx264",
        source_id: int | None = None,
        preset: str = "veryfast",
        colormap: int = cv2.COLORMAP_INFERNO,
        boxes: bool = False,
    ) -> None:
        super().__init__(path, fps, codec, source_id, preset)
        self.colormap = colormap
        self.boxes = boxes

    def write(self, result: FrameResult) -> None:
        if result.depth is None:
            if self._closed:
                raise SinkError(f"{self.path}: write after close")
            return
        if self.source_id is not None and result.frame.source_id != self.source_id:
            return
        picture = colorize_depth(result.depth, self.colormap)
        detections = result.detections if self.boxes else Detections.empty()
        super().write(
            replace(result, frame=replace(result.frame, pixels=picture), detections=detections)
        )


def decode_png16(
    levels: npt.NDArray[np.uint16], low: float, high: float
) -> npt.NDArray[np.float32]:
    """A depth map back from a DepthMapSink PNG and its index line's `min` and `max`: within
    (max − min) / 65534 of the values written; NaN where the PNG holds 0."""
    values = low + (levels.astype(np.float64) - 1.0) / PNG_LEVELS * (high - low)
    values[levels == 0] = np.nan
    return values.astype(np.float32)


class DepthMapSink(Sink):
    """Every depth map (of one source when `source_id` is set) as a file in the folder `path`:
    `png` a 16-bit PNG, min–max scaled per frame (see `decode_png16`), or `npy` the float32
    values as they are (NaN kept). `frames.jsonl` in the folder has a line per file: frame,
    timestamp, units, min, max, recomputed. A frame given an earlier frame's map (`depth_from`:
    depth on 1 frame in N, or motion gating) writes none: the JSONL's `depth.from` names the
    frame whose file it is.

    The folder is `<name>.partial<suffix>` until closed complete, then renamed to `path`
    (which must not exist, or be an empty folder); created at the first map, so a run that
    writes none leaves nothing."""

    def __init__(self, path: str | Path, fmt: str = "png", source_id: int | None = None) -> None:
        if fmt not in MAP_FORMATS:
            raise ConfigError(f"depth.maps: expected png or npy, got '{fmt}'")
        self.path = Path(path)
        self.fmt = fmt
        self.source_id = source_id
        if self.path.exists() and not (self.path.is_dir() and not any(self.path.iterdir())):
            raise SinkError(
                f"cannot write depth maps into {self.path}: it exists and is not an empty folder"
            )
        check_writable(self.path.with_name(f"{self.path.name}.probe"))  # its parent, writable
        self._partial = partial_path(self.path)
        self._index: TextIO | None = None
        self._closed = False
        self.frames = 0

    def _start(self) -> None:
        try:
            if self._partial.is_dir():  # an earlier run's unfinished maps under our name
                shutil.rmtree(self._partial)
            self._partial.mkdir(parents=True)
            self._index = (self._partial / "frames.jsonl").open("w", encoding="utf-8")
        except OSError as err:
            raise SinkError(f"cannot write {self._partial}: {err.strerror or err}") from err

    def write(self, result: FrameResult) -> None:
        if self._closed:
            raise SinkError(f"{self.path}: write after close")
        depth, frame = result.depth, result.frame
        if depth is None or (self.source_id is not None and frame.source_id != self.source_id):
            return
        if result.depth_from is not None:  # that frame's file holds it
            return
        if self._index is None:
            self._start()
        stem = f"{frame.index:06d}"
        if self.source_id is None:  # several sources share the folder
            stem = f"{frame.source_name or frame.source_id}-{stem}"
        name = f"{stem}.{self.fmt}"
        target = self._partial / name
        line = {"file": name, "frame": frame.index, "timestamp": round(frame.timestamp, 6)}
        line |= {"units": depth.units, "recomputed": depth.recomputed}
        try:
            if self.fmt == "png":
                scaled, low, high = _normalized(depth.values)
                levels = np.nan_to_num(1.0 + np.rint(scaled * PNG_LEVELS), nan=0.0)
                if not cv2.imwrite(str(target), levels.astype(np.uint16)):
                    raise OSError(f"the PNG encoder could not write {target.name}")
                line |= {"min": low if np.isfinite(low) else None}
                line |= {"max": high if np.isfinite(high) else None}
            else:
                np.save(target, depth.values.astype(np.float32, copy=False))
            assert self._index is not None
            self._index.write(json.dumps(line, separators=(",", ":")) + "\n")
            self._index.flush()
        except OSError as err:
            raise SinkError(f"cannot write {target}: {err.strerror or err}") from err
        self.frames += 1

    def close(self, complete: bool = True) -> list[Path]:
        if self._closed:
            return []
        self._closed = True
        if self._index is None:
            return []
        index, self._index = self._index, None
        try:
            index.close()
        except OSError as err:
            raise SinkError(f"cannot finalize {self.path}: {err.strerror or err}") from err
        if not complete:
            return [self._partial]
        if self.path.is_dir():  # empty (checked at open): the rename takes its place
            self.path.rmdir()
        return [finalize(self._partial, self.path)]
