"""A detector run on overlapping tiles of a high-resolution frame (SAHI-style): the tiles of a
frame go through the backend in batches, and the tiles' boxes are merged in source pixels."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from visionrt.backends import Backend, BackendOptions
from visionrt.errors import ConfigError
from visionrt.models import SELF_DESCRIBING, read_model_spec
from visionrt.postprocess import HeadLayout, PostprocessOptions
from visionrt.postprocess.tiles import cut_sides, merge_tiles, seen_better
from visionrt.postprocess.yolo import decode_one
from visionrt.preprocess.tile import (
    DEFAULT_TILE,
    TileGrid,
    TileOptions,
    fill_tiles,
    plan_tiles,
    tile_count,
)
from visionrt.tasks.base import BatchBuffers
from visionrt.tasks.detect import DetectTask
from visionrt.types import Detections

# A box edge this close (in detector input pixels) to a tile edge inside the frame is taken as
# cut by the tile: the detector rarely places the edge of a truncated object exactly on it.
EDGE_MARGIN = 3.0
# Input pixels one backend call takes at most: 40 rows of 640×640. YOLOv8s held ~50 MB of
# activations per 640×640 row in ONNX Runtime on the CPU (peak RSS at batch 8 and 32), so ~2 GB;
# 40 keeps a 4K frame at tile 640 (32 tiles + the full frame) in one call. More rows (a small
# tile, several frames per call) run in several calls of at most this many pixels.
MAX_CALL_PIXELS = 40 * 640 * 640
# How far a tile may be enlarged into the detector's input. Past 4× (a tile under a quarter of
# the input side, 160 px for a 640 detector) the detector sees interpolation blur at scales it
# was not trained on, and the rows per frame grow as 1/tile² (a 32-px tile cuts a 768×576 frame
# into 660 tiles). SAHI's own slices are about the detector's size (256-1024 for 640).
MAX_TILE_UPSCALE = 4


class TiledDetectTask:
    """A DetectTask run on tiles: one buffer holds every input row of a frame (its tiles, plus the
    full frame when `tiling.full_frame`), and one `infer` runs the rows of all its frames as one
    backend batch. Results are Detections in source pixels, like DetectTask's.

    `source_hw` (height, width) sizes the buffers: frames needing more rows than that size's grid
    are refused (with several sources, pass the size with the largest `tile_count`).
    `backend_options.batch` is frames per `infer` call; the detector runs rows × that batch, in
    backend calls of at most `rows_per_call` rows (0: as many as MAX_CALL_PIXELS allows), split
    evenly, with the same results as one call. A tile enlarged more than MAX_TILE_UPSCALE times
    into the detector's input is refused."""

    name = "detect"

    def __init__(
        self,
        model: str | Path,
        backend: str | Backend = "",
        backend_options: BackendOptions | None = None,
        postprocess: PostprocessOptions | None = None,
        *,
        tiling: TileOptions | None = None,
        source_hw: tuple[int, int],
        rows_per_call: int = 0,
    ) -> None:
        options = backend_options or BackendOptions()
        tiling = tiling or TileOptions()
        self.tiling = tiling if tiling.tile else replace(tiling, tile=DEFAULT_TILE)
        if len(source_hw) != 2 or min(source_hw) < 1:
            raise ConfigError(f"--tile: expected a source size (height, width), got {source_hw}")
        self.source_hw = (int(source_hw[0]), int(source_hw[1]))
        self.rows = tile_count(self.source_hw, self.tiling)
        self.batch = options.batch
        total = self.rows * self.batch
        if rows_per_call < 0:
            raise ConfigError(f"rows_per_call: expected >= 0, got {rows_per_call}")
        # Checked before loading when the file says its input size; a .pt or .engine says it
        # once loaded (the call size then assumes 640×640).
        known_hw = self._known_input_hw(model, options)
        if known_hw is not None:
            self._check_tile(known_hw)
        height, width = known_hw or (640, 640)
        limit = rows_per_call or max(1, MAX_CALL_PIXELS // (height * width))
        calls = math.ceil(total / limit)
        per_call = math.ceil(total / calls)  # even calls: 33 rows at 32 are 17 + 16, not 32 + 1
        self.detector = DetectTask(model, backend, replace(options, batch=per_call), postprocess)
        self.detector.memory_fix = "use a larger --tile (fewer tiles per frame) or lower --batch"
        self.postprocess = self.detector.postprocess
        self.backend: Backend = self.detector.backend
        self.spec, self.class_names = self.detector.spec, self.detector.class_names
        self.input_hw, self.layout = self.detector.input_hw, self.detector.layout
        try:
            self._check_tile(self.input_hw)
        except ConfigError:
            self.detector.close()
            raise
        self.head = self.detector.head
        self._grids: dict[tuple[int, int], TileGrid] = {}
        self._batches = BatchBuffers(1)  # the rows of a call's frames, filled in place
        self.grid(self.source_hw)  # sizes the buffers: fails now, not on the first frame

    @classmethod
    def for_sources(
        cls,
        model: str | Path,
        backend: str | Backend,
        backend_options: BackendOptions | None,
        postprocess: PostprocessOptions,
        tiling: TileOptions,
        sizes: list[tuple[int, int]],
    ) -> TiledDetectTask:
        """The tiled detector for sources of these frame sizes: buffers sized for the one
        needing most tiles."""
        if not sizes:
            raise ConfigError("--tile: no source reports its frame size before the run")
        largest = max(sizes, key=lambda hw: tile_count(hw, tiling))
        return cls(model, backend, backend_options, postprocess, tiling=tiling, source_hw=largest)

    @staticmethod
    def _known_input_hw(model: str | Path, options: BackendOptions) -> tuple[int, int] | None:
        """The detector's input (height, width) as far as it is known before loading."""
        if options.input_size:
            return (int(options.input_size[0]), int(options.input_size[1]))
        path = Path(model)
        if path.suffix in SELF_DESCRIBING and path.is_file():
            return read_model_spec(path).input_size
        return None

    def _check_tile(self, input_hw: tuple[int, int]) -> None:
        """ConfigError when a tile would be enlarged more than MAX_TILE_UPSCALE times."""
        smallest = min(input_hw) / MAX_TILE_UPSCALE
        if self.tiling.tile < smallest:
            raise ConfigError(
                f"--tile {self.tiling.tile}: a tile would be enlarged"
                f" {min(input_hw) / self.tiling.tile:.0f}x into the detector's"
                f" {input_hw[0]}x{input_hw[1]} input; expected --tile >= {math.ceil(smallest)}"
                f" (at most {MAX_TILE_UPSCALE}x: smaller tiles show the detector blur)"
            )

    def grid(self, source_hw: tuple[int, int]) -> TileGrid:
        """The tile grid for frames of `source_hw`; ConfigError when it needs more rows than a
        buffer holds."""
        grid = self._grids.get(source_hw)
        if grid is None:
            grid = plan_tiles(source_hw, self.input_hw, self.tiling)
            if len(grid) > self.rows:
                height, width = source_hw
                raise ConfigError(
                    f"--tile: a {width}x{height} frame needs {len(grid)} input rows at tile"
                    f" {self.tiling.tile}, overlap {self.tiling.overlap}; the buffers hold"
                    f" {self.rows} (sized for {self.source_hw[1]}x{self.source_hw[0]}: pass the"
                    " largest source size)"
                )
            self._grids[source_hw] = grid
        return grid

    def new_buffer(self) -> npt.NDArray[Any]:
        """Every input row of one frame: (K, 3, H, W) float32, or (K, H, W, 3) uint8 when
        folded."""
        row = self.detector.new_buffer()
        return np.empty((self.rows, *row.shape[1:]), row.dtype)

    def prepare(
        self, image: npt.NDArray[np.uint8], buffer: npt.NDArray[Any], last: TileGrid | None
    ) -> TileGrid:
        """Letterbox each tile of `image` into its row of `buffer`; returns the grid, which
        `decode` needs to map boxes back."""
        grid = self.grid((int(image.shape[0]), int(image.shape[1])))
        fill_tiles(image, buffer, grid, self.layout, last)
        return grid

    def infer(self, rows: Sequence[npt.NDArray[Any]]) -> npt.NDArray[np.float32]:
        """The rows of every frame in backend calls of at most the detector's batch; returns
        (frames, K, …): one entry per frame, holding that frame's K row outputs."""
        tensor = self._batches.fill(rows)
        frames, step = len(rows), self.detector.batch
        parts = []
        for start in range(0, len(tensor), step):
            chunk = tensor[start : start + step]
            parts.append(self.detector.infer([chunk])[: len(chunk)])  # a fixed batch pads
        output = parts[0] if len(parts) == 1 else np.concatenate(parts)
        return output[: frames * self.rows].reshape(frames, self.rows, *output.shape[1:])

    def decode(self, output: npt.NDArray[np.float32], grid: TileGrid) -> Detections:
        """One frame's row outputs → Detections in source pixels, merged across tiles."""
        return decode_grid(output, grid, self.head, self.postprocess, self.tiling.merge_threshold)

    def drain_events(self) -> dict[str, int]:
        """No events of its own."""
        return {}

    def warm_up(self, calls: int) -> None:
        self.detector.warm_up(calls)

    def describe(self) -> dict[str, Any]:
        """What ran, for the run summary: the detector's facts, with `batch` in frames."""
        return {
            **self.detector.describe(),
            "batch": self.batch,
            "tiling": {
                "tile": self.tiling.tile,
                "overlap": self.tiling.overlap,
                "full_frame": self.tiling.full_frame,
                "merge_threshold": self.tiling.merge_threshold,
                "rows_per_frame": self.rows,
                "rows_per_call": self.detector.batch,
                "calls_per_infer": math.ceil(self.rows * self.batch / self.detector.batch),
                "source_hw": list(self.source_hw),
            },
        }

    def close(self) -> None:
        self.detector.close()


def decode_grid(
    output: npt.NDArray[np.float32],
    grid: TileGrid,
    head: HeadLayout,
    postprocess: PostprocessOptions,
    merge_threshold: float,
    drop_cut: bool = False,
) -> Detections:
    """One frame's row outputs (one per window of `grid`) → Detections in source pixels, merged
    across windows (tiles, or motion regions). `drop_cut`: boxes a window edge inside the frame
    cuts are dropped, not merged (motion regions: windows hold what they are for whole)."""
    parts, tiles, sides = [], [], []
    tiled = len(grid) - 1 if grid.full_frame else len(grid)
    margin = EDGE_MARGIN / grid.letterboxes[0].scale
    for row, window in enumerate(grid.windows):
        found = decode_one(output[row], head, grid.letterboxes[row], postprocess)
        xyxy = found.xyxy + window[[0, 1, 0, 1]].astype(np.float32)
        parts.append(Detections(xyxy, found.confidence, found.class_id))
        tiles.append(np.full(len(found), row, np.intp))
        if row < tiled:
            sides.append(cut_sides(xyxy, window, grid.source_hw, margin))
        else:  # the full frame cuts nothing
            sides.append(np.zeros((len(found), 4), np.bool_))
    every = Detections(
        np.concatenate([p.xyxy for p in parts]),
        np.concatenate([p.confidence for p in parts]),
        np.concatenate([p.class_id for p in parts]),
    )
    tile_id, cut = np.concatenate(tiles), np.concatenate(sides)
    if drop_cut:
        whole = ~cut.any(axis=1)
        every = Detections(every.xyxy[whole], every.confidence[whole], every.class_id[whole])
        tile_id, cut = tile_id[whole], cut[whole]
    # Only tiles judge a partial view: the full frame sees small objects too coarsely.
    spurious = seen_better(every.xyxy, cut, tile_id, grid.windows[:tiled], margin)
    return merge_tiles(
        every,
        tile_id,
        # NumPy's stubs cannot tell a reduction over one axis of a 2-D array from a scalar.
        cast("npt.NDArray[np.bool_]", cut.any(axis=1)),
        merge_threshold,
        postprocess.max_det,
        postprocess.agnostic,
        spurious,
    )
