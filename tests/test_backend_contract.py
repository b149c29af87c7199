"""The backend contract, on every row of the backend registry usable on this machine (null
included): `info` says what runs and describes the outputs `infer` gives, `close` twice is
fine, and the same file loads again after a close with the same info and outputs. Rows whose
package or device is missing here are skipped with the reason. On the tiny generated detector,
so the suite stays fast; numerical agreement on the real model is test_backend_conformance's."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from visionrt.backends import Backend, BackendOptions, load_backend
from visionrt.backends.registry import ROWS, BackendRow, unavailable_reason
from visionrt.types import TensorSpec

# The tiny detector's fixed output (conftest.write_tiny_detector): one person box at (32, 32),
# 20×10, score 0.9, as [1, 6, 8] rows (cx, cy, w, h, class 0, class 1) padded with empty ones.
TINY_FIRST_ROW = [32.0, 32.0, 20.0, 10.0, 0.9, 0.0]


def _device(row: BackendRow) -> str:
    """The device this row runs on here: the CPU where it can, else a CUDA GPU (or a skip)."""
    if "cpu" in row.devices:
        return "cpu"
    if "cuda" in row.devices and Path("/dev/nvidia0").exists():
        return "cuda"
    pytest.skip(f"backend '{row.name}' runs on {', '.join(row.devices)}: none of them here")


@pytest.fixture(params=ROWS, ids=[row.name for row in ROWS])
def row(request: pytest.FixtureRequest) -> BackendRow:
    found: BackendRow = request.param
    reason = unavailable_reason(found)
    if reason is not None:
        pytest.skip(reason)
    return found


def _fits(spec: TensorSpec, array: np.ndarray) -> bool:
    """`array` is what `spec` describes: its rank, its static sizes, its dtype."""
    static = all(d is None or not isinstance(d, int) or d <= 0 or d == n
                 for d, n in zip(spec.shape, array.shape, strict=True))  # fmt: skip
    return len(spec.shape) == array.ndim and static and np.dtype(spec.dtype) == array.dtype


def _run(backend: Backend) -> list[np.ndarray]:
    (image,) = backend.info.inputs
    return [np.asarray(out) for out in backend.infer({image.name: np.zeros((1, 3, 64, 64), "f4")})]


def test_info_describes_what_runs(row: BackendRow, tiny_model: Path) -> None:
    device = _device(row)
    with load_backend(row.name, tiny_model, BackendOptions(device=device)) as backend:
        info = backend.info
        outputs = _run(backend)
    assert info.runtime == row.name
    assert info.version
    assert info.device.split(":")[0] == device  # the device used: the one asked for
    assert info.precision == ("none" if row.name == "null" else "fp32")
    (image,) = info.inputs
    assert image.name == "images"
    assert len(image.shape) == 4
    assert tuple(image.shape[2:]) in ((64, 64), (None, None))
    assert [spec.name for spec in info.outputs] == ["output0"]
    assert len(outputs) == len(info.outputs)
    for spec, output in zip(info.outputs, outputs, strict=True):
        assert _fits(spec, output), (spec, output.shape, output.dtype)
    assert outputs[0].shape == (1, 6, 8)
    # A runtime runs the model: its constant comes out. The null backend runs nothing: zeros.
    expected = np.zeros(6) if row.name == "null" else TINY_FIRST_ROW
    np.testing.assert_allclose(outputs[0][0, :, 0], expected, rtol=1e-3, atol=1e-3)


def test_close_twice_then_a_second_load(row: BackendRow, tiny_model: Path) -> None:
    options = BackendOptions(device=_device(row))
    first = load_backend(row.name, tiny_model, options)
    info, outputs = first.info, _run(first)
    first.close()
    first.close()  # twice is fine
    with load_backend(row.name, tiny_model, options) as again:
        assert again.info == info
        for before, after in zip(outputs, _run(again), strict=True):
            np.testing.assert_array_equal(before, after)
    again.close()  # after the `with` closed it: still fine
