"""Preprocess: Frame → model input (letterbox, colour order, scale, layout), into reused buffers."""

from visionrt.preprocess.letterbox import InputLayout, compute_letterbox, letterbox_into
from visionrt.preprocess.tile import TileOptions
from visionrt.types import Letterbox, boxes_to_input, boxes_to_source

__all__ = [
    "InputLayout",
    "Letterbox",
    "TileOptions",
    "boxes_to_input",
    "boxes_to_source",
    "compute_letterbox",
    "letterbox_into",
]
