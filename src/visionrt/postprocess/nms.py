"""Class-aware non-maximum suppression, greedy and exact, with no Python loop per box."""

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
    keep = cv2.dnn.NMSBoxesBatched(
        xywh, scores.astype(np.float64), ids.astype(np.int32), -np.inf, float(iou_threshold)
    )
    keep = np.asarray(keep, dtype=np.intp).reshape(-1)
    # OpenCV returns indices grouped by class; the contract is best score first.
    keep = keep[np.argsort(-scores[keep], kind="stable")]
    return keep[:max_det]
