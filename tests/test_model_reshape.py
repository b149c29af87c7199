"""reshape_detector_onnx: regenerated anchors match Ultralytics', reshaped models run and agree."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from visionrt.errors import ConfigError, ModelLoadError
from visionrt.model_reshape import anchor_count, make_anchors, reshape_detector_onnx

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402


def _run(path: Path, image: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: image})[0]


def _toy_head(path: Path, height: int, width: int, pixels: bool = False) -> Path:
    """A detector-shaped toy: three strided convs, flatten, a reshape to [1, 2, N], then
    `(zeros + anchors) * strides`, so its output is the anchor centres times the strides.
    `pixels` stores the anchor centres in pixels instead of grid units (both exports exist)."""
    count = anchor_count(height, width)
    points, strides = make_anchors(height, width)
    nodes, inits, parts = [], [], []
    for stride in (8, 16, 32):
        weight = np.zeros((2, 3, stride, stride), np.float32)
        inits.append(numpy_helper.from_array(weight, f"w{stride}"))
        nodes.append(
            helper.make_node("Conv", ["x", f"w{stride}"], [f"c{stride}"], strides=[stride] * 2)
        )
        nodes.append(helper.make_node("Reshape", [f"c{stride}", "flat"], [f"r{stride}"]))
        parts.append(f"r{stride}")
    inits += [
        numpy_helper.from_array(np.array([1, 2, -1], np.int64), "flat"),
        numpy_helper.from_array(np.array([1, 2, count], np.int64), "shape"),
        numpy_helper.from_array((points * strides if pixels else points)[None], "anchors"),
        numpy_helper.from_array(strides, "strides"),
    ]
    nodes += [
        helper.make_node("Concat", parts, ["cat"], axis=2),
        helper.make_node("Reshape", ["cat", "shape"], ["grid"]),
        helper.make_node("Add", ["grid", "anchors"], ["centres"]),
        helper.make_node("Mul", ["centres", "strides"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "toy",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, height, width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, count])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def test_make_anchors_reproduces_the_exported_640_constants(demo_model: Path) -> None:
    model = onnx.load(str(demo_model))
    constants = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    grids = [v for v in constants.values() if v.shape == (1, 2, 8400)]
    rows = [v for v in constants.values() if v.shape == (1, 8400)]
    points, strides = make_anchors(640, 640)
    assert grids, "expected the anchor grid constants in the demo export"
    assert len(rows) == 1
    for grid in grids:
        np.testing.assert_array_equal(grid[0], points)  # grid units, exactly
    np.testing.assert_array_equal(rows[0], strides)


@pytest.mark.parametrize("pixels", [False, True], ids=["grid-units", "pixels"])
@pytest.mark.parametrize(
    ("height", "width"), [(64, 64), (96, 128), (128, 64)], ids=["same", "wider", "taller"]
)
def test_toy_head_outputs_the_new_anchor_centres(
    tmp_path: Path, height: int, width: int, pixels: bool
) -> None:
    src = _toy_head(tmp_path / "toy.onnx", 64, 64, pixels)
    dst = reshape_detector_onnx(src, height, width, tmp_path / "toy-new.onnx")
    output = _run(dst, np.zeros((1, 3, height, width), np.float32))
    points, strides = make_anchors(height, width)
    expected = points * strides * strides if pixels else points * strides
    np.testing.assert_array_equal(output[0], expected)
    assert onnx.load(str(dst)).graph.output[0].type.tensor_type.shape.dim[2].dim_value == len(
        strides[0]
    )


def test_640_rewrite_is_identical(demo_model: Path, tmp_path: Path) -> None:
    dst = reshape_detector_onnx(demo_model, 640, 640, tmp_path / "same.onnx")
    image = np.random.default_rng(0).random((1, 3, 640, 640), dtype=np.float32)
    np.testing.assert_array_equal(_run(dst, image), _run(demo_model, image))


@pytest.mark.parametrize(("height", "width"), [(512, 640), (480, 640)])
def test_other_heights_run(demo_model: Path, tmp_path: Path, height: int, width: int) -> None:
    dst = reshape_detector_onnx(demo_model, height, width, tmp_path / "new.onnx")
    image = np.random.default_rng(1).random((1, 3, height, width), dtype=np.float32)
    assert _run(dst, image).shape == (1, 6, anchor_count(height, width))


@pytest.mark.parametrize(("height", "width"), [(500, 640), (640, 16), (0, 640)])
def test_sizes_not_multiple_of_32_are_refused(tmp_path: Path, height: int, width: int) -> None:
    src = _toy_head(tmp_path / "toy.onnx", 64, 64)
    with pytest.raises(ConfigError, match="multiples of 32"):
        reshape_detector_onnx(src, height, width, tmp_path / "out.onnx")


def test_unknown_anchor_dependent_constant_is_named(tmp_path: Path) -> None:
    src = _toy_head(tmp_path / "toy.onnx", 64, 64)
    model = onnx.load(str(src))
    strange = np.ones((3, anchor_count(64, 64)), np.float32)
    model.graph.initializer.append(numpy_helper.from_array(strange, "mystery"))
    onnx.save(model, str(src))
    with pytest.raises(ModelLoadError, match="mystery"):
        reshape_detector_onnx(src, 96, 64, tmp_path / "out.onnx")
