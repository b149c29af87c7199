"""Letterbox geometry and its inverse on worked examples."""

from __future__ import annotations

import numpy as np
import pytest

from visionrt.preprocess import (
    InputLayout,
    boxes_to_input,
    boxes_to_source,
    compute_letterbox,
    letterbox_into,
)


@pytest.mark.parametrize(
    ("source_hw", "input_hw", "scale", "new_hw", "top", "left"),
    [
        ((576, 768), (640, 640), 640 / 768, (480, 640), 80, 0),  # vtest.avi into the demo model
        ((576, 768), (512, 640), 640 / 768, (480, 640), 16, 0),  # 16 px pads keep the grid
        ((480, 640), (640, 640), 1.0, (480, 640), 80, 0),
        ((1080, 1920), (640, 640), 1 / 3, (360, 640), 140, 0),
        ((500, 1000), (320, 320), 0.32, (160, 320), 80, 0),
        ((640, 480), (640, 640), 1.0, (640, 480), 0, 80),  # portrait pads left and right
        ((480, 641), (640, 640), 640 / 641, (479, 640), 80, 0),  # odd pad: extra row at bottom
    ],
)
def test_geometry(source_hw, input_hw, scale, new_hw, top, left) -> None:
    box = compute_letterbox(source_hw, input_hw)
    assert box.scale == pytest.approx(scale)
    assert box.new_hw == new_hw
    assert (box.top, box.left) == (top, left)


def test_box_round_trip_worked_example() -> None:
    box = compute_letterbox((576, 768), (640, 640))
    source = np.array([[120.0, 60.0, 240.0, 360.0]], np.float32)
    on_input = boxes_to_input(source, box)
    # x * 5/6, y * 5/6 + 80
    np.testing.assert_allclose(on_input, [[100.0, 130.0, 200.0, 380.0]], atol=1e-4)
    np.testing.assert_allclose(boxes_to_source(on_input, box), source, atol=1e-3)


def test_boxes_are_clipped_to_the_source_frame() -> None:
    box = compute_letterbox((576, 768), (640, 640))
    # A box reaching into the grey padding above and beyond the right edge.
    back = boxes_to_source(np.array([[-10.0, 40.0, 700.0, 300.0]], np.float32), box)
    np.testing.assert_allclose(back, [[0.0, 0.0, 768.0, 264.0]], atol=1e-3)


def test_letterbox_into_float_layout_pixels() -> None:
    image = np.zeros((576, 768, 3), np.uint8)
    image[..., 0], image[..., 1], image[..., 2] = 10, 20, 30  # B, G, R
    out = np.empty((3, 640, 640), np.float32)
    box = compute_letterbox(image.shape[:2], (640, 640))
    letterbox_into(image, out, box, InputLayout.NCHW_FLOAT)
    pad = 114 / 255
    np.testing.assert_allclose(out[:, :80], pad, atol=1e-6)  # top padding
    np.testing.assert_allclose(out[:, 560:], pad, atol=1e-6)  # bottom padding
    # Content is RGB scaled to [0, 1].
    np.testing.assert_allclose(
        out[:, 80:560].reshape(3, -1).mean(axis=1), [30 / 255, 20 / 255, 10 / 255], atol=1e-6
    )


def test_reused_buffer_keeps_padding_without_repaint() -> None:
    image = np.full((576, 768, 3), 200, np.uint8)
    out = np.empty((3, 640, 640), np.float32)
    box = compute_letterbox(image.shape[:2], (640, 640))
    letterbox_into(image, out, box, InputLayout.NCHW_FLOAT)
    first = out.copy()
    letterbox_into(np.full_like(image, 50), out, box, InputLayout.NCHW_FLOAT, fill_padding=False)
    np.testing.assert_array_equal(out[:, :80], first[:, :80])
    np.testing.assert_allclose(out[:, 80:560], 50 / 255, atol=1e-6)


def test_letterbox_into_uint8_layout_is_bgr_bytes() -> None:
    image = np.zeros((576, 768, 3), np.uint8)
    image[..., 0] = 7
    out = np.empty((640, 640, 3), np.uint8)
    letterbox_into(
        image, out, compute_letterbox(image.shape[:2], (640, 640)), InputLayout.NHWC_U8_BGR
    )
    assert out[0, 0].tolist() == [114, 114, 114]
    assert out[320, 320].tolist() == [7, 0, 0]


def test_a_letterbox_is_the_same_whatever_sequence_gives_the_sizes() -> None:
    # Sizes come as tuples, lists (a plan read from JSON) or NumPy arrays; the geometry is
    # computed once per size and holds plain ints.
    box = compute_letterbox((576, 768), (640, 640))
    assert compute_letterbox([576, 768], [640, 640]) == box
    assert compute_letterbox(np.array([576, 768]), (640, 640)) is box
    assert all(type(v) is int for v in (*box.source_hw, *box.input_hw))
