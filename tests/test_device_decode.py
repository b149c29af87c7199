"""Decoding and NMS on the device (torch, run here on CPU tensors) against the host decode."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import visionrt.postprocess.device as device_decode  # noqa: E402
from visionrt.postprocess.device import decode_batch_device  # noqa: E402
from visionrt.postprocess.yolo import HeadLayout, PostprocessOptions, decode_one  # noqa: E402
from visionrt.preprocess import compute_letterbox  # noqa: E402
from visionrt.types import Letterbox  # noqa: E402

pytestmark = pytest.mark.torch


def crowded(layout: HeadLayout, images: int, anchors: int, seed: int) -> np.ndarray:
    """Raw outputs whose boxes sit on a coarse grid with jitter: many overlap, so NMS has long
    chains to settle; three classes."""
    rng = np.random.default_rng(seed)
    centre = np.round(rng.uniform(0, 640, (2, images, anchors)) / 40) * 40
    centre += rng.normal(0, 3, centre.shape)
    size = rng.uniform(10, 80, (2, images, anchors))
    scores = rng.uniform(0, 1, (images, 3, anchors)) ** 3
    geometry = np.stack([centre[0], centre[1], size[0], size[1]], 1)
    if layout is HeadLayout.END2END:
        corner = centre - size / 2
        rows = [corner[0], corner[1], corner[0] + size[0], corner[1] + size[1]]
        rows += [rng.uniform(0, 1, (images, anchors)), rng.integers(0, 3, (images, anchors))]
        return np.stack(rows, 2).astype(np.float32)
    if layout is HeadLayout.YOLOV5:
        objectness = rng.uniform(0, 1, (images, 1, anchors))
        return (
            np.concatenate([geometry, objectness, scores], 1).transpose(0, 2, 1).astype(np.float32)
        )
    table = np.concatenate([geometry, scores], 1).astype(np.float32)
    return table.transpose(0, 2, 1).copy() if layout is HeadLayout.ANCHOR_FREE_T else table


def letterboxes(images: int, seed: int) -> list[Letterbox]:
    rng = np.random.default_rng(seed)
    return [
        compute_letterbox((int(rng.integers(100, 1000)), int(rng.integers(100, 1000))), (640, 640))
        for _ in range(images)
    ]


def assert_same_as_host(
    output: np.ndarray, layout: HeadLayout, boxes: list[Letterbox], options: PostprocessOptions
) -> list[np.ndarray]:
    rows = decode_batch_device(torch.from_numpy(output), layout, boxes, options)
    assert len(rows) == len(boxes)
    for image, box in enumerate(boxes):
        host = decode_one(output[image], layout, box, options)
        assert rows[image].shape == (len(host), 6)
        assert rows[image].dtype == np.float32
        np.testing.assert_allclose(rows[image][:, :4], host.xyxy, atol=1e-4)
        np.testing.assert_array_equal(rows[image][:, 4], host.confidence)
        np.testing.assert_array_equal(rows[image][:, 5].astype(np.int32), host.class_id)
    return rows


OPTIONS = [
    PostprocessOptions(),
    PostprocessOptions(conf=0.05, iou=0.5),
    PostprocessOptions(conf=0.1, agnostic=True),
    PostprocessOptions(classes=(1,), max_det=7),
    PostprocessOptions(conf=0.9),
    PostprocessOptions(conf=1.0),  # nothing passes
]


@pytest.mark.parametrize("layout", list(HeadLayout))
@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: f"conf{o.conf}-iou{o.iou}")
def test_crowded_outputs_decode_to_the_host_boxes(
    layout: HeadLayout, options: PostprocessOptions
) -> None:
    anchors = 300 if layout is HeadLayout.END2END else 600
    assert_same_as_host(
        crowded(layout, 3, anchors, seed=anchors), layout, letterboxes(3, 1), options
    )


def test_images_are_split_into_groups_when_the_pairs_do_not_fit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(device_decode, "MAX_PAIRS", 50_000)  # a group of one image at a time
    output = crowded(HeadLayout.ANCHOR_FREE, 4, 600, seed=3)
    assert_same_as_host(
        output, HeadLayout.ANCHOR_FREE, letterboxes(4, 2), PostprocessOptions(conf=0.1)
    )


def test_a_batch_padded_past_its_images_decodes_only_the_images() -> None:
    output = crowded(HeadLayout.ANCHOR_FREE, 4, 200, seed=4)
    boxes = letterboxes(2, 3)
    rows = decode_batch_device(
        torch.from_numpy(output), HeadLayout.ANCHOR_FREE, boxes, PostprocessOptions()
    )
    assert len(rows) == 2
    assert (
        decode_batch_device(
            torch.from_numpy(output), HeadLayout.ANCHOR_FREE, [], PostprocessOptions()
        )
        == []
    )


def test_boxes_are_clipped_to_the_source_frame() -> None:
    output = np.zeros((1, 6, 4), np.float32)
    output[0, :, 0] = [5, 5, 40, 40, 0.9, 0.0]  # reaches past the top-left corner
    box = compute_letterbox((300, 600), (640, 640))
    rows = assert_same_as_host(output, HeadLayout.ANCHOR_FREE, [box], PostprocessOptions())
    assert rows[0][0, 0] == 0
    assert rows[0][0, 1] == 0


def test_half_precision_outputs_decode_as_their_float_values() -> None:
    output = crowded(HeadLayout.ANCHOR_FREE, 2, 300, seed=6).astype(np.float16)
    boxes = letterboxes(2, 5)
    rows = decode_batch_device(
        torch.from_numpy(output), HeadLayout.ANCHOR_FREE, boxes, PostprocessOptions()
    )
    for image, box in enumerate(boxes):
        host = decode_one(
            output[image].astype(np.float32), HeadLayout.ANCHOR_FREE, box, PostprocessOptions()
        )
        np.testing.assert_allclose(rows[image][:, :4], host.xyxy, atol=1e-3)


@pytest.mark.slow
def test_the_demo_detectors_outputs_decode_to_the_host_boxes(
    demo_model: Path, demo_video: Path
) -> None:
    import onnxruntime

    from visionrt.bench.measure import prepared_inputs
    from visionrt.preprocess import InputLayout

    inputs = prepared_inputs(str(demo_video), (640, 640), InputLayout.NCHW_FLOAT, frames=6)
    session = onnxruntime.InferenceSession(str(demo_model), providers=["CPUExecutionProvider"])
    output = np.concatenate([session.run(None, {"images": batch})[0] for batch in inputs])
    boxes = [compute_letterbox((576, 768), (640, 640))] * len(inputs)
    for conf in (0.25, 0.1, 0.001):  # the run's, the tracker's, an mAP evaluation's
        rows = assert_same_as_host(
            output, HeadLayout.ANCHOR_FREE, boxes, PostprocessOptions(conf=conf)
        )
        assert sum(len(r) for r in rows) > 0
