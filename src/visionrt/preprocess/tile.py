"""Cut a high-resolution frame into overlapping tiles and letterbox each into a detector input row
(SAHI-style slicing), keeping the geometry that maps each tile's boxes back to the frame."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from visionrt.errors import ConfigError
from visionrt.preprocess.letterbox import InputLayout, compute_letterbox, letterbox_into
from visionrt.types import Letterbox

MIN_TILE = 32  # a detector's coarsest stride: a smaller tile cannot hold one grid cell
DEFAULT_TILE = 640  # a tiled detector's window when none is given: the common YOLO input


@dataclass(frozen=True, slots=True)
class TileOptions:
    """The config's `pipeline.tiling` section: for high-resolution sources the detector runs on
    overlapping square windows of each frame, batched in one call, and their boxes are merged."""

    tile: int = 0
    """Side of a square window in source pixels: 0 (no tiling), or 32 or more."""
    overlap: float = 0.2
    """Fraction of `tile` that neighbouring windows share, in [0, 1)."""
    full_frame: bool = True
    """Also run the whole frame as one more row (SAHI's "standard prediction"), which keeps
    objects larger than a tile whole."""
    merge_threshold: float = 0.5
    """Overlap above which boxes of different tiles are one object, in (0, 1] (IoU, or
    intersection over the smaller box when a tile edge cuts one of them)."""

    def __post_init__(self) -> None:
        whole = isinstance(self.tile, int) and not isinstance(self.tile, bool)
        if not whole or (self.tile != 0 and self.tile < MIN_TILE) or self.tile < 0:
            raise ConfigError(
                f"--tile: expected a whole number of pixels >= {MIN_TILE} (0: off), got"
                f" {self.tile!r}"
            )
        if not (isinstance(self.overlap, int | float) and 0.0 <= self.overlap < 1.0):
            raise ConfigError(
                f"--tile-overlap: expected a fraction in [0, 1), got {self.overlap!r}"
            )
        if not (isinstance(self.merge_threshold, int | float) and 0 < self.merge_threshold <= 1):
            raise ConfigError(
                f"--tile-merge: expected a number in (0, 1], got {self.merge_threshold!r}"
            )

    @property
    def stride(self) -> int:
        """Pixels between the starts of neighbouring windows."""
        return max(1, self.tile - round(self.tile * self.overlap))


@dataclass(frozen=True, slots=True)
class TileGrid:
    """Where one frame's input rows come from. `windows` (K, 4) int32 x1, y1, x2, y2 in source
    pixels, row-major; when `full_frame` the last window is the whole frame. `letterboxes[k]`
    maps window k (its own size as the source) into the detector input."""

    source_hw: tuple[int, int]
    windows: npt.NDArray[np.int32]
    letterboxes: tuple[Letterbox, ...]
    full_frame: bool

    def __len__(self) -> int:
        return int(self.windows.shape[0])


def _axis_starts(length: int, tile: int, stride: int) -> list[int]:
    """Window starts along one axis: every `stride`, the last one moved back to end on the edge
    (a clipped window would waste part of the input on padding and see less context)."""
    if length <= tile:
        return [0]
    count = math.ceil((length - tile) / stride) + 1
    return [min(i * stride, length - tile) for i in range(count)]


def tile_windows(source_hw: tuple[int, int], tile: int, overlap: float) -> npt.NDArray[np.int32]:
    """Tiles covering a frame of `source_hw` (height, width): (K, 4) int32 x1, y1, x2, y2,
    row-major. A frame dimension shorter than `tile` gives windows of that dimension."""
    options = TileOptions(tile=tile, overlap=overlap)
    if not tile:
        raise ConfigError("--tile: tiling is off (0); expected a window side in pixels")
    height, width = source_hw
    if height < 1 or width < 1:
        raise ConfigError(f"--tile: expected a frame size of at least 1x1, got {width}x{height}")
    tile_h, tile_w = min(tile, height), min(tile, width)
    rows = [
        (x, y, x + tile_w, y + tile_h)
        for y in _axis_starts(height, tile, options.stride)
        for x in _axis_starts(width, tile, options.stride)
    ]
    return np.asarray(rows, np.int32).reshape(-1, 4)


def _windows(source_hw: tuple[int, int], options: TileOptions) -> npt.NDArray[np.int32]:
    windows = tile_windows(source_hw, options.tile, options.overlap)
    # A frame that fits one tile is already seen whole: a full-frame row would repeat it.
    if options.full_frame and len(windows) > 1:
        whole = np.asarray([[0, 0, source_hw[1], source_hw[0]]], np.int32)
        windows = np.concatenate([windows, whole])
    return windows


def tile_count(source_hw: tuple[int, int], options: TileOptions) -> int:
    """Input rows one frame of `source_hw` takes: its tiles, plus the full-frame row."""
    return len(_windows(source_hw, options))


def plan_tiles(
    source_hw: tuple[int, int], input_hw: tuple[int, int], options: TileOptions
) -> TileGrid:
    """The grid for frames of `source_hw` run by a detector whose input is `input_hw`."""
    windows = _windows(source_hw, options)
    letterboxes = tuple(
        compute_letterbox((int(y2 - y1), int(x2 - x1)), input_hw) for x1, y1, x2, y2 in windows
    )
    full = options.full_frame and len(windows) > 1
    return TileGrid((int(source_hw[0]), int(source_hw[1])), windows, letterboxes, full)


def fill_tiles(
    image: npt.NDArray[np.uint8],
    buffer: npt.NDArray[np.generic],
    grid: TileGrid,
    layout: InputLayout,
    last: TileGrid | None = None,
) -> None:
    """Letterbox each window of `grid` cut from `image` (H×W×3 BGR) into `buffer` row k
    ((K, 3, H, W) float32 or (K, H, W, 3) uint8). `last` is the grid the buffer holds already:
    rows whose geometry is unchanged keep their padding."""
    if image.shape[:2] != grid.source_hw:
        raise ConfigError(
            f"--tile: expected a {grid.source_hw[1]}x{grid.source_hw[0]} frame for this grid,"
            f" got {image.shape[1]}x{image.shape[0]}"
        )
    for row, (x1, y1, x2, y2) in enumerate(grid.windows):
        box = grid.letterboxes[row]
        unchanged = last is not None and row < len(last) and last.letterboxes[row] == box
        letterbox_into(image[y1:y2, x1:x2], buffer[row], box, layout, fill_padding=not unchanged)
