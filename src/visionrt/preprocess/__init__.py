"""Preprocess: Frame → model input (letterbox, colour order, scale, layout), into reused buffers."""

from visionrt.preprocess.letterbox import (
    InputLayout,
    Letterbox,
    boxes_to_input,
    boxes_to_source,
    compute_letterbox,
    letterbox_into,
)

__all__ = [
    "InputLayout",
    "Letterbox",
    "boxes_to_input",
    "boxes_to_source",
    "compute_letterbox",
    "letterbox_into",
]
