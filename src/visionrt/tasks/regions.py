"""The detector run on a frame's motion regions (`pipeline.motion: regions`): the windows the
scheduler chose are letterboxed into rows of a detector sized for them, the rows of a call's
frames go through the backend as one batch, and the windows' boxes are merged in source pixels
as tiles' are."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from visionrt.backends import Backend, BackendOptions
from visionrt.errors import ConfigError, ModelLoadError
from visionrt.models import SELF_DESCRIBING, is_quantized, read_model_spec, resolve_model
from visionrt.postprocess import PostprocessOptions
from visionrt.preprocess.regions import region_grid
from visionrt.preprocess.tile import TileGrid, fill_tiles
from visionrt.tasks.detect import DetectTask
from visionrt.tasks.tiled import decode_grid
from visionrt.types import Detections

MERGE_THRESHOLD = 0.5  # as tiles': windows overlap where objects sit close together


class RegionDetectTask:
    """A detector whose input is a `side`×`side` window of the frame. A buffer holds up to
    `max_windows` rows; `prepare_windows` fills as many as the frame's windows and `infer` runs
    only those. `backend_options.batch` is frames per `infer` call.

    `model`: an artifact made at `side` (`visionrt export --imgsz`), or an ONNX detector, which
    is resized to it (run at fp32 where the options say int8 and the file is not quantized).
    Its results are Detections in source pixels, like DetectTask's."""

    name = "detect"

    def __init__(
        self,
        model: str | Path,
        backend: str | Backend,
        backend_options: BackendOptions | None,
        postprocess: PostprocessOptions,
        side: int,
        max_windows: int,
    ) -> None:
        options = backend_options or BackendOptions()
        path = Path(model)
        known = read_model_spec(path).input_size if path.suffix in SELF_DESCRIBING else None
        fixed = path.suffix != ".onnx" and known is not None  # an artifact made at one size
        if fixed and known is not None and known != (side, side):
            raise ConfigError(
                f"pipeline.motion.region_model: {path.name} is made at {known[0]}x{known[1]};"
                f" regions of {side} px need a detector at {side}x{side} (`visionrt export --to"
                f" openvino-int8 --imgsz {side}x{side}`)"
            )
        if options.precision == "int8" and not is_quantized(path):
            # INT8 is what the run's file is, not a setting: a float region model (the FP32
            # reference resized for a plan's INT8 artifact, say) runs on the same runtime at fp32.
            options = replace(options, precision="fp32")
        self.batch, self.max_windows, self.side = options.batch, max_windows, side
        rows = max_windows * options.batch
        # A batch-1 export that cannot be rewritten for a batch runs a window per call.
        if (
            path.suffix == ".onnx"
            and rows > 1
            and resolve_model(path, None, rows, options.cache_dir).not_rebatched
        ):
            rows = 1
        sized = replace(options, batch=rows, input_size=None if fixed else (side, side))
        try:
            self.detector = DetectTask(path, backend, sized, postprocess)
        except ModelLoadError as err:  # a head the size rewrite does not understand
            raise ConfigError(
                f"--motion regions: {path.name} cannot run at {side}x{side} ({err}); give a"
                " detector made at that size as pipeline.motion.region_model"
            ) from err
        self.detector.memory_fix = "lower pipeline.motion.region or --batch"
        if self.detector.input_hw != (side, side):
            height, width = self.detector.input_hw
            self.detector.close()
            raise ConfigError(
                f"--motion regions: {path.name} runs at {height}x{width}, not the {side}x{side}"
                " of pipeline.motion.region; give an ONNX model or an artifact made at that size"
                " as pipeline.motion.region_model"
            )
        self.postprocess, self.head = self.detector.postprocess, self.detector.head
        self.backend: Backend = self.detector.backend
        self.spec, self.class_names = self.detector.spec, self.detector.class_names
        self.input_hw, self.layout = self.detector.input_hw, self.detector.layout
        # Rows in use per buffer, by the buffer's identity: the lane's buffers live for the run,
        # and a buffer is filled (preprocess thread) before its job is queued for `infer`.
        self._used: dict[int, int] = {}

    def new_buffer(self) -> npt.NDArray[Any]:
        row = self.detector.new_buffer()
        return np.empty((self.max_windows, *row.shape[1:]), row.dtype)

    def prepare(self, image: npt.NDArray[np.uint8], buffer: npt.NDArray[Any], last: Any) -> Any:
        """The whole frame as one window (what runs when no windows are given)."""
        height, width = image.shape[:2]
        return self.prepare_windows(image, buffer, np.array([[0, 0, width, height]], np.int32))

    def prepare_windows(
        self, image: npt.NDArray[np.uint8], buffer: npt.NDArray[Any], windows: npt.NDArray[Any]
    ) -> TileGrid:
        """Letterbox each window of `image` into a row of `buffer`; returns the grid for
        `decode`."""
        if not 1 <= len(windows) <= self.max_windows:
            raise ConfigError(
                f"--motion regions: expected 1 to {self.max_windows} windows, got {len(windows)}"
            )
        grid = region_grid(windows, (int(image.shape[0]), int(image.shape[1])), self.input_hw)
        fill_tiles(image, buffer, grid, self.layout)
        self._used[id(buffer)] = len(grid)
        return grid

    def infer(self, rows: list[npt.NDArray[Any]]) -> list[npt.NDArray[np.float32]]:
        """The used rows of every frame as one backend batch; one (K, …) output per frame."""
        counts = [self._used[id(buffer)] for buffer in rows]
        used = [buffer[:k] for buffer, k in zip(rows, counts, strict=True)]
        step = self.detector.batch
        if step >= sum(counts):
            output = self.detector.infer(used)
        else:  # a model that runs fewer rows per call
            tensor = np.concatenate(used)
            chunks = [tensor[i : i + step] for i in range(0, len(tensor), step)]
            # A fixed batch pads a short chunk: only its own rows are kept.
            output = np.concatenate([self.detector.infer([c])[: len(c)] for c in chunks])
        ends = np.cumsum(counts)
        return [output[end - k : end] for end, k in zip(ends, counts, strict=True)]

    def decode(self, output: npt.NDArray[np.float32], grid: TileGrid) -> Detections:
        # A box a window edge cuts is part of an object the window was not placed for: its
        # last box is kept by the fuser, or another window holds it whole.
        return decode_grid(output, grid, self.head, self.postprocess, MERGE_THRESHOLD, True)

    def drain_events(self) -> dict[str, int]:
        """No events of its own."""
        return {}

    def warm_up(self, calls: int) -> None:
        self.detector.warm_up(calls)

    def describe(self) -> dict[str, Any]:
        return {**self.detector.describe(), "batch": self.batch, "max_windows": self.max_windows}

    def close(self) -> None:
        self.detector.close()
