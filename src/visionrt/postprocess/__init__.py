"""Postprocess: raw model outputs → Detections in source pixels (head decoding, NMS, rescale)."""

from visionrt.postprocess.nms import nms
from visionrt.postprocess.yolo import HeadLayout, PostprocessOptions, decode_batch, detect_layout

__all__ = ["HeadLayout", "PostprocessOptions", "decode_batch", "detect_layout", "nms"]
