"""reshape_detector_onnx and rebatch_onnx: regenerated anchors match Ultralytics', reshaped and
rebatched models run and agree with the original."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import write_toy_head

from visionrt.errors import ConfigError, ModelLoadError
from visionrt.models import make_anchors, reshape_detector_onnx
from visionrt.types import anchor_count

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402


def _run(path: Path, image: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: image})[0]


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
    src = write_toy_head(tmp_path / "toy.onnx", 64, 64, pixels)
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
    src = write_toy_head(tmp_path / "toy.onnx", 64, 64)
    with pytest.raises(ConfigError, match="multiples of 32"):
        reshape_detector_onnx(src, height, width, tmp_path / "out.onnx")


def test_unknown_anchor_dependent_constant_is_named(tmp_path: Path) -> None:
    src = write_toy_head(tmp_path / "toy.onnx", 64, 64)
    model = onnx.load(str(src))
    strange = np.ones((3, anchor_count(64, 64)), np.float32)
    model.graph.initializer.append(numpy_helper.from_array(strange, "mystery"))
    onnx.save(model, str(src))
    with pytest.raises(ModelLoadError, match="mystery"):
        reshape_detector_onnx(src, 96, 64, tmp_path / "out.onnx")


# --- rebatch_onnx: a model with its batch axis fixed at 1 run at batch N ---

# Batched and one-by-one outputs of the same runtime, fp32 (ONNX Runtime gave identical outputs
# here; other CPUs may block the convolutions differently): box columns within 1e-4 of the
# 640 px output scale, class scores (0-1) within 1e-5.
BATCH_BOX_ATOL = 1e-4 * 640
BATCH_SCORE_ATOL = 1e-5
SPREAD_FRAMES = (0, 60, 120, 180)  # different scenes of vtest.avi, not near-copies


def _assert_rows_equal(batched: np.ndarray, singles: list[np.ndarray]) -> None:
    expected = np.concatenate(singles)
    assert batched.shape == expected.shape
    np.testing.assert_allclose(batched[:, :4], expected[:, :4], rtol=0, atol=BATCH_BOX_ATOL)
    np.testing.assert_allclose(batched[:, 4:], expected[:, 4:], rtol=0, atol=BATCH_SCORE_ATOL)


def _spread_frames(video: Path, input_hw: tuple[int, int]) -> list[np.ndarray]:
    """Frames SPREAD_FRAMES of `video`, letterboxed as the pipeline does: (1, 3, H, W) each."""
    from visionrt.preprocess import InputLayout, compute_letterbox, letterbox_into
    from visionrt.sources import SourceOptions, open_source

    source = open_source(
        str(video), 0, SourceOptions(mode="file", max_frames=SPREAD_FRAMES[-1] + 1)
    )
    rows = []
    try:
        for frame in source.frames():
            if frame.index in SPREAD_FRAMES:
                box = compute_letterbox(frame.image.shape[:2], input_hw)
                row = np.empty((1, 3, *input_hw), np.float32)
                letterbox_into(frame.image, row[0], box, InputLayout.NCHW_FLOAT)
                rows.append(row)
    finally:
        source.close()
    assert len(rows) == len(SPREAD_FRAMES)
    return rows


@pytest.fixture(scope="module")
def model_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("model-cache")


@pytest.fixture(scope="module")
def any_batch_demo(demo_model: Path, model_cache: Path) -> Path:
    from visionrt.models import batched_model

    return batched_model(demo_model, model_cache)


def test_rebatched_demo_names_its_rewrites_and_its_axis(any_batch_demo: Path) -> None:
    model = onnx.load(str(any_batch_demo))
    for info in (model.graph.input[0], model.graph.output[0]):
        assert info.type.tensor_type.shape.dim[0].dim_param == "batch"
    # The five Reshapes of the YOLOv8 head (three per-level flattens, the two DFL ones).
    assert model.doc_string.count("Reshape node") == 5


def test_rebatched_demo_at_4_equals_4_single_runs(
    demo_model: Path, demo_video: Path, any_batch_demo: Path
) -> None:
    rows = _spread_frames(demo_video, (640, 640))
    singles = [_run(demo_model, row) for row in rows]
    _assert_rows_equal(_run(any_batch_demo, np.concatenate(rows)), singles)


@pytest.mark.openvino
def test_rebatched_demo_through_openvino(
    demo_model: Path, demo_video: Path, any_batch_demo: Path
) -> None:
    ov = pytest.importorskip(
        "openvino", reason="OpenVINO not installed: pip install 'visionrt[openvino]'"
    )
    core = ov.Core()
    rows = _spread_frames(demo_video, (640, 640))

    def compiled(path: Path, batch: int) -> object:
        graph = core.read_model(str(path))
        graph.reshape([batch, 3, 640, 640])
        return core.compile_model(graph, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})

    one = compiled(demo_model, 1)
    singles = [one({0: row})[0] for row in rows]
    for batch in (2, 4):
        got = compiled(any_batch_demo, batch)({0: np.concatenate(rows[:batch])})[0]
        _assert_rows_equal(got, singles[:batch])


def test_rebatch_composes_with_the_size_rewrite(
    demo_model: Path, demo_video: Path, any_batch_demo: Path, model_cache: Path
) -> None:
    from visionrt.models import sized_model

    rows = _spread_frames(demo_video, (512, 640))[:2]
    sized = sized_model(demo_model, (512, 640), model_cache)
    both = sized_model(any_batch_demo, (512, 640), model_cache)
    got = _run(both, np.concatenate(rows))
    assert got.shape == (2, 6, anchor_count(512, 640))
    _assert_rows_equal(got, [_run(sized, row) for row in rows])


def _toy(path: Path, nodes: list, inits: list, out_shape: list[int], opset: int = 13) -> Path:
    """A graph on x [1, 3, 4, 4] through a 1x1 Conv to 'c' [1, 4, 4, 4], then `nodes` to 'y'."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((4, 3, 1, 1), np.float32), "w"), *inits]
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"]), *nodes],
        "toy",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def _int64(name: str, values: list[int]) -> object:
    return numpy_helper.from_array(np.array(values, np.int64), name)


# (nodes after 'c', initializers, output shape, opset, {rewritten shape constant: new value})
REWRITABLE = {
    # Two Reshapes in a row (the second is found once the first carries the batch), and the same
    # [1, 4, 16] constant also reshapes a per-model table, which must keep its 1.
    "reshape-leading-1": (
        [
            helper.make_node("Reshape", ["c", "flat"], ["r"]),
            helper.make_node("Reshape", ["table", "flat"], ["t"]),
            helper.make_node("Add", ["r", "t"], ["s"]),
            helper.make_node("Softmax", ["s"], ["p"], axis=2),
            helper.make_node("Reshape", ["p", "row"], ["y"]),
        ],
        [
            _int64("flat", [1, 4, -1]),
            _int64("row", [1, 64]),
            numpy_helper.from_array(np.arange(64, dtype=np.float32).reshape(4, 16) / 64, "table"),
        ],
        [1, 64],
        13,
        {"flat/batch": [0, 4, -1], "row/batch": [0, 64]},
    ),
    "reshape-allowzero": (
        [helper.make_node("Reshape", ["c", "shape"], ["y"], allowzero=1)],
        [_int64("shape", [1, 4, 16])],
        [1, 4, 16],
        14,
        {"shape/batch/allowzero": [-1, 4, 16]},
    ),
    # A constant token and ConstantOfShape / Expand / Tile outputs joined to per-sample rows.
    "concat-constants": (
        [
            helper.make_node("Reshape", ["c", "flat"], ["r"]),
            helper.make_node(
                "ConstantOfShape",
                ["pad_shape"],
                ["pad"],
                value=numpy_helper.from_array(np.array([0.5], np.float32)),
            ),
            helper.make_node("Expand", ["token", "wide"], ["wide_token"]),
            helper.make_node("Tile", ["token", "repeats"], ["tiled"]),
            helper.make_node("Concat", ["token", "r", "pad", "wide_token", "tiled"], ["y"], axis=2),
        ],
        [
            _int64("flat", [1, 4, -1]),
            _int64("pad_shape", [1, 4, 2]),
            _int64("wide", [1, 4, 3]),
            _int64("repeats", [1, 1, 2]),
            numpy_helper.from_array(np.arange(4, dtype=np.float32).reshape(1, 4, 1), "token"),
        ],
        [1, 4, 1 + 16 + 2 + 3 + 2],
        13,
        {"flat/batch": [0, 4, -1]},
    ),
}


@pytest.mark.parametrize("case", sorted(REWRITABLE))
def test_toy_rebatched_at_3_equals_single_runs(tmp_path: Path, case: str) -> None:
    from visionrt.models import rebatch_onnx

    nodes, inits, out_shape, opset, rewritten = REWRITABLE[case]
    src = _toy(tmp_path / "toy.onnx", nodes, inits, out_shape, opset)
    dst = rebatch_onnx(src, tmp_path / "any.onnx")
    constants = {
        i.name: numpy_helper.to_array(i).tolist() for i in onnx.load(str(dst)).graph.initializer
    }
    for name, value in rewritten.items():
        assert constants[name] == value
    rows = np.random.default_rng(2).standard_normal((3, 1, 3, 4, 4), np.float32)
    batched = _run(dst, rows[:, 0])
    np.testing.assert_allclose(batched, np.concatenate([_run(src, row) for row in rows]), atol=1e-6)
    fixed = rebatch_onnx(src, tmp_path / "three.onnx", batch=3)
    assert onnx.load(str(fixed)).graph.input[0].type.tensor_type.shape.dim[0].dim_value == 3
    np.testing.assert_array_equal(_run(fixed, rows[:, 0]), batched)


# (nodes after 'c', initializers, output shape, input batch, what the one-line error says)
UNREWRITABLE = {
    "reduces-the-batch": (  # as write_tiny_detector does
        [
            helper.make_node("ReduceMean", ["c"], ["mean"], keepdims=0),
            helper.make_node("Add", ["table", "mean"], ["y"]),
        ],
        [numpy_helper.from_array(np.zeros((1, 4), np.float32), "table")],
        [1, 4],
        1,
        r"ReduceMean node 'mean' turns the batch axis of 'c' into output 'mean' shaped \[\]",
    ),
    "merges-the-batch": (
        [
            helper.make_node("Reshape", ["c", "rows"], ["r"]),
            helper.make_node("ReduceSum", ["r", "axis0"], ["y"], keepdims=1),
        ],
        [_int64("rows", [4, -1]), _int64("axis0", [0])],
        [1, 16],
        1,
        r"Reshape node 'r' turns the batch axis of 'c' into output 'r' shaped \[4, \d+\]",
    ),
    "concat-on-the-batch-axis": (
        [
            helper.make_node("Concat", ["c", "extra"], ["both"], axis=0),
            helper.make_node("Reshape", ["both", "flat"], ["y"]),
        ],
        [
            numpy_helper.from_array(np.zeros((1, 4, 4, 4), np.float32), "extra"),
            _int64("flat", [1, -1]),
        ],
        [1, 128],
        1,
        "Concat node 'both' concatenates along the batch axis",
    ),
    "batch-fixed-at-2": (
        [helper.make_node("Relu", ["c"], ["y"])],
        [],
        [2, 4, 4, 4],
        2,
        "fixed at 1",
    ),
}


@pytest.mark.parametrize("case", sorted(UNREWRITABLE))
def test_unrewritable_batch_is_a_one_line_error(tmp_path: Path, case: str) -> None:
    from visionrt.models import rebatch_onnx

    nodes, inits, out_shape, batch, message = UNREWRITABLE[case]
    src = _toy(tmp_path / "toy.onnx", nodes, inits, out_shape)
    if batch != 1:
        model = onnx.load(str(src))
        model.graph.input[0].type.tensor_type.shape.dim[0].dim_value = batch
        onnx.save(model, str(src))
    with pytest.raises(ModelLoadError, match=message) as raised:
        rebatch_onnx(src, tmp_path / "any.onnx")
    assert "\n" not in str(raised.value)
    assert not (tmp_path / "any.onnx").exists()


def test_detect_task_runs_a_fixed_batch_export_at_4(demo_model: Path, model_cache: Path) -> None:
    from visionrt.backends import BackendOptions
    from visionrt.tasks.detect import DetectTask

    task = DetectTask(demo_model, "onnxruntime", BackendOptions(batch=4, cache_dir=model_cache))
    try:
        rows = [task.new_buffer() for _ in range(4)]
        assert task.infer(rows).shape == (4, 6, 8400)
        assert task.infer(rows[:3]).shape == (3, 6, 8400)  # a partial batch runs as it is
        assert task.describe()["batch_rewritten"] is True
    finally:
        task.close()
