"""Head decoding for each output layout, and layout detection."""

from __future__ import annotations

import re

import numpy as np
import pytest

from visionrt.errors import ConfigError, OutputLayoutError
from visionrt.postprocess import HeadLayout, PostprocessOptions, detect_layout
from visionrt.postprocess.yolo import decode_one
from visionrt.preprocess import compute_letterbox

# 768×576 video in a 640×640 input: scale 5/6, 80 px pad on top.
BOX = compute_letterbox((576, 768), (640, 640))
OPTIONS = PostprocessOptions(conf=0.25, iou=0.7)


def _expected_source(x1, y1, x2, y2):
    return [x1 * 1.2, (y1 - 80) * 1.2, x2 * 1.2, (y2 - 80) * 1.2]


def test_anchor_free_head() -> None:
    output = np.zeros((6, 8400), np.float32)  # [4 + nc, N], nc = 2
    output[:, 0] = [100, 200, 40, 80, 0.1, 0.8]  # class 1, xyxy 80,160,120,240
    output[:, 1] = [300, 300, 20, 20, 0.9, 0.2]  # class 0, xyxy 290,290,310,310
    output[:, 2] = [300, 301, 20, 20, 0.6, 0.0]  # duplicate of 1: suppressed
    output[:, 3] = [500, 500, 10, 10, 0.2, 0.1]  # below threshold
    det = decode_one(output, HeadLayout.ANCHOR_FREE, BOX, OPTIONS)
    assert det.class_id.tolist() == [0, 1]
    np.testing.assert_allclose(det.confidence, [0.9, 0.8], atol=1e-6)
    np.testing.assert_allclose(
        det.xyxy,
        [_expected_source(290, 290, 310, 310), _expected_source(80, 160, 120, 240)],
        atol=1e-3,
    )


def test_yolov5_head_multiplies_objectness() -> None:
    output = np.zeros((10, 7), np.float32)  # [N, 5 + nc]
    output[0] = [100, 200, 40, 80, 0.5, 0.9, 0.1]  # 0.45 class 0
    output[1] = [300, 300, 20, 20, 0.9, 0.2, 0.25]  # 0.225 < 0.25: dropped
    det = decode_one(output, HeadLayout.YOLOV5, BOX, OPTIONS)
    assert det.class_id.tolist() == [0]
    np.testing.assert_allclose(det.confidence, [0.45], atol=1e-6)
    np.testing.assert_allclose(det.xyxy, [_expected_source(80, 160, 120, 240)], atol=1e-3)


def test_end2end_head_keeps_rows_without_nms() -> None:
    output = np.zeros((300, 6), np.float32)
    output[0] = [80, 160, 120, 240, 0.7, 1]
    output[1] = [81, 160, 121, 240, 0.6, 1]  # overlapping, kept: the model already did NMS
    det = decode_one(output, HeadLayout.END2END, BOX, OPTIONS)
    assert len(det) == 2
    np.testing.assert_allclose(det.xyxy[0], _expected_source(80, 160, 120, 240), atol=1e-3)


def test_class_filter() -> None:
    output = np.zeros((6, 100), np.float32)
    output[:, 0] = [100, 200, 40, 80, 0.1, 0.8]
    output[:, 1] = [300, 300, 20, 20, 0.9, 0.2]
    det = decode_one(output, HeadLayout.ANCHOR_FREE, BOX, PostprocessOptions(classes=(1,)))
    assert det.class_id.tolist() == [1]


@pytest.mark.parametrize(
    ("shape", "nc", "end2end", "expected"),
    [
        ((1, 6, 8400), 2, False, HeadLayout.ANCHOR_FREE),
        ((1, 84, 8400), 80, False, HeadLayout.ANCHOR_FREE),
        ((1, 84, 8400), 0, False, HeadLayout.ANCHOR_FREE),
        ((1, 25200, 85), 80, False, HeadLayout.YOLOV5),
        ((1, 25200, 7), 2, False, HeadLayout.YOLOV5),
        ((1, 300, 6), 80, True, HeadLayout.END2END),
        ((1, 300, 6), 80, False, HeadLayout.END2END),
    ],
)
def test_detect_layout(shape, nc, end2end, expected) -> None:
    assert detect_layout(shape, nc, end2end) is expected


@pytest.mark.parametrize(
    ("shape", "nc", "expected"),
    [
        # The demo model's output transposed: 8400 rows are the anchors of a 640 input, so
        # 6 columns are 4 + 2 classes, not an end-to-end head's x1 y1 x2 y2 score class.
        ((1, 8400, 6), 2, HeadLayout.ANCHOR_FREE_T),
        ((1, 8400, 6), 0, HeadLayout.ANCHOR_FREE_T),
        ((1, 6, 8400), 0, HeadLayout.ANCHOR_FREE),
        ((1, 25200, 6), 1, HeadLayout.YOLOV5),
        ((1, 25200, 85), 0, HeadLayout.YOLOV5),
        ((1, 300, 6), 2, HeadLayout.END2END),
    ],
)
def test_layout_resolved_from_the_anchor_count(shape, nc, expected) -> None:
    assert detect_layout(shape, nc, input_hw=(640, 640)) is expected


@pytest.mark.parametrize(
    ("shape", "nc", "message"),
    [
        ((1, 300, 6), 0, "unknown detector output layout [1, 300, 6] with no class names"),
        ((1, 8400, 9), 2, "unknown detector output layout [1, 8400, 9] with 2 classes"),
    ],
)
def test_layout_that_the_facts_cannot_settle_is_refused(shape, nc, message) -> None:
    with pytest.raises(OutputLayoutError, match=re.escape(message)):
        detect_layout(shape, nc, input_hw=(640, 640))


def test_transposed_head_decodes_like_the_original() -> None:
    output = np.zeros((6, 8400), np.float32)
    output[:, 0] = [320, 320, 100, 50, 0.9, 0.1]
    output[:, 7] = [100, 100, 20, 20, 0.05, 0.8]
    original = decode_one(output, HeadLayout.ANCHOR_FREE, BOX, OPTIONS)
    transposed = decode_one(np.ascontiguousarray(output.T), HeadLayout.ANCHOR_FREE_T, BOX, OPTIONS)
    assert len(original) == 2
    np.testing.assert_array_equal(original.xyxy, transposed.xyxy)
    np.testing.assert_array_equal(original.class_id, transposed.class_id)


@pytest.mark.parametrize("shape", [(1, 1000), (1, 7, 7, 7), (1, 3, 3)])
def test_unknown_layout_is_a_clear_error(shape) -> None:
    with pytest.raises(OutputLayoutError, match="unknown detector output layout"):
        detect_layout(shape, 80)


def test_bad_postprocess_options() -> None:
    with pytest.raises(ConfigError, match=r"postprocess.conf: expected a number in \[0, 1\]"):
        PostprocessOptions(conf=1.5)
