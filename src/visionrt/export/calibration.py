"""Calibration data: frames spread over the user's video (or videos), letterboxed as the pipeline
does."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from visionrt.errors import ConfigError, SourceError
from visionrt.preprocess import InputLayout, compute_letterbox, letterbox_into
from visionrt.sources import SourceOptions, open_source

Tensor = npt.NDArray[np.float32]
# Called with (frames done, frames wanted) while frames are collected.
ProgressFn = Callable[[int, int], None]


def sample_indices(available: int, count: int) -> list[int]:
    """`count` frame indices spread evenly over `available` frames, first and last included."""
    if available <= 0 or count <= 0:
        return []
    if count >= available:
        return list(range(available))
    return sorted({round(float(i)) for i in np.linspace(0, available - 1, count)})


class CalibrationSet:
    """Decoded frames kept as they came (uint8 BGR, 4× smaller than model inputs), letterboxed
    into (1, 3, H, W) float32 RGB inputs by the pipeline's own function when handed out."""

    def __init__(
        self, images: list[npt.NDArray[np.uint8]], indices: list[int], input_hw: tuple[int, int]
    ) -> None:
        self.images = images
        self.indices = indices
        self.input_hw = input_hw

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, position: int) -> Tensor:
        image = self.images[position]
        tensor = np.empty((1, 3, *self.input_hw), np.float32)
        box = compute_letterbox(image.shape[:2], self.input_hw)
        letterbox_into(image, tensor[0], box, InputLayout.NCHW_FLOAT)
        return tensor

    def __iter__(self) -> Iterator[Tensor]:
        return (self[i] for i in range(len(self)))


def calibration_frames(
    video: str | Path,
    count: int,
    input_hw: tuple[int, int],
    on_progress: ProgressFn | None = None,
) -> CalibrationSet:
    """`count` frames of `video`, spread evenly over the whole video when its length is known (a
    video's first seconds are rarely representative), else the first `count`."""
    if count < 1:
        raise ConfigError(f"--frames: expected >= 1 calibration frames, got {count}")
    source = open_source(str(video), 0, SourceOptions(mode="file"))
    try:
        wanted = set(sample_indices(source.frame_count, count)) or set(range(count))
        last = max(wanted)
        images: list[npt.NDArray[np.uint8]] = []
        indices: list[int] = []
        for frame in source.frames():
            if frame.index in wanted:
                images.append(frame.image)
                indices.append(frame.index)
                if on_progress is not None:
                    on_progress(len(images), len(wanted))
            if frame.index >= last:
                break
    finally:
        source.close()
    if not images:
        raise SourceError(f"calibration video {video} gave no frames")
    return CalibrationSet(images, indices, input_hw)


def calibration_over(
    videos: Sequence[str | Path],
    count: int,
    input_hw: tuple[int, int],
    on_progress: ProgressFn | None = None,
) -> CalibrationSet:
    """`count` frames shared evenly among `videos` (cameras of several sizes: one artifact
    calibrated on all of them), each's spread over it as `calibration_frames` does; `indices`
    are each frame's index in its own video, in the videos' order."""
    if count < len(videos):
        raise ConfigError(
            f"--frames: expected at least one calibration frame per video ({len(videos)}),"
            f" got {count}"
        )
    shares = [count // len(videos) + (i < count % len(videos)) for i in range(len(videos))]
    images: list[npt.NDArray[np.uint8]] = []
    indices: list[int] = []
    for video, share in zip(videos, shares, strict=True):
        done = len(images)

        def progress(got: int, _wanted: int, done: int = done) -> None:
            if on_progress is not None:
                on_progress(done + got, count)

        found = calibration_frames(video, share, input_hw, progress)
        images += found.images
        indices += found.indices
    return CalibrationSet(images, indices, input_hw)


class OrtCalibrationReader:
    """An `onnxruntime.quantization.CalibrationDataReader` over calibration frames.

    Duck-typed (get_next/rewind) so this module does not import onnxruntime; `on_next` is called
    per tensor handed out, which shows calibration progress."""

    def __init__(
        self, input_name: str, frames: CalibrationSet, on_next: Callable[[], None] | None = None
    ) -> None:
        self.input_name = input_name
        self.frames = frames
        self.on_next = on_next
        self._iter: Iterator[Tensor] = iter(frames)

    def get_next(self) -> dict[str, Any] | None:
        tensor = next(self._iter, None)
        if tensor is None:
            return None
        if self.on_next is not None:
            self.on_next()
        return {self.input_name: tensor}

    def rewind(self) -> None:
        self._iter = iter(self.frames)

    def set_range(self, start_index: int, end_index: int) -> None:
        """Hand out only frames[start_index:end_index] (ONNX Runtime's strided calibration)."""
        positions = range(start_index, min(end_index, len(self.frames)))
        self._iter = (self.frames[i] for i in positions)

    def __len__(self) -> int:
        return len(self.frames)
