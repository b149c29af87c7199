"""NMS against hand-worked cases and against a plain greedy reference."""

from __future__ import annotations

import numpy as np
import pytest

from visionrt.postprocess import nms


def _arrays(rows):
    data = np.asarray(rows, np.float32)
    return data[:, :4].copy(), data[:, 4].copy(), data[:, 5].astype(np.int32)


def reference_nms(xyxy, scores, classes, threshold):
    """The textbook greedy loop, written plainly to check the fast one."""
    order = list(np.argsort(-scores, kind="stable"))
    keep = []
    while order:
        best = order.pop(0)
        keep.append(best)
        survivors = []
        for other in order:
            x1 = max(xyxy[best, 0], xyxy[other, 0])
            y1 = max(xyxy[best, 1], xyxy[other, 1])
            x2 = min(xyxy[best, 2], xyxy[other, 2])
            y2 = min(xyxy[best, 3], xyxy[other, 3])
            inter = max(0.0, x2 - x1) * max(0.0, y2 - y1)
            area = lambda b: (b[2] - b[0]) * (b[3] - b[1])  # noqa: E731
            iou = inter / (area(xyxy[best]) + area(xyxy[other]) - inter)
            if classes[best] != classes[other] or iou <= threshold:
                survivors.append(other)
        order = survivors
    return keep


def test_overlap_above_threshold_is_suppressed() -> None:
    # IoU of A and B = 81 / (100 + 100 - 81) = 0.6807
    xyxy, scores, classes = _arrays([[0, 0, 10, 10, 0.9, 0], [1, 1, 11, 11, 0.8, 0]])
    assert nms(xyxy, scores, classes, 0.5).tolist() == [0]
    assert nms(xyxy, scores, classes, 0.7).tolist() == [0, 1]


def test_other_class_is_not_suppressed() -> None:
    xyxy, scores, classes = _arrays([[0, 0, 10, 10, 0.9, 0], [1, 1, 11, 11, 0.8, 1]])
    assert sorted(nms(xyxy, scores, classes, 0.5).tolist()) == [0, 1]
    assert nms(xyxy, scores, classes, 0.5, agnostic=True).tolist() == [0]


def test_greedy_chain_keeps_the_third_box() -> None:
    # A suppresses B; B would suppress C, but B is gone and C barely touches A: C stays.
    xyxy, scores, classes = _arrays(
        [
            [0, 0, 10, 10, 0.9, 0],
            [4, 0, 14, 10, 0.8, 0],  # IoU(A, B) = 60 / 140 = 0.43
            [8, 0, 18, 10, 0.7, 0],  # IoU(B, C) = 0.43, IoU(A, C) = 20 / 180 = 0.11
        ]
    )
    assert nms(xyxy, scores, classes, 0.4).tolist() == [0, 2]


def test_result_is_best_score_first_and_capped() -> None:
    xyxy, scores, classes = _arrays(
        [
            [0, 0, 10, 10, 0.5, 1],
            [50, 50, 60, 60, 0.9, 0],
            [100, 100, 110, 110, 0.7, 2],
        ]
    )
    assert nms(xyxy, scores, classes, 0.5).tolist() == [1, 2, 0]
    assert nms(xyxy, scores, classes, 0.5, max_det=2).tolist() == [1, 2]


def test_empty_input() -> None:
    empty = np.zeros((0, 4), np.float32)
    assert nms(empty, np.zeros(0, np.float32), np.zeros(0, np.int32), 0.5).size == 0


@pytest.mark.parametrize("seed", range(5))
def test_matches_plain_greedy_reference(seed: int) -> None:
    rng = np.random.default_rng(seed)
    corner = rng.uniform(0, 200, (150, 2))
    size = rng.uniform(5, 60, (150, 2))
    xyxy = np.concatenate([corner, corner + size], axis=1).astype(np.float32)
    scores = rng.uniform(0, 1, 150).astype(np.float32)
    classes = rng.integers(0, 3, 150).astype(np.int32)
    for threshold in (0.3, 0.5, 0.7):
        expected = reference_nms(xyxy, scores, classes, threshold)
        assert nms(xyxy, scores, classes, threshold, max_det=1000).tolist() == expected
