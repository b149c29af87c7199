"""Issue #34, item 1: the depth model's input prepared on its device and its NaN/Inf guard
run there (the 'frames' input form), checked on CPU tensors: the same function runs on CUDA.
The device input equals `depth_into`'s to one grey level on a few pixels, and a depth run
through the frames path gives the host path's maps."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest
import torch

from visionrt.backends import BackendOptions
from visionrt.errors import NonFiniteDepthError
from visionrt.preprocess.depth import IMAGENET_MEAN, IMAGENET_STD, depth_into
from visionrt.preprocess.depth_device import depth_batch
from visionrt.tasks.depth import DepthTask

FRAMES = BackendOptions(input_size=(28, 42), settings={"input": "frames"})
HOST = BackendOptions(input_size=(28, 42))


def _levels(normalised: np.ndarray) -> np.ndarray:
    """(3, h, w) normalised RGB planes back to grey levels."""
    std = np.asarray(IMAGENET_STD, np.float64)[:, None, None]
    mean = np.asarray(IMAGENET_MEAN, np.float64)[:, None, None]
    return (normalised * std + mean) * 255.0


@pytest.mark.parametrize("hw", [(518, 686), (266, 350), (364, 476)])
@pytest.mark.parametrize("source", ["demo", "small"], ids=["768x576", "upscaled-320x240"])
def test_the_device_input_is_depth_intos(
    demo_video: Path, hw: tuple[int, int], source: str
) -> None:
    capture = cv2.VideoCapture(str(demo_video))
    ok, image = capture.read()
    capture.release()
    assert ok
    if source == "small":
        image = cv2.resize(image, (320, 240), interpolation=cv2.INTER_AREA)
    host = np.empty((3, *hw), np.float32)
    depth_into(image, host, hw)
    device = torch.empty((2, 3, *hw))
    frame = torch.from_numpy(image)
    depth_batch([frame, frame], device)
    for row in device.numpy():
        apart = np.abs(_levels(row) - _levels(host))
        assert apart.max() < 1.01  # one grey level at most
        assert (apart > 0.01).mean() < 0.001  # on fewer than 0.1 % of the values


def test_frames_of_two_sizes_in_one_batch(demo_video: Path) -> None:
    rng = np.random.default_rng(0)
    a = rng.integers(0, 255, (40, 60, 3), dtype=np.uint8)
    b = rng.integers(0, 255, (28, 42, 3), dtype=np.uint8)  # the input's size: not resized
    out = torch.empty((3, 3, 28, 42))
    depth_batch([torch.from_numpy(x) for x in (a, b, a)], out)
    for row, image in zip(out.numpy(), (a, b, a), strict=True):
        host = np.empty((3, 28, 42), np.float32)
        depth_into(image, host, (28, 42))
        assert np.abs(_levels(row) - _levels(host)).max() < 1.01


def _run(task: DepthTask, images: list[np.ndarray]) -> list[np.ndarray]:
    """Each image's map at its own size, on the host (a device map brought back)."""
    buffers = [task.new_buffer() for _ in images]
    geometry = [task.prepare(i, b, None) for i, b in zip(images, buffers, strict=True)]
    rows = task.infer(buffers)
    return [task.decode(row, g).values for row, g in zip(rows, geometry, strict=True)]


def test_the_frames_path_gives_the_host_paths_maps(tiny_depth: Path) -> None:
    """torch on the CPU with inference.settings.input=frames: DepthTask holds frames in slots,
    the backend prepares and runs them, and the maps are the host path's (one level of input
    apart at most, on a few pixels), resized to the frame on the device as on the host."""
    framed = DepthTask(tiny_depth, "torch", FRAMES)
    host = DepthTask(tiny_depth, "torch", HOST)
    assert framed.device is not None
    assert host.device is None
    framed.warm_up(1)
    rng = np.random.default_rng(1)
    images = [rng.integers(0, 255, (40, 60, 3), dtype=np.uint8) for _ in range(3)]
    for got, want in zip(_run(framed, images), _run(host, images), strict=True):
        np.testing.assert_allclose(got, want, atol=0.02)
    framed.close()
    host.close()


def _sqrt_depth_model(path: Path) -> Path:
    """A 'depth model' giving the square root of the channel mean: NaN where a pixel's
    normalised mean is negative (a dark frame), finite on a bright one."""
    import onnx
    from onnx import TensorProto, helper

    nodes = [
        helper.make_node("ReduceMean", ["pixel_values", "axes"], ["mean"], keepdims=0),
        helper.make_node("Sqrt", ["mean"], ["depth"]),
    ]
    graph = helper.make_graph(
        nodes, "sqrt_depth",
        [helper.make_tensor_value_info("pixel_values", TensorProto.FLOAT, ["n", 3, "h", "w"])],
        [helper.make_tensor_value_info("depth", TensorProto.FLOAT, ["n", "h", "w"])],
        [helper.make_tensor("axes", TensorProto.INT64, [1], [1])],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def test_the_nan_guard_runs_on_the_device(tmp_path: Path) -> None:
    """The guard's verdict comes from the device (a flag per row): a bright frame passes; a
    dark one is NaN, prepared again on the host for the FP32 check, and refused because the
    model runs FP32 already."""
    model = _sqrt_depth_model(tmp_path / "sqrt.onnx")
    task = DepthTask(model, "torch", FRAMES)
    bright = np.full((40, 60, 3), 250, np.uint8)
    dark = np.zeros((40, 60, 3), np.uint8)
    (values,) = _run(task, [bright])
    assert np.isfinite(values).all()
    with pytest.raises(NonFiniteDepthError, match="runs FP32 already"):
        _run(task, [bright, dark])
    assert task.nonfinite == 1
    task.close()


def test_a_pipeline_runs_depth_through_the_frames_path(tiny_model: Path, tiny_depth: Path) -> None:
    from visionrt.pipeline import DepthOptions, Pipeline

    depth = DepthOptions(tiny_depth, backend="torch", inference=FRAMES, short_side=28)
    pipeline = Pipeline(["synthetic:60x40:5"], tiny_model, "onnxruntime", depth=depth)
    results = list(pipeline)
    pipeline.close()
    assert len(results) == 5
    assert all(r.depth is not None and r.depth.values.shape == (40, 60) for r in results)
    assert pipeline.summary().accounted


@pytest.mark.parametrize("pixels", ["bgr", "i420"])
def test_a_staged_batch_is_prepared_as_depth_batch_prepares_it(pixels: str) -> None:
    """One shape staged in a buffer (what a CUDA graph replays: `depth_staged`) gives the rows
    `depth_batch` gives the uploaded frames, value for value."""
    from visionrt.preprocess.depth_device import depth_staged
    from visionrt.preprocess.device import FrameSlot, stage_slots, upload

    rng = np.random.default_rng(3)
    images = [rng.integers(0, 256, (40, 36, 3), dtype=np.uint8) for _ in range(2)]
    if pixels == "i420":
        images = [cv2.cvtColor(image, cv2.COLOR_BGR2YUV_I420) for image in images]
    slots = []
    for image in images:
        slot = FrameSlot(stage=True)
        slot.hold(image, None)
        slots.append(slot)
    expected = torch.empty((2, 3, 28, 28))
    depth_batch(upload(slots, torch.device("cpu")), expected)
    staged = torch.empty((2, *images[0].shape), dtype=torch.uint8)
    stage_slots(slots, staged)
    got = torch.empty_like(expected)
    depth_staged(staged, got)
    assert torch.equal(got, expected)


def _scene(rng: np.random.Generator, hw: tuple[int, int], holes: bool) -> np.ndarray:
    """A smooth map; with `holes`, NaN and Inf patches the medians must skip."""
    y, x = np.mgrid[0 : hw[0], 0 : hw[1]].astype(np.float32)
    plane = 1.0 + np.sin(x / 7.0) + np.cos(y / 5.0) + 0.1 * rng.random(hw, dtype=np.float32)
    if holes:
        plane[2:6, 3:9] = np.nan
        plane[10:12, 20:24] = np.inf
        plane[15:17, 5:8] = -np.inf
    return plane.astype(np.float32)


def test_a_device_map_gives_the_host_maps_values_and_box_distances() -> None:
    """A map left on the device (postprocess.depth_device) is resized to the source as
    `depth_to_source` resizes on the host, and each box's distance is the host's median: boxes
    partly outside, outside, empty, with NaN coordinates, over NaN and Inf, and an even count
    of values (the mean of the two middle ones). (A resized map is finite here: the two
    resizes may tell NaN from Inf next to one differently. The device's maps are finite: a
    row with NaN/Inf is recomputed on the host.)"""
    from visionrt.fuse.depth import box_distance
    from visionrt.postprocess.depth import depth_to_source
    from visionrt.postprocess.depth_device import DeviceDepthMap
    from visionrt.types import DepthMap

    rng = np.random.default_rng(3)
    for source_hw in [(40, 60), (28, 42), (20, 30)]:  # upscaled, as is, downscaled
        plane = _scene(rng, (28, 42), holes=source_hw == (28, 42))
        device = DepthMap(device=DeviceDepthMap(torch.from_numpy(plane.copy()), source_hw))
        host = depth_to_source(plane, source_hw)
        assert device.shape == source_hw
        boxes = np.array(
            [[0, 0, 60, 40], [-10, -5, 12, 9], [70, 50, 90, 60], [5, 5, 5, 20],
             [np.nan, 1, 4, 4], [2, 1, 6, 5], [10, 8, 11, 10], [1, 1, 8, 4], [20, 9, 25, 13]],
            np.float32,
        )  # fmt: skip
        got = box_distance(device, boxes)
        assert device._values is None  # the distances left the map where it was
        want = box_distance(host, boxes)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, equal_nan=True)
        assert np.isnan(got[[2, 3, 4]]).all()
        np.testing.assert_allclose(device.values, host.values, rtol=1e-5, atol=1e-6, equal_nan=True)


def test_a_run_that_wants_only_distances_never_brings_a_map_back(
    tiny_model: Path, tiny_depth: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Depth through the frames path with no sink that needs the maps: every frame's
    distances, and no map copied to the host."""
    from visionrt.pipeline import DepthOptions, Pipeline, PipelineOptions
    from visionrt.postprocess import depth_device

    copied: list[int] = []
    host = depth_device.DeviceDepthMap.host

    def counted(self: depth_device.DeviceDepthMap) -> np.ndarray:
        copied.append(1)
        return host(self)

    monkeypatch.setattr(depth_device.DeviceDepthMap, "host", counted)
    depth = DepthOptions(tiny_depth, backend="torch", inference=FRAMES, short_side=28)
    options = PipelineOptions(warmup=0)
    pipeline = Pipeline(
        ["synthetic:60x40:5"], tiny_model, "onnxruntime", depth=depth, options=options
    )
    results = list(pipeline)
    pipeline.close()
    assert len(results) == 5
    for result in results:
        assert result.depth is not None
        assert result.depth.device is not None
        assert result.distance is not None
        assert result.distance.shape == (len(result.detections),)
    assert copied == []
    assert results[0].depth.values.shape == (40, 60)  # asked for: brought back, once
    assert results[0].depth.values is results[0].depth.values
    assert copied == [1]
