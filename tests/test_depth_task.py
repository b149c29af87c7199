"""The depth task: the NaN/Inf guard and its telemetry events, input sizing, and the
architecture-only Depth Anything model on the CPU runtimes."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Mapping
from pathlib import Path

import cv2
import numpy as np
import pytest
from conftest import write_tiny_depth_model

from visionrt.backends import Backend, BackendOptions, load_backend
from visionrt.errors import ConfigError, NonFiniteDepthError, VisionRTError
from visionrt.fidelity.depth import depth_fidelity
from visionrt.hardware import cpu_has_bf16
from visionrt.models import is_architecture_only
from visionrt.tasks.depth import RECOMPUTED_EVENT, DepthRow, DepthTask
from visionrt.types import BackendInfo, DepthMap

# -- the NaN/Inf guard -----------------------------------------------------------------------


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


def test_recomputed_frames_are_drained_as_events_once(tiny_depth: Path) -> None:
    task = _poisoned_task(tiny_depth)
    assert task.drain_events() == {}
    buffers, geometries = _frames(task, 3)
    rows = task.infer(buffers)  # row 0 is recomputed
    assert task.drain_events() == {}  # counted at decode, where the frame's source is known
    task.decode(rows[1], geometries[1])
    assert task.drain_events() == {}
    task.decode(rows[0], geometries[0])
    assert task.drain_events() == {RECOMPUTED_EVENT: 1}
    assert task.drain_events() == {}
    task.close()


def test_events_are_counted_exactly_across_threads(tiny_depth: Path) -> None:
    task = _poisoned_task(tiny_depth)
    buffers, geometries = _frames(task, 1)
    row = task.infer(buffers)[0]
    assert row.recomputed
    drained: list[dict[str, int]] = []
    stop = threading.Event()

    def drain() -> None:
        while not stop.is_set():
            drained.append(task.drain_events())

    def decode() -> None:
        for _ in range(200):
            task.decode(row, geometries[0])

    drainer = threading.Thread(target=drain)
    drainer.start()
    decoders = [threading.Thread(target=decode) for _ in range(4)]
    for thread in decoders:
        thread.start()
    for thread in decoders:
        thread.join()
    stop.set()
    drainer.join()
    drained.append(task.drain_events())
    assert sum(events.get(RECOMPUTED_EVENT, 0) for events in drained) == 800
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
def test_torch_runs_the_model_as_onnxruntime_does(
    depth_model: Path, depth_image: np.ndarray, ort_depth: DepthMap
) -> None:
    pytest.importorskip("torch", reason="torch is not installed")
    depth = _run_real(depth_model, depth_image, "torch", "fp32")
    difference = np.abs(depth.values - ort_depth.values).max()
    assert difference <= FP32_RELATIVE_TOLERANCE * np.abs(ort_depth.values).max()


@pytest.mark.torch
@pytest.mark.parametrize("hw", [(266, 350), (364, 364)])
def test_the_converter_runs_depth_anything_at_any_size_as_onnxruntime(
    depth_model: Path, hw: tuple[int, int]
) -> None:
    # The export is dynamic in batch, height and width: converted at a size, every Shape of it
    # (and the position-embedding grid computed from them: Range, Where) is a constant; the
    # square size takes the interpolation's other branch in the export.
    torch = pytest.importorskip("torch", reason="torch is not installed")
    import onnx
    import onnxruntime

    from visionrt.backends.onnx_to_torch import convert_onnx

    pixels = np.random.default_rng(1).standard_normal((1, 3, *hw)).astype(np.float32)
    session = onnxruntime.InferenceSession(str(depth_model), providers=["CPUExecutionProvider"])
    expected = session.run(None, {"pixel_values": pixels})[0]
    module = convert_onnx(onnx.load(str(depth_model)), [1, 3, *hw])
    ops = [node.op for node in module.nodes]
    assert (ops.count("Attention"), ops.count("Gelu")) == (12, 12)  # one per layer, fused
    with torch.inference_mode():
        (got,) = module(torch.from_numpy(pixels))
    assert got.shape == expected.shape
    assert np.abs(got.numpy() - expected).max() <= 1e-4 * np.abs(expected).max()  # seen: 3e-5


def test_a_model_with_a_static_size_runs_at_it_without_reshaping(tmp_path: Path) -> None:
    """A static export (what `visionrt export` makes of a depth model) takes no input_size:
    OpenVINO refuses one for an IR, and there is nothing to reshape."""
    import onnx

    model = onnx.load(str(write_tiny_depth_model(tmp_path / "dynamic.onnx")))
    for value in (model.graph.input[0], model.graph.output[0]):
        dims = value.type.tensor_type.shape.dim
        for dim, size in zip(dims[-2:], (28, 42), strict=True):
            dim.dim_value = size
    onnx.save(model, str(tmp_path / "static.onnx"))
    task = DepthTask(tmp_path / "static.onnx", "onnxruntime", short_side=266, source_hw=(40, 60))
    assert task.input_hw == (28, 42)
    assert task.options.input_size is None
    with pytest.raises(ConfigError, match="fixed 28x42"):
        DepthTask(tmp_path / "static.onnx", backend_options=BackendOptions(input_size=(14, 14)))
    task.close()


def test_pipeline_smooths_depth_per_source_in_order(tiny_depth: Path, tiny_model: Path) -> None:
    """`DepthOptions.smoothing` blends each source's maps in frame order: the first map is the
    model's own, later ones flicker less than without smoothing; distances use the smoothed map."""
    from visionrt import Pipeline, PipelineOptions
    from visionrt.fidelity.depth import depth_flicker
    from visionrt.pipeline import DepthOptions

    def maps(alpha: float) -> list[np.ndarray]:
        pipeline = Pipeline(
            ["synthetic:64x48:8"],
            tiny_model,
            "onnxruntime",
            options=PipelineOptions(warmup=0),
            depth=DepthOptions(tiny_depth, short_side=42, smoothing=alpha),
        )
        results = list(pipeline)
        pipeline.close()
        assert [r.frame.index for r in results] == list(range(8))
        return [r.depth.values for r in results if r.depth is not None]

    raw, smoothed = maps(0.0), maps(0.5)
    np.testing.assert_array_equal(raw[0], smoothed[0])
    assert not np.allclose(raw[-1], smoothed[-1])
    flicker_raw = np.mean([depth_flicker(a, b) for a, b in itertools.pairwise(raw)])
    flicker_smooth = np.mean([depth_flicker(a, b) for a, b in itertools.pairwise(smoothed)])
    assert flicker_smooth < 0.8 * flicker_raw


def test_depth_every_n_runs_it_on_one_frame_in_n_and_the_others_take_its_map(
    tiny_depth: Path, tiny_model: Path
) -> None:
    """`DepthOptions.every` 3: the depth model runs on frames 0, 3, 6 of each source; the
    frames between carry the map made on the one before (the JSONL's `depth.from`) and their
    own boxes' distances measured on it. The audit never scores a held map."""
    from visionrt import Pipeline, PipelineOptions
    from visionrt.pipeline import DepthOptions

    pipeline = Pipeline(
        ["a=synthetic:64x48:8", "b=synthetic:64x48:8"],
        tiny_model,
        "onnxruntime",
        options=PipelineOptions(warmup=0),
        depth=DepthOptions(tiny_depth, short_side=42, every=3),
    )
    backend = pipeline.tasks[1].backend
    rows: list[int] = []
    run = backend.infer

    def counted(inputs):  # the frames each call of the depth model takes
        rows.append(len(next(iter(inputs.values()))))
        return run(inputs)

    backend.infer = counted  # type: ignore[method-assign]
    results = list(pipeline)
    pipeline.close()
    assert pipeline.summary().backend["depth"]["every"] == 3  # summary.json says so
    for name in ("a", "b"):
        mine = [r for r in results if r.frame.source_name == name]
        assert [r.depth_from for r in mine] == [None, 0, 0, None, 3, 3, None, 6]
        made = {r.frame.index: r.depth for r in mine if r.depth_from is None}
        for result in mine:
            assert result.depth is made[result.frame.index - result.frame.index % 3]
            assert result.distance is not None
            assert len(result.distance) == len(result.detections)
            line = result.to_json()
            assert line["depth"].get("from") == result.depth_from
    assert sum(rows) == 6  # the depth model ran on 3 frames of each source, not 8


def test_a_held_depth_map_is_given_only_to_frames_of_its_size() -> None:
    from visionrt.fuse import Fused
    from visionrt.fuse.depth import DepthFuser
    from visionrt.types import Detections, Frame

    def fused(index: int, hw: tuple[int, int], depth: DepthMap | None) -> Fused:
        frame = Frame(0, index, np.zeros((*hw, 3), np.uint8), index / 30, 0.0)
        boxes = Detections(np.array([[2, 2, 6, 6]], np.float32), np.ones(1, np.float32),
                           np.zeros(1, np.int32))  # fmt: skip
        return Fused(frame, {"depth": depth} if depth is not None else {}, boxes)

    made = DepthMap(np.full((8, 8), 2.0, np.float32))
    holding, plain = DepthFuser(hold=True), DepthFuser()
    for fuser in (holding, plain):
        fuser.fuse(fused(0, (8, 8), made))
    later = fused(1, (8, 8), None)
    holding.fuse(later)
    assert (later.depth, later.depth_from, later.distance.tolist()) == (made, 0, [2.0])
    untouched = fused(1, (8, 8), None)
    plain.fuse(untouched)  # depth on every frame: nothing is held
    assert untouched.depth is None
    resized = fused(2, (16, 16), None)  # the camera came back at another size
    holding.fuse(resized)
    assert resized.depth is None
    assert resized.distance is None


def test_a_tracked_object_keeps_the_distance_measured_on_it_while_a_map_is_held() -> None:
    """On a frame holding an earlier map, a track's box has moved: the held map has something
    else at its new place. The track keeps the distance measured on it on the map's frame; a
    box with no track kept from then is measured on the held map."""
    from visionrt.fuse import Fused
    from visionrt.fuse.depth import DepthFuser
    from visionrt.types import Detections, Frame, TrackedDetections

    near = np.full((8, 16), 9.0, np.float32)
    near[:, :8] = 2.0  # the object on the left half; far background on the right
    made = DepthMap(near)

    def fused(index: int, boxes: list[list[float]], ids: list[int], depth: DepthMap | None):
        frame = Frame(0, index, np.zeros((8, 16, 3), np.uint8), index / 30, 0.0)
        found = Detections(np.array(boxes, np.float32), np.ones(len(boxes), np.float32),
                           np.zeros(len(boxes), np.int32))  # fmt: skip
        tracks = TrackedDetections(found, np.array(ids, np.int64), np.zeros(len(ids), np.bool_))
        return Fused(frame, {"depth": depth} if depth is not None else {}, found, tracks)

    fuser = DepthFuser(hold=True)
    first = fused(0, [[0, 0, 8, 8]], [7], made)
    fuser.fuse(first)
    assert first.distance.tolist() == [2.0]
    # Track 7 walked to the right half; track 8 appeared there since the map was made.
    later = fused(1, [[8, 0, 16, 8], [8, 0, 16, 8]], [7, 8], None)
    fuser.fuse(later)
    assert later.depth_from == 0
    assert later.distance.tolist() == [2.0, 9.0]


def test_a_frame_motion_gating_reused_takes_the_latest_map_as_an_earlier_frames() -> None:
    """A reused frame's results are its source's last ones: its map was made on an earlier
    frame (`depth_from`), is not smoothed again, and with depth on 1 frame in N it is the map
    held since then, not a new one made on the reused frame."""
    from visionrt.fuse import Fused
    from visionrt.fuse.depth import DepthFuser, DepthSmoother
    from visionrt.types import Detections, Frame

    boxes = Detections(np.array([[2, 2, 6, 6]], np.float32), np.ones(1, np.float32),
                       np.zeros(1, np.int32))  # fmt: skip

    def fused(index: int, depth: DepthMap | None, reused: bool = False) -> Fused:
        frame = Frame(0, index, np.zeros((8, 8, 3), np.uint8), index / 30, 0.0)
        return Fused(frame, {"depth": depth} if depth is not None else {}, boxes, reused=reused)

    first, second = (
        DepthMap(np.full((8, 8), 2.0, np.float32)),
        DepthMap(np.full((8, 8), 4.0, np.float32)),
    )
    smoothing = DepthFuser(smoother=DepthSmoother(0.5, align=False))
    smoothing.fuse(fused(0, first))
    made = fused(1, second)
    smoothing.fuse(made)
    assert made.depth_from is None
    assert made.distance.tolist() == [3.0]  # blended once: 0.5·4 + 0.5·2
    reused = fused(2, second, reused=True)  # the reuse step gave it frame 1's results
    smoothing.fuse(reused)
    assert (reused.depth, reused.depth_from, reused.distance.tolist()) == (made.depth, 1, [3.0])

    holding = DepthFuser(hold=True)
    holding.fuse(fused(0, first))
    holding.fuse(fused(1, None))  # held
    # Frame 1 was the last the models ran on: its results (no map) are the reused frame's,
    # beside a map the reuse step kept from frame 0.
    again = fused(2, first, reused=True)
    holding.fuse(again)
    assert (again.depth, again.depth_from) == (first, 0)
    later = fused(3, None)
    holding.fuse(later)
    assert later.depth_from == 0  # still frame 0's map, not one "made" on frame 2

    plain = DepthFuser()
    untouched = fused(0, None, reused=True)  # reused before any map was made
    plain.fuse(untouched)
    assert untouched.depth is None
