"""One suite every backend usable here must pass, on real frames of the demo video.

FP32: raw outputs equal to the ONNX Runtime FP32 reference within a stated tolerance.
BF16: fidelity mAP50 ≥ 0.96 where the CPU has BF16 instructions (refused elsewhere, checked
here too); INT8: ≥ 0.90. Fidelity as in docs/benchmarks.md (the reference's detections are the
ground truth), on the first 50 frames rather than 200 to stay short on slower CPUs."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from visionrt import hardware
from visionrt.backends import BackendOptions, load_backend
from visionrt.backends.registry import find_row, unavailable_reason
from visionrt.bench import prepared_inputs
from visionrt.bench.reference import collect_detections
from visionrt.errors import BackendUnavailable
from visionrt.fidelity import fidelity
from visionrt.preprocess import InputLayout

FIDELITY_FRAMES = 50
# mAP50 measured on the 2-core Zen 4 machine (family 25 model 17: AVX-512, VNNI, BF16), first
# 50 / 100 frames (324 / 667 reference boxes): bf16 torch 0.989 / 0.994, openvino 0.990 / 0.995;
# INT8 (32 calibration frames) onnx-int8 0.970 / 0.974, openvino-int8 0.984 / 0.984. INT8 runs
# its float parts in f32 and uses VNNI there and on Ice Lake alike (no AMX on either), so the
# INT8 bounds hold on both. The session's INT8 artifacts (conftest, 16 calibration frames), on a
# 2-core AMD EPYC with BF16 and with it hidden alike, first 50 frames: onnx-int8 0.965,
# openvino-int8 0.980.
MIN_MAP50 = {"bf16": 0.96, "int8": 0.90}
# A marker, not a skip in the body: a skipped test then never computes the reference fixture.
needs_bf16 = pytest.mark.skipif(
    not hardware.cpu_has_bf16(),
    reason="this CPU has no BF16 instructions (AVX512_BF16 or AMX): bf16 is refused",
)

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
def reference_detections(demo_reference: list) -> list:
    assert len(demo_reference) >= FIDELITY_FRAMES
    return demo_reference[:FIDELITY_FRAMES]


@pytest.mark.slow
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


@pytest.mark.slow
@needs_bf16
@pytest.mark.parametrize(("backend", "precision"), [("openvino", "bf16"), ("torch", "bf16")])
def test_reduced_precision_fidelity(
    backend, precision, demo_model, demo_video, reference_detections
) -> None:
    _require(backend)
    candidate = collect_detections(
        demo_video, demo_model, backend, BackendOptions(precision=precision), FIDELITY_FRAMES
    )
    report = fidelity(reference_detections, candidate)
    assert report.map50 >= MIN_MAP50[precision], report


@pytest.mark.parametrize("backend", ["openvino", "torch"])
def test_bf16_without_bf16_instructions_is_refused(
    backend: str, tiny_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Runs on every CPU: emulated bf16 (torch) fell below the fidelity bound on Ice Lake, and
    # OpenVINO refused it there in its own words; both now refuse it the same way.
    _require(backend)
    monkeypatch.setattr(hardware, "cpu_has_bf16", lambda: False)
    with pytest.raises(BackendUnavailable, match=r"bf16 on cpu needs BF16 instructions") as caught:
        load_backend(backend, tiny_model, BackendOptions(precision="bf16"))
    message = str(caught.value)
    assert message.startswith(backend)
    assert "use fp32, or int8 via `visionrt export`" in message
    assert "\n" not in message
    assert caught.value.exit_code == 5


# The session's artifacts (conftest; test_export tests their graphs).
ARTIFACTS = {"onnx-int8": "onnx_int8", "openvino-int8": "openvino_int8"}


@pytest.mark.slow
@pytest.mark.parametrize(
    ("target", "backend"), [("onnx-int8", "onnxruntime"), ("openvino-int8", "openvino")]
)
def test_int8_fidelity(target, backend, demo_video, reference_detections, request) -> None:
    _require(backend)
    if target == "openvino-int8" and importlib.util.find_spec("nncf") is None:
        pytest.skip("openvino-int8 export needs nncf: pip install 'visionrt[openvino]'")
    # 16 calibration frames keep the export quick; `visionrt export` uses 300 by default.
    artifact = request.getfixturevalue(ARTIFACTS[target])
    candidate = collect_detections(
        demo_video, artifact.path, backend, BackendOptions(precision="int8"), FIDELITY_FRAMES
    )
    report = fidelity(reference_detections, candidate)
    assert report.map50 >= MIN_MAP50["int8"], report
