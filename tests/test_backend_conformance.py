"""One suite every backend usable here must pass, on real frames of the demo video.

FP32: raw outputs equal to the ONNX Runtime FP32 reference within a stated tolerance.
BF16/FP16: fidelity mAP50 ≥ 0.98, INT8: ≥ 0.90, on the first 200 frames (DESIGN.md's fidelity:
the reference's detections are the ground truth)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from visionrt.backends import BackendOptions, load_backend
from visionrt.backends.registry import find_row, unavailable_reason
from visionrt.bench import prepared_inputs
from visionrt.errors import ConfigError
from visionrt.fidelity import collect_detections, fidelity
from visionrt.preprocess import InputLayout

pytestmark = pytest.mark.slow
FIDELITY_FRAMES = 200

# Box coordinates are in input pixels (0-640), scores in [0, 1]. Measured worst cases on the demo
# model: OpenVINO f32 0.004 px / 2e-6, torch fp32 0.004 px / 2e-6.
FP32_TOLERANCE = {"box_px": 0.05, "score": 1e-4}


def _require(backend: str) -> None:
    reason = unavailable_reason(find_row(backend))
    if reason:
        pytest.skip(reason)


@pytest.fixture(scope="module")
def frames(demo_video: Path) -> list[np.ndarray]:
    return prepared_inputs(str(demo_video), (640, 640), InputLayout.NCHW_FLOAT, frames=8)


@pytest.fixture(scope="module")
def reference_raw(demo_model: Path, frames: list[np.ndarray]) -> list[np.ndarray]:
    with load_backend("onnxruntime", demo_model) as backend:
        return [backend.infer({"images": f})[0] for f in frames]


@pytest.fixture(scope="module")
def reference_detections(demo_model: Path, demo_video: Path):
    return collect_detections(demo_video, demo_model, frames=FIDELITY_FRAMES)


@pytest.mark.parametrize("backend", ["onnxruntime", "openvino", "torch"])
def test_fp32_outputs_equal_the_reference(backend, demo_model, frames, reference_raw) -> None:
    _require(backend)
    with load_backend(backend, demo_model, BackendOptions(precision="fp32")) as loaded:
        assert loaded.info.precision == "fp32"
        for tensor, expected in zip(frames, reference_raw, strict=True):
            got = loaded.infer({"images": tensor})[0]
            assert got.shape == expected.shape
            box_error = np.abs(got[:, :4] - expected[:, :4]).max()
            score_error = np.abs(got[:, 4:] - expected[:, 4:]).max()
            assert box_error < FP32_TOLERANCE["box_px"], f"{backend}: boxes off by {box_error}"
            assert score_error < FP32_TOLERANCE["score"], f"{backend}: scores off by {score_error}"


@pytest.mark.parametrize(("backend", "precision"), [("openvino", "bf16"), ("torch", "bf16")])
def test_reduced_precision_fidelity(
    backend, precision, demo_model, demo_video, reference_detections
) -> None:
    _require(backend)
    try:
        candidate = collect_detections(
            demo_video, demo_model, backend, BackendOptions(precision=precision), FIDELITY_FRAMES
        )
    except ConfigError as err:  # e.g. a CPU without bf16
        pytest.skip(str(err))
    report = fidelity(reference_detections, candidate)
    assert report.map50 >= 0.98, report


@pytest.fixture(scope="module")
def artifact_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("int8")


@pytest.mark.parametrize(
    ("target", "backend"), [("onnx-int8", "onnxruntime"), ("openvino-int8", "openvino")]
)
def test_int8_fidelity(
    target, backend, demo_model, demo_video, artifact_dir, reference_detections
) -> None:
    _require(backend)
    from visionrt.export import export_model

    # 32 calibration frames keep the test quick; `visionrt export` uses 300 by default.
    artifact = export_model(
        demo_model,
        target,
        demo_video,
        frames=32,
        out=artifact_dir,
        fidelity_frames=0,
        progress=False,
    )
    candidate = collect_detections(
        demo_video, artifact.path, backend, BackendOptions(precision="int8"), FIDELITY_FRAMES
    )
    report = fidelity(reference_detections, candidate)
    assert report.map50 >= 0.90, report
