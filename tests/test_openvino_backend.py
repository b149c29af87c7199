"""OpenVINO backend: agrees with ONNX Runtime FP32, folds preprocessing, overlaps requests."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from visionrt import hardware
from visionrt.backends import Backend, BackendOptions, load_backend
from visionrt.errors import ConfigError, ModelLoadError
from visionrt.fidelity import box_iou
from visionrt.models import resolve_model
from visionrt.postprocess import PostprocessOptions, detect_layout
from visionrt.postprocess.yolo import decode_one
from visionrt.preprocess import InputLayout, compute_letterbox
from visionrt.types import Detections, anchor_count

pytest.importorskip("openvino")
pytestmark = pytest.mark.openvino

# Measured on 10 vtest.avi frames (OpenVINO 2026.4 f32 vs ONNX Runtime 1.2x CPU): box coordinates
# differ by at most 0.004 px and class scores by 2e-6; the bounds leave ~10× headroom.
BOX_TOLERANCE_PX = 0.05
SCORE_TOLERANCE = 1e-4
FRAMES = 10
SOURCE_HW = (576, 768)  # vtest.avi


@pytest.fixture(scope="module")
def model(demo_model: Path) -> Path:
    """The demo YOLOv8s export (conftest skips with a reason when it is not installed)."""
    return demo_model


@pytest.fixture(scope="module")
def video(demo_video: Path) -> str:
    """vtest.avi (conftest skips with a reason when opencv-doc is not installed)."""
    return str(demo_video)


def _prepared(video: str, hw: tuple[int, int], layout: InputLayout) -> list[np.ndarray]:
    from visionrt.bench import prepared_inputs

    return prepared_inputs(video, hw, layout, frames=FRAMES)


@pytest.fixture(scope="module")
def frames(video: str) -> list[np.ndarray]:
    return _prepared(video, (640, 640), InputLayout.NCHW_FLOAT)


@pytest.fixture(scope="module")
def reference(model: Path, frames: list[np.ndarray]) -> list[np.ndarray]:
    """ONNX Runtime FP32 raw outputs, the accuracy reference."""
    with load_backend("onnxruntime", model, BackendOptions()) as backend:
        return [backend.infer({"images": x})[0] for x in frames]


@pytest.fixture(scope="module")
def fp32(model: Path) -> Backend:
    return load_backend("openvino", model, BackendOptions(precision="fp32"))


def _assert_close(output: np.ndarray, expected: np.ndarray) -> None:
    assert output.shape == expected.shape
    box_diff = float(np.abs(output[:, :4] - expected[:, :4]).max())
    score_diff = float(np.abs(output[:, 4:] - expected[:, 4:]).max())
    assert box_diff < BOX_TOLERANCE_PX, f"box coordinates differ by {box_diff} px"
    assert score_diff < SCORE_TOLERANCE, f"scores differ by {score_diff}"


def _detect(output: np.ndarray, input_hw: tuple[int, int]) -> Detections:
    head = detect_layout(list(output.shape), 2)
    return decode_one(output[0], head, compute_letterbox(SOURCE_HW, input_hw), PostprocessOptions())


def test_info_says_what_runs(fp32: Backend) -> None:
    info = fp32.info
    assert (info.runtime, info.device, info.precision) == ("openvino", "cpu", "fp32")
    assert info.inputs[0].shape == (1, 3, 640, 640)
    assert info.inputs[0].dtype == "float32"
    assert info.outputs[0].shape == (1, 6, 8400)
    assert info.details["hint"] == "latency"
    assert info.details["nireq"] == fp32.concurrency == 1


def test_threads_left_unpinned_when_asked(model: Path) -> None:
    """A cluster's workers share a node: OpenVINO, which pins each process's threads from the
    first core, is told not to (two 1-CPU workers on a 2-core node otherwise ran on one)."""
    shared = load_backend("openvino", model, BackendOptions(threads=1, pin_threads=False))
    try:
        assert shared.info.details["pinned"] is False
    finally:
        shared.close()


def test_fp32_matches_onnxruntime(
    fp32: Backend, frames: list[np.ndarray], reference: list[np.ndarray]
) -> None:
    for x, expected in zip(frames, reference, strict=True):
        _assert_close(fp32.infer({"images": x})[0], expected)


def test_outputs_are_not_overwritten_by_the_next_call(
    fp32: Backend, frames: list[np.ndarray]
) -> None:
    first = fp32.infer({"images": frames[0]})[0]
    kept = first.copy()
    fp32.infer({"images": frames[1]})
    np.testing.assert_array_equal(first, kept)


def test_folded_preprocessing_gives_the_same_detections(
    model: Path, video: str, reference: list[np.ndarray]
) -> None:
    raw = _prepared(video, (640, 640), InputLayout.NHWC_U8_BGR)
    options = BackendOptions(precision="fp32", fold_preprocess=True)
    with load_backend("openvino", model, options) as backend:
        spec = backend.info.inputs[0]
        assert (spec.shape, spec.dtype) == ((1, 640, 640, 3), "uint8")
        found = 0
        for x, expected in zip(raw, reference, strict=True):
            folded = _detect(backend.infer({spec.name: x})[0], (640, 640))
            host = _detect(expected, (640, 640))
            found += len(host)
            assert len(folded) == len(host)
            np.testing.assert_allclose(folded.xyxy, host.xyxy, atol=1.0)
            np.testing.assert_array_equal(folded.class_id, host.class_id)
    assert found > 0, "the reference finds nobody: nothing was compared"


def test_throughput_requests_overlap_and_stay_correct(
    model: Path, frames: list[np.ndarray], reference: list[np.ndarray]
) -> None:
    options = BackendOptions(precision="fp32", settings={"hint": "throughput", "requests": "3"})
    with load_backend("openvino", model, options) as backend:
        assert backend.concurrency == 3
        assert backend.info.details["streams"] >= 1
        with ThreadPoolExecutor(4) as pool:  # more threads than requests: some must wait
            outputs = list(pool.map(lambda x: backend.infer({"images": x})[0], frames))
    for output, expected in zip(outputs, reference, strict=True):
        _assert_close(output, expected)


def test_a_resized_model_runs(model: Path, video: str, tmp_path: Path) -> None:
    resized = resolve_model(model, (512, 640), cache_dir=tmp_path).path
    options = BackendOptions(precision="fp32", input_size=(512, 640))
    backend = load_backend("openvino", resized, options)
    assert backend.info.inputs[0].shape == (1, 3, 512, 640)
    assert backend.info.outputs[0].shape == (1, 6, anchor_count(512, 640))
    assert backend.info.details["model"] == str(resized)
    # 16 px pads keep the stride-32 grid where the 640 letterbox has it: same people found.
    small = _prepared(video, (512, 640), InputLayout.NCHW_FLOAT)[:3]
    full_size = _prepared(video, (640, 640), InputLayout.NCHW_FLOAT)[:3]
    with load_backend("openvino", model, BackendOptions(precision="fp32")) as full:
        for x_small, x_full in zip(small, full_size, strict=True):
            near = _detect(backend.infer({"images": x_small})[0], (512, 640))
            far = _detect(full.infer({"images": x_full})[0], (640, 640))
            assert len(far) > 0
            assert (box_iou(far.xyxy, near.xyxy).max(axis=1) > 0.9).all()
    backend.close()


def test_pipeline_runs_openvino_in_order(model: Path, video: str) -> None:
    from visionrt.pipeline import Pipeline
    from visionrt.sources import SourceOptions

    options = BackendOptions(
        precision="fp32", fold_preprocess=True, settings={"hint": "throughput", "requests": "2"}
    )
    pipeline = Pipeline(
        [video], model, "openvino", options, source_options=SourceOptions(max_frames=20)
    )
    try:
        assert pipeline.task.backend.concurrency == 2
        assert pipeline.task.layout is InputLayout.NHWC_U8_BGR
        indices = [result.frame.index for result in pipeline]
    finally:
        pipeline.close()
    assert indices == list(range(20))


@pytest.mark.parametrize(
    ("options", "error", "match"),
    [
        (BackendOptions(settings={"hint": "fastest"}), ConfigError, "latency or throughput"),
        (BackendOptions(settings={"requests": "0"}), ConfigError, "requests"),
        (BackendOptions(settings={"nireq": "2"}), ConfigError, "nireq"),
        (BackendOptions(precision="int8"), ConfigError, "not quantized"),
        (BackendOptions(batch=2), ConfigError, "static batch"),
    ],
    ids=["bad-hint", "zero-requests", "unknown-setting", "int8-float-model", "static-batch"],
)
def test_bad_options_are_refused(
    model: Path, options: BackendOptions, error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        load_backend("openvino", model, options)


@pytest.mark.skipif(not hardware.cpu_has_bf16(), reason="no BF16 instructions: bf16 is refused")
def test_bf16_is_read_back_and_finds_the_same_people(
    model: Path, frames: list[np.ndarray], reference: list[np.ndarray]
) -> None:
    with load_backend("openvino", model, BackendOptions(precision="bf16")) as backend:
        assert backend.info.precision == "bf16"
        for x, expected in zip(frames[:3], reference, strict=False):
            got = _detect(backend.infer({"images": x})[0], (640, 640))
            want = _detect(expected, (640, 640))
            assert len(want) > 0, "the reference finds nobody: nothing would be compared"
            assert len(got) > 0
            overlap = box_iou(want.xyxy, got.xyxy)
            same_class = want.class_id[:, None] == got.class_id[None, :]
            assert (np.where(same_class, overlap, 0.0).max(axis=1) > 0.9).all()


def test_missing_precision_support_is_explained(model: Path) -> None:
    import openvino as ov

    capabilities = ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")
    if "FP16" in capabilities:
        pytest.skip("this CPU runs f16; nothing to refuse")
    with pytest.raises(ConfigError, match="lacks FP16"):
        load_backend("openvino", model, BackendOptions(precision="fp16"))


def test_unreadable_model_names_the_path(tmp_path: Path) -> None:
    bad = tmp_path / "broken.onnx"
    bad.write_bytes(b"not a model")
    with pytest.raises(ModelLoadError, match=r"broken\.onnx"):
        load_backend("openvino", bad)
