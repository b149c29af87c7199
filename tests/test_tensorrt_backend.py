"""The TensorRT backend: a clear error without TensorRT, a stable engine cache key, and (on a GPU
with TensorRT) engines that agree with ONNX Runtime."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from visionrt.backends import BackendOptions, load_backend
from visionrt.errors import BackendUnavailable

HAS_TENSORRT = importlib.util.find_spec("tensorrt") is not None


@pytest.mark.skipif(HAS_TENSORRT, reason="TensorRT is installed here")
@pytest.mark.parametrize("device", ["cuda", "cpu"])
def test_missing_tensorrt_names_the_extra(tiny_model: Path, device: str) -> None:
    with pytest.raises(BackendUnavailable) as caught:
        load_backend("tensorrt", tiny_model, BackendOptions(device=device))
    message = str(caught.value)
    assert "pip install 'visionrt[tensorrt]'" in message
    assert "\n" not in message
    assert isinstance(caught.value, ImportError)


def test_module_imports_without_tensorrt() -> None:
    from visionrt.backends.tensorrt import TensorRTBackend

    assert TensorRTBackend.name == "tensorrt"
    if not HAS_TENSORRT:
        assert "tensorrt" not in sys.modules


def test_engine_key_changes_with_what_changes_the_engine() -> None:
    from visionrt.backends.tensorrt import engine_key

    base = BackendOptions(precision="fp16")
    key = engine_key("ab" * 32, "10.3.0", "NVIDIA H100", base)
    assert key == engine_key("ab" * 32, "10.3.0", "NVIDIA H100", BackendOptions(precision="fp16"))
    assert key.startswith("abababababababab-trt10.3.0-fp16-")
    others = [
        engine_key("cd" * 32, "10.3.0", "NVIDIA H100", base),
        engine_key("ab" * 32, "10.4.0", "NVIDIA H100", base),
        engine_key("ab" * 32, "10.3.0", "NVIDIA L4", base),
        engine_key("ab" * 32, "10.3.0", "NVIDIA H100", BackendOptions(precision="fp32")),
        engine_key("ab" * 32, "10.3.0", "NVIDIA H100", BackendOptions(precision="fp16", batch=8)),
        engine_key(
            "ab" * 32, "10.3.0", "NVIDIA H100",
            BackendOptions(precision="fp16", settings={"workspace_mb": "1024"}),
        ),
    ]  # fmt: skip
    assert len({key, *others}) == len(others) + 1


def test_cache_dir_defaults_under_home_and_follows_options(tmp_path: Path) -> None:
    from visionrt.backends.tensorrt import cache_dir

    assert cache_dir(BackendOptions()) == Path.home() / ".cache" / "visionrt" / "trt"
    assert cache_dir(BackendOptions(cache_dir=tmp_path)) == tmp_path


@pytest.mark.tensorrt
@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.skipif(not HAS_TENSORRT, reason="needs TensorRT (pip install 'visionrt[tensorrt]')")
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_engine_agrees_with_onnxruntime(
    demo_model: Path, demo_video: Path, tmp_path: Path, precision: str
) -> None:
    import onnxruntime as ort

    from visionrt.bench import prepared_inputs
    from visionrt.preprocess import InputLayout

    frames = prepared_inputs(str(demo_video), (640, 640), InputLayout.NCHW_FLOAT, frames=3)
    options = BackendOptions(device="cuda", precision=precision, cache_dir=tmp_path)
    backend = load_backend("tensorrt", demo_model, options)
    engines = list(tmp_path.glob("*.engine"))
    assert len(engines) == 1
    again = load_backend("tensorrt", demo_model, options)  # from the cache, not rebuilt
    assert list(tmp_path.glob("*.engine")) == engines
    session = ort.InferenceSession(str(demo_model), providers=["CPUExecutionProvider"])
    for x in frames:
        expected = session.run(None, {"images": x})[0]
        for runner in (backend, again):
            (got,) = runner.infer({"images": x})
            assert got.shape == expected.shape
            # scores; fp16 boxes are compared by IoU in the fidelity suite, not here
            atol = 1e-3 if precision == "fp32" else 2e-2
            np.testing.assert_allclose(got[:, 4:], expected[:, 4:], atol=atol, rtol=0)
