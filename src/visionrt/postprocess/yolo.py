"""Decode YOLO-family detector heads into Detections in source-frame pixels."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

import numpy as np
import numpy.typing as npt

from visionrt.errors import ConfigError, OutputLayoutError
from visionrt.postprocess.nms import nms
from visionrt.types import Detections, Letterbox, anchor_count, boxes_to_source


class HeadLayout(Enum):
    """ANCHOR_FREE: [B, 4+nc, N] (Ultralytics v8/9/11/12). ANCHOR_FREE_T: the same transposed,
    [B, N, 4+nc] (some exports for other runtimes). YOLOV5: [B, N, 5+nc] with objectness.
    END2END: [B, K, 6] rows of x1, y1, x2, y2, score, class (NMS already applied)."""

    ANCHOR_FREE = "anchor_free"
    ANCHOR_FREE_T = "anchor_free_t"
    YOLOV5 = "yolov5"
    END2END = "end2end"


@dataclass(frozen=True, slots=True)
class PostprocessOptions:
    """How a detector's raw outputs become boxes: the thresholds, NMS, which classes are kept."""

    conf: float = 0.25
    """Confidence threshold: boxes scored below it are dropped (0-1)."""
    iou: float = 0.7
    """NMS IoU threshold: a box overlapping a better-scored one of its class by more is dropped
    (0-1; 0.7 is Ultralytics' predict default, so results match what users compare with)."""
    max_det: int = 300
    """The most boxes kept per frame (1 or more)."""
    classes: tuple[int, ...] | None = None
    """The class ids kept, each one of the model's (None: every class)."""
    agnostic: bool = False
    """NMS across classes: a box also suppresses overlapping boxes of other classes."""
    head: str = "auto"
    """The detector's output layout: auto (told by its shape and the model's facts),
    anchor_free, anchor_free_t, yolov5 or end2end."""

    def __post_init__(self) -> None:
        for key in ("conf", "iou"):
            value = getattr(self, key)
            if not 0.0 <= value <= 1.0:
                raise ConfigError(f"postprocess.{key}: expected a number in [0, 1], got {value}")
        if self.max_det < 1:
            raise ConfigError(f"postprocess.max_det: expected >= 1, got {self.max_det}")
        allowed = ("auto", *(h.value for h in HeadLayout))
        if self.head not in allowed:
            raise ConfigError(
                f"postprocess.head: expected one of {', '.join(allowed)}, got '{self.head}'"
            )


_LAYOUTS = "[B, 4+nc, N], [B, N, 4+nc], [B, N, 5+nc] or [B, K, 6]"


def detect_layout(
    shape: Sequence[int],
    num_classes: int,
    end2end: bool = False,
    forced: str = "auto",
    input_hw: tuple[int, int] | None = None,
) -> HeadLayout:
    """Which head produced an output of `shape` (batch axis included; dynamic axes are -1).

    The model's facts settle what the shape alone cannot: the class count (metadata) and the
    anchor count the input size implies. A shape that still fits more than one head is refused
    with an error naming it (`postprocess.head` forces one)."""
    if forced != "auto":
        return HeadLayout(forced)
    if len(shape) != 3:
        raise OutputLayoutError(
            f"unknown detector output layout {list(shape)}: expected 3 axes ({_LAYOUTS})"
        )
    _, rows, cols = shape
    # Grid cells of an anchor-free head (8400 at 640×640); YOLOv5 has 3 per cell.
    anchors = anchor_count(*input_hw) if input_hw else 0
    if end2end and cols == 6:
        return HeadLayout.END2END
    fits: list[HeadLayout] = []
    if num_classes:
        if rows == 4 + num_classes and cols != rows:
            fits.append(HeadLayout.ANCHOR_FREE)
        if cols == 4 + num_classes and rows != cols and rows in (anchors, -1):
            fits.append(HeadLayout.ANCHOR_FREE_T)
        if cols == 5 + num_classes and rows != 4 + num_classes:
            fits.append(HeadLayout.YOLOV5)
        if cols == 6 and rows not in (anchors, 3 * anchors):
            fits.append(HeadLayout.END2END)
    elif anchors:  # no class names: the anchor axis must say which is which
        if cols == anchors and rows > 4:
            fits.append(HeadLayout.ANCHOR_FREE)
        if rows == anchors and cols > 4:
            fits.append(HeadLayout.ANCHOR_FREE_T)
        if rows == 3 * anchors and cols > 5:
            fits.append(HeadLayout.YOLOV5)
    elif rows > 4 and cols > rows:  # no facts at all: only the one unambiguous shape
        fits.append(HeadLayout.ANCHOR_FREE)
    if len(fits) == 1:
        return fits[0]
    what = f"{num_classes} classes" if num_classes else "no class names in the metadata"
    facts = f"{what}, {anchors} anchors for input {list(input_hw)}" if input_hw else what
    kind = f"ambiguous ({' or '.join(f.value for f in fits)})" if fits else "unknown"
    raise OutputLayoutError(
        f"{kind} detector output layout {list(shape)} with {facts}: expected {_LAYOUTS}"
        " (set postprocess.head to force one)"
    )


def _cxcywh_to_xyxy(boxes: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    half = boxes[:, 2:4] * np.float32(0.5)
    return np.concatenate([boxes[:, 0:2] - half, boxes[:, 0:2] + half], axis=1)


def _candidates(
    output: npt.NDArray[np.float32], layout: HeadLayout, conf: float
) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32], npt.NDArray[np.int32]]:
    """Boxes (xyxy, input pixels), scores and classes above `conf` for one batch item."""
    if layout is HeadLayout.END2END:
        above = output[:, 4] > conf
        rows = output[above]
        return (
            rows[:, :4].astype(np.float32),
            rows[:, 4].astype(np.float32),
            rows[:, 5].astype(np.int32),
        )
    if layout is HeadLayout.ANCHOR_FREE_T:
        output, layout = output.T, HeadLayout.ANCHOR_FREE
    if layout is HeadLayout.ANCHOR_FREE:
        scores_all = output[4:]  # (nc, N): filter before transposing, most anchors are empty
        best = scores_all.max(axis=0)
        keep = np.flatnonzero(best > conf)
        boxes = output[:4, keep].T
        class_id = scores_all[:, keep].argmax(axis=0).astype(np.int32)
        score = best[keep]
    else:
        objectness = output[:, 4]
        keep = np.flatnonzero(objectness > conf)
        rows = output[keep]
        cls_scores = rows[:, 5:] * rows[:, 4:5]
        class_id = cls_scores.argmax(axis=1).astype(np.int32)
        score = cls_scores[np.arange(len(rows)), class_id]
        high = score > conf
        boxes, class_id, score = rows[high, :4], class_id[high], score[high]
    return _cxcywh_to_xyxy(boxes.astype(np.float32)), score.astype(np.float32), class_id


def decode_one(
    output: npt.NDArray[np.float32],
    layout: HeadLayout,
    box: Letterbox,
    options: PostprocessOptions,
) -> Detections:
    """One batch item's raw output → Detections in source pixels."""
    xyxy, score, class_id = _candidates(output, layout, options.conf)
    if options.classes is not None:
        wanted = np.isin(class_id, np.asarray(options.classes, np.int32))
        xyxy, score, class_id = xyxy[wanted], score[wanted], class_id[wanted]
    if layout is HeadLayout.END2END:
        order = np.argsort(-score, kind="stable")[: options.max_det]
    else:
        order = nms(xyxy, score, class_id, options.iou, options.max_det, options.agnostic)
    return Detections(boxes_to_source(xyxy[order], box), score[order], class_id[order])


def decode_batch(
    output: npt.NDArray[np.float32],
    layout: HeadLayout,
    boxes: Sequence[Letterbox],
    options: PostprocessOptions,
) -> list[Detections]:
    """A batch's raw output → one Detections per item, each with its own letterbox."""
    return [decode_one(output[i], layout, boxes[i], options) for i in range(len(boxes))]
