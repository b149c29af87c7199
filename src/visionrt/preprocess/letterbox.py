"""Letterbox a frame into a model input buffer in one resize (the geometry lives in types)."""

from __future__ import annotations

import functools
import math
from enum import Enum
from typing import cast

import cv2
import numpy as np
import numpy.typing as npt

from visionrt.types import Letterbox

PAD_VALUE = 114  # Ultralytics' grey; matching it keeps results equal to the exporter's own


class InputLayout(Enum):
    """What the model's input tensor wants.

    NCHW_FLOAT: RGB, float32 in [0, 1], channels first (plain ONNX exports).
    NHWC_U8_BGR: the decoded BGR bytes as they are; the model does colour, scale and layout
    itself (preprocessing folded into the graph).
    FRAMES: the decoded frames go to the backend's device whole and are letterboxed there
    (preprocess.device); host arrays for the same backend are NCHW_FLOAT.
    """

    NCHW_FLOAT = "nchw_float"
    NHWC_U8_BGR = "nhwc_u8_bgr"
    FRAMES = "frames"


def compute_letterbox(source_hw: tuple[int, int], input_hw: tuple[int, int]) -> Letterbox:
    """Fit the source inside the input keeping its aspect ratio, centred, as Ultralytics does."""
    return _letterbox((int(source_hw[0]), int(source_hw[1])), (int(input_hw[0]), int(input_hw[1])))


@functools.lru_cache(maxsize=256)  # a few frame sizes per run, asked for at every frame
def _letterbox(source_hw: tuple[int, int], input_hw: tuple[int, int]) -> Letterbox:
    src_h, src_w = source_hw
    in_h, in_w = input_hw
    scale = min(in_h / src_h, in_w / src_w)
    new_w, new_h = round(src_w * scale), round(src_h * scale)
    # The -0.1 reproduces Ultralytics' rounding of odd padding (the extra pixel goes last).
    top = round((in_h - new_h) / 2 - 0.1)
    left = round((in_w - new_w) / 2 - 0.1)
    return Letterbox(source_hw, input_hw, scale, (new_h, new_w), top, left)


def aligned_sizes(
    source_hw: tuple[int, int], model_hw: tuple[int, int], stride: int = 32
) -> list[tuple[int, int]]:
    """Smaller inputs that keep the letterboxed content where the model's own size puts it,
    modulo the stride: the detection grid then falls on the same pixels, so results match the
    reference far better than a tight crop does (MEASUREMENTS.md: 0.99 vs 0.94 for 768×576).

    Only the padded axis shrinks; the first size whose padding keeps the phase is returned."""
    box = compute_letterbox(source_hw, model_hw)
    (new_h, new_w), (in_h, in_w) = box.new_hw, model_hw
    sizes = []
    for axis, content, full, offset in ((0, new_h, in_h, box.top), (1, new_w, in_w, box.left)):
        if full - content < 2 * stride:
            continue  # no padding worth removing on this axis
        phase = offset % stride
        start = math.ceil(content / stride) * stride
        for size in range(start, full, stride):
            if round((size - content) / 2 - 0.1) % stride == phase:
                sizes.append((size, in_w) if axis == 0 else (in_h, size))
                break
    return sizes


def letterbox_into(
    image: npt.NDArray[np.uint8],
    out: npt.NDArray[np.generic],
    box: Letterbox,
    layout: InputLayout,
    fill_padding: bool = True,
) -> None:
    """Write `image` (H×W×3 BGR) letterboxed into `out`: (3, H, W) float32 or (H, W, 3) uint8.

    `fill_padding=False` skips repainting the borders when `out` was last filled with the same
    geometry: a reused buffer keeps its padding.
    """
    new_h, new_w = box.new_hw
    resized = image
    if image.shape[0] != new_h or image.shape[1] != new_w:
        # OpenCV's stubs type every result as MatLike (any dtype); resizing keeps uint8.
        resized = cast(
            "npt.NDArray[np.uint8]",
            cv2.resize(image, (new_w, new_h), interpolation=cv2.INTER_LINEAR),
        )
    rows = slice(box.top, box.top + new_h)
    cols = slice(box.left, box.left + new_w)
    if layout is InputLayout.NHWC_U8_BGR:
        if fill_padding:
            out[...] = PAD_VALUE
        out[rows, cols] = resized
        return
    if fill_padding:
        out[...] = np.float32(PAD_VALUE / 255.0)
    scale = np.float32(1.0 / 255.0)
    planes = cv2.split(resized)  # contiguous planes: scaling them is faster than strided reads
    for channel in range(3):  # BGR → RGB
        np.multiply(planes[2 - channel], scale, out=out[channel, rows, cols])
