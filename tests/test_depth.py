"""Depth: input sizing and normalization, the map back at source size, box distances, the
fidelity metric, the NaN/Inf guard, the architecture-only Depth Anything model on the CPU
runtimes, and the depth sinks."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import cv2
import numpy as np
import pytest

from visionrt.backends import Backend, BackendOptions, load_backend
from visionrt.errors import ConfigError, ModelLoadError, SinkError, VisionRTError
from visionrt.hardware import cpu_has_bf16
from visionrt.model import depth_model_path, is_architecture_only
from visionrt.postprocess.depth import (
    align_scale_shift,
    box_distance,
    depth_fidelity,
    depth_to_source,
    nonfinite_rows,
)
from visionrt.preprocess.depth import IMAGENET_MEAN, IMAGENET_STD, depth_input_size, depth_into
from visionrt.sinks.depth import DepthMapSink, DepthVideoSink, colorize_depth, decode_png16
from visionrt.tasks.depth import DepthRow, DepthTask, NonFiniteDepthError
from visionrt.types import BackendInfo, DepthMap, Detections, Frame, FrameResult

# -- input size and normalization ------------------------------------------------------------


@pytest.mark.parametrize(
    ("source_hw", "short_side", "expected"),
    [
        ((480, 640), 518, (518, 686)),  # 640 × 518/480 = 690.7 → 49 patches
        ((720, 1280), 266, (266, 476)),  # 472.9 → 34 patches
        ((640, 480), 364, (490, 364)),  # portrait: the short side is the width
        ((100, 100), 518, (518, 518)),
        ((1080, 1920), 364, (364, 644)),  # 647.1 → 46 patches
    ],
)
def test_input_size_keeps_aspect_in_multiples_of_14(
    source_hw: tuple[int, int], short_side: int, expected: tuple[int, int]
) -> None:
    size = depth_input_size(source_hw, short_side)
    assert size == expected
    assert all(d % 14 == 0 for d in size)
    assert min(size) == short_side
    aspect = source_hw[1] / source_hw[0]
    assert abs(size[1] / size[0] - aspect) <= 7 / min(size)  # at most half a patch off


@pytest.mark.parametrize("short_side", [0, 500, 13])
def test_input_size_refuses_a_short_side_off_the_patch_grid(short_side: int) -> None:
    with pytest.raises(ConfigError, match="multiple of 14"):
        depth_input_size((480, 640), short_side)


def test_normalization_on_a_hand_case() -> None:
    image = np.zeros((14, 28, 3), np.uint8)
    image[..., 2] = 255  # pure red in BGR
    image[:, 14:, 1] = 51  # right half: green 0.2
    out = np.full((3, 14, 28), np.nan, np.float32)
    geometry = depth_into(image, out, (14, 28))
    assert geometry.source_hw == (14, 28)
    assert geometry.input_hw == (14, 28)
    mean, std = IMAGENET_MEAN, IMAGENET_STD
    np.testing.assert_allclose(out[0], (1 - mean[0]) / std[0], rtol=1e-6)  # R first
    np.testing.assert_allclose(out[1, :, :14], (0 - mean[1]) / std[1], rtol=1e-6)
    np.testing.assert_allclose(out[1, :, 14:], (0.2 - mean[1]) / std[1], rtol=1e-6)
    np.testing.assert_allclose(out[2], (0 - mean[2]) / std[2], rtol=1e-6)


def test_prepare_resizes_into_the_buffer_and_records_the_source_size() -> None:
    image = np.full((30, 40, 3), 128, np.uint8)
    out = np.full((3, 28, 42), np.nan, np.float32)
    geometry = depth_into(image, out, (28, 42))
    assert geometry.source_hw == (30, 40)
    assert np.isfinite(out).all()
    np.testing.assert_allclose(out[0], (128 / 255 - IMAGENET_MEAN[0]) / IMAGENET_STD[0], 1e-5)


# -- back to the source, distances -----------------------------------------------------------


@pytest.mark.parametrize("shape", [(14, 28), (1, 14, 28), (1, 1, 14, 28)])
def test_depth_goes_back_to_the_source_size(shape: tuple[int, ...]) -> None:
    raw = np.full(shape, 2.5, np.float32)
    depth = depth_to_source(raw, (30, 61), metric=True, recomputed=True)
    assert depth.values.shape == (30, 61)
    assert depth.values.dtype == np.float32
    np.testing.assert_allclose(depth.values, 2.5)
    assert depth.metric
    assert depth.recomputed
    assert depth.units == "metres"


def test_a_raw_output_that_is_not_a_map_is_refused() -> None:
    with pytest.raises(ConfigError, match="expected an"):
        depth_to_source(np.zeros((2, 14, 28), np.float32), (30, 60))


def test_nonfinite_rows_names_each_bad_row() -> None:
    batch = np.ones((3, 4, 5), np.float32)
    batch[1, 2, 3] = np.nan
    batch[2, 0, 0] = np.inf
    assert nonfinite_rows(batch).tolist() == [False, True, True]


def _halves() -> DepthMap:
    """100 × 200: 1.0 on the left half, 3.0 on the right half, NaN in a 20×20 patch."""
    values = np.ones((100, 200), np.float32)
    values[:, 100:] = 3.0
    values[0:20, 170:190] = np.nan
    return DepthMap(values)


@pytest.mark.parametrize(
    ("box", "expected"),
    [
        ((10, 10, 90, 90), 1.0),  # inside the left half
        ((110, 30, 190, 90), 3.0),  # inside the right half
        ((-60, 20, 40, 80), 1.0),  # partly outside: clipped to x 0..40
        ((150, -50, 250, 150), 3.0),  # partly outside on three sides
        ((170, 0, 190, 20), np.nan),  # only NaN inside
        ((300, 10, 400, 90), np.nan),  # wholly outside the frame
        ((50, 50, 50, 60), np.nan),  # empty
    ],
)
def test_box_distance_on_a_known_map(box: tuple[float, ...], expected: float) -> None:
    got = box_distance(_halves(), np.array([box], np.float32))
    assert got.dtype == np.float32
    assert got.shape == (1,)
    np.testing.assert_equal(got[0], np.float32(expected))


def test_box_distance_takes_the_inner_part_of_the_box() -> None:
    values = np.full((100, 100), 9.0, np.float32)  # background
    values[30:70, 30:70] = 2.0  # the object fills the central half of the box below
    got = box_distance(DepthMap(values), np.array([[10, 10, 90, 90]], np.float32))
    assert got[0] == 2.0
    whole = box_distance(DepthMap(values), np.array([[10, 10, 90, 90]], np.float32), inner=1.0)
    assert whole[0] == 9.0  # over the whole box the background dominates


def test_box_distance_of_no_boxes_is_empty() -> None:
    assert box_distance(_halves(), np.zeros((0, 4), np.float32)).shape == (0,)


# -- fidelity --------------------------------------------------------------------------------


def _reference() -> np.ndarray:
    rng = np.random.default_rng(1)
    return rng.uniform(0.2, 5.0, (40, 60)).astype(np.float32)


def test_identical_maps_are_perfect() -> None:
    ref = _reference()
    result = depth_fidelity(ref, ref)
    assert result.abs_rel == pytest.approx(0, abs=1e-6)
    assert result.delta1 == 1.0
    assert result.pixels == ref.size


@pytest.mark.parametrize("inverse", [True, False])
def test_a_scaled_and_shifted_copy_is_perfect_after_alignment(inverse: bool) -> None:
    ref = _reference()
    prediction = (ref - 0.3) / 2.5
    scale, shift = align_scale_shift(prediction, ref)
    assert scale == pytest.approx(2.5, rel=1e-6)
    assert shift == pytest.approx(0.3, abs=1e-5)
    result = depth_fidelity(prediction, ref, inverse=inverse)
    assert result.abs_rel == pytest.approx(0, abs=1e-5)
    assert result.delta1 == 1.0


def test_a_wrong_map_scores_worse() -> None:
    ref = _reference()
    noisy = ref * np.random.default_rng(2).uniform(0.5, 1.5, ref.shape).astype(np.float32)
    result = depth_fidelity(noisy, ref)
    assert 0.05 < result.abs_rel < 1.0
    assert 0 < result.delta1 < 1.0


def test_fidelity_ignores_pixels_without_a_positive_reference() -> None:
    ref = _reference()
    ref[:10] = 0.0  # a ReLU output's zeros: no depth there
    ref[10, 0] = np.nan
    result = depth_fidelity(ref * 3.0, ref)
    assert result.pixels == ref.size - 10 * 60 - 1
    assert result.abs_rel == pytest.approx(0, abs=1e-5)


# -- the NaN/Inf guard -----------------------------------------------------------------------


def _write_tiny_depth_model(path: Path) -> Path:
    """An ONNX 'depth model' with dynamic batch, height and width: the channel mean."""
    import onnx
    from onnx import TensorProto, helper

    node = helper.make_node("ReduceMean", ["pixel_values", "axes"], ["depth"], keepdims=0)
    graph = helper.make_graph(
        [node],
        "tiny_depth",
        [helper.make_tensor_value_info("pixel_values", TensorProto.FLOAT, ["n", 3, "h", "w"])],
        [helper.make_tensor_value_info("depth", TensorProto.FLOAT, ["n", "h", "w"])],
        [helper.make_tensor("axes", TensorProto.INT64, [1], [1])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


class PoisonBackend(Backend):
    """ONNX Runtime underneath, reporting `precision`; NaN in the first row of every output
    (what FP16/BF16 overflow does to a depth map)."""

    name = "poison"

    def __init__(self, precision: str = "bf16") -> None:
        self.precision = precision

    def load(self, model: Path, options: BackendOptions) -> None:
        self.inner = load_backend("onnxruntime", model, options)
        info = self.inner.info
        self.info = BackendInfo("poison", "0", "cpu", self.precision, info.inputs, info.outputs)

    def infer(self, inputs: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        output = self.inner.infer(inputs)[0].copy()
        output[0, 0, 0] = np.nan
        return [output]


@pytest.fixture(scope="module")
def tiny_depth(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _write_tiny_depth_model(tmp_path_factory.mktemp("depth") / "tiny_depth.onnx")


def _poisoned_task(model: Path, precision: str = "bf16", **kwargs: object) -> DepthTask:
    backend = PoisonBackend(precision)
    backend.load(model, BackendOptions(input_size=(28, 42)))
    return DepthTask(model, backend, source_hw=(40, 60), short_side=28, **kwargs)  # type: ignore[arg-type]


def _frames(task: DepthTask, count: int) -> tuple[list[np.ndarray], list[object]]:
    rng = np.random.default_rng(3)
    buffers, geometries = [], []
    for _ in range(count):
        buffer = task.new_buffer()
        image = rng.integers(0, 255, (40, 60, 3), dtype=np.uint8)
        geometries.append(task.prepare(image, buffer, None))
        buffers.append(buffer)
    return buffers, geometries


def test_nonfinite_rows_are_recomputed_in_fp32(tiny_depth: Path) -> None:
    task = _poisoned_task(tiny_depth)
    assert task.input_hw == (28, 42)
    buffers, geometries = _frames(task, 2)
    rows = task.infer(buffers)
    assert [row.recomputed for row in rows] == [True, False]
    expected = np.concatenate(buffers).mean(axis=1)
    for row, want in zip(rows, expected, strict=True):
        assert isinstance(row, DepthRow)
        np.testing.assert_allclose(row.values, want, rtol=1e-5, atol=1e-6)
    assert (task.nonfinite, task.recomputed) == (1, 1)
    depth = task.decode(rows[0], geometries[0])
    assert depth.recomputed
    assert depth.values.shape == (40, 60)
    assert np.isfinite(depth.values).all()
    facts = task.describe()
    assert facts["nonfinite"] == 1
    assert facts["recomputed"] == 1
    assert "architecture_only" not in facts
    task.close()


def test_nonfinite_rows_fail_the_run_when_asked(tiny_depth: Path) -> None:
    task = _poisoned_task(tiny_depth, on_nonfinite="fail")
    buffers, _ = _frames(task, 1)
    with pytest.raises(NonFiniteDepthError, match="on_nonfinite=fail") as caught:
        task.infer(buffers)
    assert isinstance(caught.value, VisionRTError)
    assert "\n" not in str(caught.value)
    assert task.nonfinite == 1
    assert task.recomputed == 0


def test_nonfinite_from_fp32_is_not_recomputed_in_fp32_again(tiny_depth: Path) -> None:
    task = _poisoned_task(tiny_depth, precision="fp32")
    buffers, _ = _frames(task, 1)
    with pytest.raises(NonFiniteDepthError, match="runs FP32 already"):
        task.infer(buffers)


def test_an_unknown_nonfinite_policy_is_refused(tiny_depth: Path) -> None:
    with pytest.raises(ConfigError, match="recompute or fail"):
        DepthTask(tiny_depth, on_nonfinite="ignore")


def test_input_sizes_off_the_patch_grid_are_refused(tiny_depth: Path) -> None:
    with pytest.raises(ConfigError, match="multiples of 14"):
        DepthTask(tiny_depth, backend_options=BackendOptions(input_size=(30, 40)))


def test_without_a_source_size_the_input_is_square(tiny_depth: Path) -> None:
    task = DepthTask(tiny_depth, short_side=266)
    assert task.input_hw == (266, 266)
    assert task.new_buffer().shape == (1, 3, 266, 266)


# -- the architecture-only Depth Anything v2-Small -----------------------------------------

SOURCE_HW = (480, 640)
# OpenVINO FP32 against ONNX Runtime FP32: max |difference| relative to the map's max |value|.
FP32_RELATIVE_TOLERANCE = 1e-3
# BF16 has an 8-bit mantissa: δ<1.25 against FP32 after alignment, on this random-weight model.
BF16_MIN_DELTA1 = 0.9


@pytest.fixture(scope="module")
def depth_model() -> Path:
    try:
        return depth_model_path()
    except ModelLoadError as err:
        pytest.skip(f"architecture-only depth model not built: {err}")


@pytest.fixture(scope="module")
def depth_image() -> np.ndarray:
    rng = np.random.default_rng(4)
    image = cv2.resize(rng.integers(0, 255, (12, 16, 3), dtype=np.uint8), SOURCE_HW[::-1])
    return np.ascontiguousarray(image)


def _run_real(model: Path, image: np.ndarray, backend: str, precision: str) -> DepthMap:
    task = DepthTask(
        model, backend, BackendOptions(precision=precision), short_side=266, source_hw=SOURCE_HW
    )
    try:
        assert task.input_hw == (266, 350)
        buffer = task.new_buffer()
        geometry = task.prepare(image, buffer, None)
        row = task.infer([buffer])[0]
        assert row.values.shape == (266, 350)
        return task.decode(row, geometry)
    finally:
        task.close()


@pytest.fixture(scope="module")
def ort_depth(depth_model: Path, depth_image: np.ndarray) -> DepthMap:
    return _run_real(depth_model, depth_image, "onnxruntime", "fp32")


def test_the_built_model_says_it_is_architecture_only(depth_model: Path) -> None:
    assert "depth_anything" in depth_model.name
    assert is_architecture_only(depth_model)
    task = DepthTask(depth_model, short_side=266, source_hw=SOURCE_HW)
    facts = task.describe()
    task.close()
    assert facts["architecture_only"] is True
    assert facts["weights"] == "architecture-only (random weights)"
    assert facts["units"] == "relative inverse depth"


def test_onnxruntime_runs_the_model_at_short_side_266(ort_depth: DepthMap) -> None:
    assert ort_depth.values.shape == SOURCE_HW
    assert np.isfinite(ort_depth.values).all()
    assert not ort_depth.metric
    assert not ort_depth.recomputed
    assert ort_depth.values.max() > 0  # relative inverse depth after a ReLU: not all zero


@pytest.mark.openvino
def test_openvino_fp32_agrees_with_onnxruntime(
    depth_model: Path, depth_image: np.ndarray, ort_depth: DepthMap
) -> None:
    pytest.importorskip("openvino", reason="openvino is not installed")
    depth = _run_real(depth_model, depth_image, "openvino", "fp32")
    difference = np.abs(depth.values - ort_depth.values).max()
    assert difference <= FP32_RELATIVE_TOLERANCE * np.abs(ort_depth.values).max()


@pytest.mark.openvino
def test_openvino_bf16_stays_close_to_fp32(
    depth_model: Path, depth_image: np.ndarray, ort_depth: DepthMap
) -> None:
    pytest.importorskip("openvino", reason="openvino is not installed")
    if not cpu_has_bf16():
        pytest.skip("this CPU has no BF16 instructions (AVX512_BF16 or AMX)")
    depth = _run_real(depth_model, depth_image, "openvino", "bf16")
    assert np.isfinite(depth.values).all()
    assert depth_fidelity(depth.values, ort_depth.values).delta1 >= BF16_MIN_DELTA1


@pytest.mark.torch
def test_torch_runs_the_model_or_names_what_it_cannot_convert(
    depth_model: Path, depth_image: np.ndarray, ort_depth: DepthMap
) -> None:
    pytest.importorskip("torch", reason="torch is not installed")
    import onnx

    from visionrt.backends.onnx_to_torch import SUPPORTED_OPS

    ops = {node.op_type for node in onnx.load(str(depth_model)).graph.node}
    if ops - SUPPORTED_OPS:  # not grown for ViTs on purpose (issue 7): a clear refusal
        with pytest.raises(ModelLoadError, match="does not support op"):
            _run_real(depth_model, depth_image, "torch", "fp32")
        pytest.skip(f"the ONNX→torch converter lacks {sorted(ops - SUPPORTED_OPS)} for the ViT")
    depth = _run_real(depth_model, depth_image, "torch", "fp32")
    difference = np.abs(depth.values - ort_depth.values).max()
    assert difference <= FP32_RELATIVE_TOLERANCE * np.abs(ort_depth.values).max()


# -- sinks -----------------------------------------------------------------------------------


def _result(index: int, depth: DepthMap | None, source_id: int = 0) -> FrameResult:
    image = np.full((48, 64, 3), 40, np.uint8)
    frame = Frame(source_id, index, image, index / 25, 0.0, source_name="rgb")
    return FrameResult(frame, Detections.empty(), {}, depth=depth)


def _gradient(index: int = 0) -> DepthMap:
    values = np.tile(np.linspace(0.5, 4.0, 64, dtype=np.float32), (48, 1)) + index
    values[0, 0] = np.nan
    return DepthMap(values)


def test_colorized_depth_is_bright_where_near_and_black_where_unknown() -> None:
    picture = colorize_depth(_gradient())
    assert picture.shape == (48, 64, 3)
    assert picture.dtype == np.uint8
    assert picture[0, 0].tolist() == [0, 0, 0]
    assert picture[5, 63].sum() > picture[5, 1].sum()  # larger inverse depth: nearer, brighter
    metric = colorize_depth(DepthMap(_gradient().values, metric=True))
    assert metric[5, 1].sum() > metric[5, 63].sum()  # metres: smaller is nearer


def test_png_maps_round_trip_in_16_bits(tmp_path: Path) -> None:
    sink = DepthMapSink(tmp_path / "rgb.depth", "png", source_id=0)
    sink.write(_result(0, None))  # no depth: skipped
    for index in range(1, 3):
        sink.write(_result(index, _gradient(index)))
    sink.write(_result(3, _gradient(), source_id=1))  # another source: skipped
    assert sink.close() == [tmp_path / "rgb.depth"]
    folder = tmp_path / "rgb.depth"
    lines = [json.loads(x) for x in (folder / "frames.jsonl").read_text().splitlines()]
    assert [line["file"] for line in lines] == ["000001.png", "000002.png"]
    for line in lines:
        levels = cv2.imread(str(folder / line["file"]), cv2.IMREAD_UNCHANGED)
        assert levels.dtype == np.uint16
        assert levels.shape == (48, 64)
        values = decode_png16(levels, line["min"], line["max"])
        want = _gradient(line["frame"]).values
        assert np.isnan(values[0, 0])
        step = (line["max"] - line["min"]) / 65534
        np.testing.assert_allclose(values[1:], want[1:], atol=step)
        assert line["units"] == "relative inverse depth"


def test_npy_maps_keep_the_values_exactly(tmp_path: Path) -> None:
    sink = DepthMapSink(tmp_path / "maps", "npy")
    sink.write(_result(7, _gradient()))
    sink.close()
    values = np.load(tmp_path / "maps" / "rgb-000007.npy")
    np.testing.assert_array_equal(values, _gradient().values)


def test_map_folder_stays_partial_after_an_incomplete_run(tmp_path: Path) -> None:
    sink = DepthMapSink(tmp_path / "rgb.depth", "png")
    sink.write(_result(0, _gradient()))
    assert sink.close(complete=False) == [tmp_path / "rgb.partial.depth"]
    assert not (tmp_path / "rgb.depth").exists()


def test_map_sink_without_depth_leaves_nothing(tmp_path: Path) -> None:
    sink = DepthMapSink(tmp_path / "rgb.depth", "npy")
    sink.write(_result(0, None))
    assert sink.close() == []
    assert list(tmp_path.iterdir()) == []


def test_map_sink_refuses_a_folder_with_files_and_writes_after_close(tmp_path: Path) -> None:
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "x").write_text("x")
    with pytest.raises(SinkError, match="not an empty folder"):
        DepthMapSink(tmp_path / "taken", "png")
    with pytest.raises(ConfigError, match="png or npy"):
        DepthMapSink(tmp_path / "maps", "tiff")
    sink = DepthMapSink(tmp_path / "maps", "png")
    sink.close()
    with pytest.raises(SinkError, match="after close"):
        sink.write(_result(0, _gradient()))


def test_depth_video_has_a_frame_per_depth_map(tmp_path: Path) -> None:
    import av

    path = tmp_path / "rgb.depth.mp4"
    sink = DepthVideoSink(path, fps=25, source_id=0)
    for index in range(6):
        sink.write(_result(index, _gradient(index) if index != 2 else None))
    assert sink.close() == [path]
    with av.open(str(path)) as container:
        frames = [f.to_ndarray(format="bgr24") for f in container.decode(video=0)]
    assert len(frames) == 5
    assert frames[0].shape == (48, 64, 3)
