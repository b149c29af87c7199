"""Values passed between stages: tensor specs and backend facts, letterbox and depth-resize
geometry, and a detector head's anchor count. The frame records (`visionrt.frames`) and the
detection arrays (`visionrt.detections`) are re-exported here, where they were defined before."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from visionrt.detections import Detections as Detections
from visionrt.detections import TrackedDetections as TrackedDetections
from visionrt.frames import DepthMap as DepthMap
from visionrt.frames import DeviceMap as DeviceMap
from visionrt.frames import Event as Event
from visionrt.frames import Frame as Frame
from visionrt.frames import FrameResult as FrameResult
from visionrt.frames import as_bgr as as_bgr
from visionrt.frames import picture_hw as picture_hw


@dataclass(frozen=True, slots=True)
class TensorSpec:
    """Name, shape (None or a string for a dynamic axis) and NumPy dtype name of a tensor."""

    name: str
    shape: tuple[int | str | None, ...]
    dtype: str


@dataclass(frozen=True, slots=True)
class BackendInfo:
    """What a loaded backend actually runs on (not what was asked for)."""

    runtime: str
    version: str
    device: str
    precision: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    details: dict[str, Any] = field(default_factory=dict)
    # What `infer` is best given (backends.base: ARRAYS or FRAMES): host arrays shaped and typed
    # as `inputs` says (float32 NCHW, or uint8 NHWC when preprocessing is folded in), or
    # decoded frames the task prepares on the backend's device (backends.base.FramesBackend).
    input_form: str = "arrays"


@dataclass(frozen=True, slots=True)
class Letterbox:
    """Source (h, w) → input (h, w): resize by `scale` to (new_h, new_w), pad by (top, left)."""

    source_hw: tuple[int, int]
    input_hw: tuple[int, int]
    scale: float
    new_hw: tuple[int, int]
    top: int
    left: int


@dataclass(frozen=True, slots=True)
class DepthGeometry:
    """Source (h, w) → depth input (h, w): a plain resize, no padding; the map goes back by the
    inverse resize."""

    source_hw: tuple[int, int]
    input_hw: tuple[int, int]


def boxes_to_source(xyxy: npt.NDArray[np.float32], box: Letterbox) -> npt.NDArray[np.float32]:
    """Input-pixel boxes → source-pixel boxes, clipped to the source frame."""
    out = xyxy.astype(np.float32, copy=True)
    out[:, 0::2] -= box.left
    out[:, 1::2] -= box.top
    out /= np.float32(box.scale)
    src_h, src_w = box.source_hw
    np.clip(out[:, 0::2], 0, src_w, out=out[:, 0::2])
    np.clip(out[:, 1::2], 0, src_h, out=out[:, 1::2])
    return out


def boxes_to_input(xyxy: npt.NDArray[np.float32], box: Letterbox) -> npt.NDArray[np.float32]:
    """Source-pixel boxes → input-pixel boxes (the forward map, for tests and calibration)."""
    out = xyxy.astype(np.float32, copy=True) * np.float32(box.scale)
    out[:, 0::2] += box.left
    out[:, 1::2] += box.top
    return out


# The strides of an anchor-free YOLO head's three levels (Ultralytics v8/9/11/12), in pixels.
DEFAULT_STRIDES = (8, 16, 32)


def anchor_count(height: int, width: int, strides: Sequence[int] = DEFAULT_STRIDES) -> int:
    """Number of anchor points a detector head has at an input of `height` × `width` pixels:
    what decoding tells head layouts apart by and what a resize rewrites."""
    return sum((height // s) * (width // s) for s in strides)
