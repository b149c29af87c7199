"""The pretrained demo detector on the real footage: people found, same as a plain ORT call."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import onnxruntime as ort
import pytest
from conftest import REFERENCE_FRAMES

from visionrt import Pipeline, SourceOptions
from visionrt.postprocess import HeadLayout, PostprocessOptions
from visionrt.postprocess.yolo import decode_one
from visionrt.preprocess import InputLayout, compute_letterbox, letterbox_into

pytestmark = pytest.mark.slow
FRAMES = REFERENCE_FRAMES  # 50


@pytest.fixture(scope="module")
def results(demo_results: list) -> list:
    """The session's run (conftest: a Pipeline on ONNX Runtime, the source's options default
    but max_frames), which the fidelity tests score against too."""
    return demo_results


def test_people_are_found_inside_the_frame(results) -> None:
    assert [r.frame.index for r in results] == list(range(FRAMES))
    with_people = sum(1 for r in results if len(r.detections) > 0)
    assert with_people >= 0.9 * FRAMES  # vtest.avi has pedestrians in every frame
    counts = [len(r.detections) for r in results]
    assert 2 <= np.median(counts) <= 20
    for result in results:
        xyxy = result.detections.xyxy
        assert (xyxy[:, 0] >= 0).all()
        assert (xyxy[:, 2] <= 768).all()
        assert (xyxy[:, 1] >= 0).all()
        assert (xyxy[:, 3] <= 576).all()
        assert (xyxy[:, 2] > xyxy[:, 0]).all()
        assert (xyxy[:, 3] > xyxy[:, 1]).all()
    assert results[0].class_names == ("Normal", "Fall")


def test_preprocessing_equals_a_plain_numpy_letterbox(demo_video: Path) -> None:
    import av

    with av.open(str(demo_video)) as container:
        image = next(container.decode(video=0)).to_ndarray(format="bgr24")
    plain = np.full((640, 640, 3), 114, np.uint8)
    plain[80:560] = cv2.resize(image, (640, 480), interpolation=cv2.INTER_LINEAR)
    expected = plain[:, :, ::-1].transpose(2, 0, 1).astype(np.float32) / 255.0
    ours = np.empty((3, 640, 640), np.float32)
    letterbox_into(
        image, ours, compute_letterbox(image.shape[:2], (640, 640)), InputLayout.NCHW_FLOAT
    )
    np.testing.assert_allclose(ours, expected, rtol=0, atol=1e-7)


def test_pipeline_equals_plain_onnxruntime(results, demo_model: Path) -> None:
    session = ort.InferenceSession(str(demo_model), providers=["CPUExecutionProvider"])
    box = compute_letterbox((576, 768), (640, 640))
    tensor = np.empty((1, 3, 640, 640), np.float32)
    for result in results[::10]:
        letterbox_into(result.frame.image, tensor[0], box, InputLayout.NCHW_FLOAT)
        raw = session.run(None, {"images": tensor})[0]
        expected = decode_one(raw[0], HeadLayout.ANCHOR_FREE, box, PostprocessOptions())
        assert len(expected) == len(result.detections)
        np.testing.assert_allclose(result.detections.xyxy, expected.xyxy, atol=1e-3)
        np.testing.assert_allclose(result.detections.confidence, expected.confidence, atol=1e-5)
        np.testing.assert_array_equal(result.detections.class_id, expected.class_id)


def test_onnxruntime_runs_the_model_at_512x640(results, demo_model: Path, demo_video: Path) -> None:
    from visionrt import BackendOptions
    from visionrt.fidelity import box_iou

    pipeline = Pipeline(
        [str(demo_video)],
        demo_model,
        "onnxruntime",
        BackendOptions(input_size=(512, 640)),
        source_options=SourceOptions(max_frames=10),
    )
    smaller = list(pipeline)
    pipeline.close()
    assert pipeline.task.input_hw == (512, 640)
    assert pipeline.task.backend.info.inputs[0].shape == (1, 3, 512, 640)
    for big, small in zip(results[:10], smaller, strict=True):
        # 16 px pads keep YOLO's grid where the 640 letterbox put it: the same people.
        assert abs(len(big.detections) - len(small.detections)) <= 1
        iou = box_iou(big.detections.xyxy, small.detections.xyxy)
        assert (iou.max(axis=1) > 0.8).mean() >= 0.8
