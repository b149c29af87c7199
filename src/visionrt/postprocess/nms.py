"""Class-aware non-maximum suppression, greedy and exact, with no Python loop per box; the IoU
of two sets of boxes (one for matching, tracking and fidelity)."""

from __future__ import annotations

import cv2
import numpy as np
import numpy.typing as npt


def nms(
    xyxy: npt.NDArray[np.float32],
    scores: npt.NDArray[np.float32],
    class_id: npt.NDArray[np.int32],
    iou_threshold: float,
    max_det: int = 300,
    agnostic: bool = False,
) -> npt.NDArray[np.intp]:
    """Indices of the boxes kept, best score first.

    A box is dropped when a better-scored box of the same class (any class when `agnostic`)
    overlaps it with IoU > `iou_threshold`. OpenCV's batched NMS does the greedy pass in C++.
    """
    if xyxy.shape[0] == 0:
        return np.zeros((0,), np.intp)
    xywh = xyxy.astype(np.float64, copy=True)
    xywh[:, 2:] -= xywh[:, :2]
    ids = np.zeros_like(class_id) if agnostic else class_id
    scores64, ids32 = scores.astype(np.float64), ids.astype(np.int32)
    # OpenCV's stubs ask for Python sequences; its bindings take these NumPy arrays as they are.
    kept = cv2.dnn.NMSBoxesBatched(xywh, scores64, ids32, -np.inf, float(iou_threshold))  # type: ignore[arg-type]
    keep = np.asarray(kept, dtype=np.intp).reshape(-1)
    # OpenCV returns indices grouped by class; the contract is best score first.
    keep = keep[np.argsort(-scores[keep], kind="stable")]
    return keep[:max_det]


def box_intersection(
    a: npt.NDArray[np.floating | np.integer], b: npt.NDArray[np.floating | np.integer]
) -> npt.NDArray[np.float64]:
    """(A, B) intersection areas of xyxy boxes `a` (A, 4) and `b` (B, 4)."""
    a64, b64 = a.astype(np.float64, copy=False), b.astype(np.float64, copy=False)
    top_left = np.maximum(a64[:, None, :2], b64[None, :, :2])
    bottom_right = np.minimum(a64[:, None, 2:], b64[None, :, 2:])
    return np.prod(np.clip(bottom_right - top_left, 0.0, None), axis=2)


def box_iou(a: npt.NDArray[np.floating], b: npt.NDArray[np.floating]) -> npt.NDArray[np.float64]:
    """(A, B) IoU of xyxy boxes `a` (A, 4) and `b` (B, 4); 0 where the union has no area."""
    a64, b64 = a.astype(np.float64, copy=False), b.astype(np.float64, copy=False)
    inter = box_intersection(a64, b64)
    area_a = np.prod(np.clip(a64[:, 2:] - a64[:, :2], 0.0, None), axis=1)
    area_b = np.prod(np.clip(b64[:, 2:] - b64[:, :2], 0.0, None), axis=1)
    union = area_a[:, None] + area_b[None, :] - inter
    return np.divide(inter, union, out=np.zeros_like(inter), where=union > 0)
