"""Frames kept as the decoder's YUV 4:2:0 planes (I420) for a detector whose device converts
them: the device's conversion equals OpenCV's, sources deliver I420 when asked (in a thread or
a worker process, after a restart too) and BGR where they cannot, `Frame.image` stays BGR, and
a pipeline asks for I420 only when its detector takes frames."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import cv2
import numpy as np
import pytest
from conftest import write_video

torch = pytest.importorskip("torch")

from visionrt import BackendOptions, Pipeline, SourceOptions  # noqa: E402
from visionrt.errors import ConfigError  # noqa: E402
from visionrt.preprocess.device import FrameSlot, i420_to_bgr, upload  # noqa: E402
from visionrt.sources import open_source  # noqa: E402
from visionrt.sources.process import ProcessSource  # noqa: E402
from visionrt.types import Frame, picture_hw  # noqa: E402

pytestmark = pytest.mark.torch


def _bgr(pixels: np.ndarray) -> np.ndarray:
    return cv2.cvtColor(pixels, cv2.COLOR_YUV2BGR_I420)


@pytest.mark.parametrize("hw", [(576, 768), (6, 8), (98, 130)])
def test_the_device_conversion_equals_opencvs_on_every_value(hw: tuple[int, int]) -> None:
    height, width = hw
    planes = np.random.default_rng(height).integers(0, 256, (2, height * 3 // 2, width), np.uint8)
    got = i420_to_bgr(torch.from_numpy(planes)).numpy()
    assert got.shape == (2, height, width, 3)
    for row in range(2):
        np.testing.assert_array_equal(got[row], _bgr(planes[row]))


def test_the_device_conversion_equals_opencvs_on_a_real_frame(demo_video: Path) -> None:
    source = open_source(str(demo_video), options=SourceOptions(pixels="i420", max_frames=1))
    frame = next(iter(source.frames()))
    source.close()
    assert frame.pixels.shape == (576 * 3 // 2, 768)
    converted = i420_to_bgr(torch.from_numpy(frame.pixels)[None])[0].numpy()
    np.testing.assert_array_equal(converted, frame.image)


def test_upload_converts_i420_slots_and_leaves_bgr_ones() -> None:
    rng = np.random.default_rng(1)
    planar = rng.integers(0, 256, (48 * 3 // 2, 64), np.uint8)
    bgr = rng.integers(0, 256, (48, 64, 3), np.uint8)
    slots = [FrameSlot(stage=True) for _ in range(3)]
    for slot, pixels in zip(slots, (planar, bgr, planar[::-1].copy()), strict=True):
        slot.hold(pixels, None)
    frames = upload(slots, torch.device("cpu"))
    np.testing.assert_array_equal(frames[0].numpy(), _bgr(planar))
    np.testing.assert_array_equal(frames[1].numpy(), bgr)
    np.testing.assert_array_equal(frames[2].numpy(), _bgr(planar[::-1].copy()))
    np.testing.assert_array_equal(slots[0].bgr(), _bgr(planar))  # the host's recompute input


def test_a_frames_image_is_bgr_converted_once() -> None:
    planes = np.random.default_rng(2).integers(0, 256, (24 * 3 // 2, 32), np.uint8)
    frame = Frame(0, 0, planes, 0.0, 0.0)
    assert frame.size == picture_hw(planes) == (24, 32)
    image = frame.image
    assert image.shape == (24, 32, 3)
    np.testing.assert_array_equal(image, _bgr(planes))
    assert frame.image is image  # kept
    bgr = np.zeros((24, 32, 3), np.uint8)
    assert Frame(0, 0, bgr, 0.0, 0.0).image is bgr
    assert Frame(0, 0, bgr, 0.0, 0.0).size == (24, 32)


def test_a_video_source_gives_i420_from_the_frame_it_is_asked_on(small_video: Path) -> None:
    source = open_source(str(small_video))
    frames = source.frames()
    first = next(frames)
    source.want_i420()
    rest = list(frames)
    source.close()
    assert first.pixels.ndim == 3
    assert all(f.pixels.shape == (96 * 3 // 2, 128) for f in rest)
    assert [f.index for f in rest] == list(range(1, 40))
    reference = list(open_source(str(small_video)).frames())
    # OpenCV's conversion of the same planes is within a few levels of FFmpeg's BGR.
    worst = max(np.abs(f.image.astype(int) - reference[f.index].image).max() for f in rest)
    assert worst <= 40


def test_pixels_bgr_refuses_i420_and_i420_starts_so(small_video: Path) -> None:
    source = open_source(str(small_video), options=SourceOptions(pixels="bgr"))
    source.want_i420()
    assert all(f.pixels.ndim == 3 for f in source.frames())
    source.close()
    source = open_source(str(small_video), options=SourceOptions(pixels="i420"))
    assert all(f.pixels.ndim == 2 for f in source.frames())
    source.close()
    wrong = r"source\.pixels: expected auto, bgr or i420, got 'nv12'"
    with pytest.raises(ConfigError, match=wrong):
        SourceOptions(pixels="nv12")


def test_odd_sizes_and_other_formats_stay_bgr(small_video: Path) -> None:
    import av

    source = open_source(str(small_video), options=SourceOptions(pixels="i420"))
    odd = av.VideoFrame(127, 96, "yuv420p")
    assert source._pixels(odd).shape == (96, 127, 3)  # type: ignore[attr-defined]
    full_range = av.VideoFrame(128, 96, "yuvj420p")
    assert source._pixels(full_range).shape == (96, 128, 3)  # type: ignore[attr-defined]
    even = av.VideoFrame(128, 96, "yuv420p")
    assert source._pixels(even).shape == (144, 128)  # type: ignore[attr-defined]
    source.close()


def test_a_worker_process_gives_i420_after_a_restart_too(tmp_path: Path) -> None:
    video = write_video(tmp_path / "v.mp4", frames=60)
    options = SourceOptions(workers="process", mode="file", reconnect_backoff=0.01)
    source = ProcessSource(str(video), 0, options, slots=4)
    source.want_i420()
    layouts: dict[int, int] = {}
    for frame in source.frames():
        layouts[frame.index] = frame.pixels.ndim
        assert frame.image.shape == (96, 128, 3)
        if frame.index == 30:
            assert source.pid is not None
            os.kill(source.pid, signal.SIGKILL)
    report = source.report()
    source.close()
    assert sorted(layouts) == list(range(60))
    assert report["restarts"] == 1
    assert layouts[29] == layouts[30] == 2  # the command reached the first worker
    assert all(layouts[i] == 2 for i in range(31, 60))  # and the second was sent it again


@pytest.mark.parametrize(("form", "ndim"), [("frames", 2), ("float32", 3)])
def test_a_pipeline_asks_for_i420_only_when_its_detector_takes_frames(
    small_video: Path, tiny_model: Path, form: str, ndim: int
) -> None:
    options = BackendOptions(batch=2, settings={"input": form})
    pipeline = Pipeline([f"c{i}={small_video}" for i in range(2)], tiny_model, "null", options,
                        plan=False)  # fmt: skip
    try:
        results = list(pipeline)
    finally:
        pipeline.close()
    assert len(results) == 80
    assert {r.frame.pixels.ndim for r in results} == {ndim}
    assert {r.frame.image.shape for r in results} == {(96, 128, 3)}


def test_a_slot_keeps_memory_for_three_sizes_and_copies_each_frame() -> None:
    allocated: list[tuple[int, ...]] = []

    def allocate(shape: tuple[int, ...]) -> torch.Tensor:
        allocated.append(shape)
        return torch.empty(shape, dtype=torch.uint8)

    slot = FrameSlot(stage=True, allocate=allocate)
    sizes = [(6, 8, 3), (9, 8), (4, 4, 3)]
    for round_ in range(3):
        for shape in sizes:
            pixels = np.full(shape, round_ * 10 + len(shape), np.uint8)
            slot.hold(pixels, None)
            assert slot.tensor is not None
            np.testing.assert_array_equal(slot.tensor.numpy(), pixels)
            assert not np.shares_memory(slot.tensor.numpy(), pixels)  # staged: a copy
    assert allocated == sizes  # each size once, kept
    slot.hold(np.zeros((2, 2, 3), np.uint8), None)  # a fourth: the least recent goes
    slot.hold(np.ones((6, 8, 3), np.uint8), None)
    assert allocated == [*sizes, (2, 2, 3), (6, 8, 3)]


def test_depth_through_the_frames_path_takes_i420_as_its_bgr(tiny_depth: Path) -> None:
    from visionrt.tasks.depth import DepthTask

    framed = BackendOptions(input_size=(28, 42), settings={"input": "frames"})
    task = DepthTask(tiny_depth, "torch", framed)
    assert task.takes_i420
    planes = np.random.default_rng(3).integers(0, 256, (2, 40 * 3 // 2, 60), np.uint8)

    def maps(pictures: list[np.ndarray]) -> list[np.ndarray]:
        buffers = [task.new_buffer() for _ in pictures]
        geometry = [task.prepare(p, b, None) for p, b in zip(pictures, buffers, strict=True)]
        assert all(g.source_hw == (40, 60) for g in geometry)
        return [row.values for row in task.infer(buffers)]

    for got, want in zip(maps(list(planes)), maps([_bgr(p) for p in planes]), strict=True):
        np.testing.assert_array_equal(got, want)
    task.close()


def test_a_pipelines_depth_lane_gets_the_i420_frames_too(
    small_video: Path, tiny_model: Path, tiny_depth: Path
) -> None:
    from visionrt.pipeline import DepthOptions

    framed = BackendOptions(input_size=(28, 42), settings={"input": "frames"})
    depth = DepthOptions(tiny_depth, backend="torch", inference=framed, short_side=28)
    detector = BackendOptions(batch=2, settings={"input": "frames"})
    pipeline = Pipeline([str(small_video)], tiny_model, "null", detector, depth=depth, plan=False)
    try:
        results = list(pipeline)
    finally:
        pipeline.close()
    assert len(results) == 40
    assert all(r.frame.pixels.ndim == 2 for r in results)
    assert all(r.depth is not None and r.depth.values.shape == (96, 128) for r in results)
