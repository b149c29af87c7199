"""The 'frames' input form end to end: a backend that declares it gets decoded frames, which the
detector task letterboxes, runs and decodes on the backend's device (torch CPU tensors here,
CUDA where there is one); the null backend declares each form so each path's host share runs
alone. Results must equal the host path's."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
from conftest import HANG_SECONDS

torch = pytest.importorskip("torch")

from visionrt import BackendOptions, Pipeline, SourceOptions  # noqa: E402
from visionrt.backends import load_backend  # noqa: E402
from visionrt.backends.base import ARRAYS, FRAMES  # noqa: E402
from visionrt.backends.torch_device import DeviceRunner, bucket  # noqa: E402
from visionrt.errors import ConfigError  # noqa: E402
from visionrt.fidelity import box_iou  # noqa: E402
from visionrt.preprocess import InputLayout  # noqa: E402
from visionrt.preprocess.device import FrameSlot, StandInPinning  # noqa: E402
from visionrt.tasks import DetectTask  # noqa: E402

pytestmark = pytest.mark.torch
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def detections(
    model: Path,
    video: Path,
    backend: str,
    options: BackendOptions,
    frames: int,
    sources: int = 1,
    pixels: str = "auto",
) -> dict[tuple[str, int], object]:
    """Each (source, frame index)'s detections from a pipeline run."""
    specs = [f"s{i}={video}" for i in range(sources)]
    reading = SourceOptions(max_frames=frames, pixels=pixels)
    pipeline = Pipeline(specs, model, backend, options, source_options=reading, plan=False)
    try:
        return {(r.frame.source_name or "", r.frame.index): r.detections for r in pipeline}
    finally:
        pipeline.close()


def matched_share(expected: dict, got: dict, iou: float) -> tuple[int, float]:
    """(boxes in `expected`, share of them with a box in `got` at IoU >= `iou`)."""
    matched = total = 0
    for key, want in expected.items():
        total += len(want)
        if len(want) and len(got[key]):
            matched += int((box_iou(want.xyxy, got[key].xyxy).max(axis=1) >= iou).sum())
    return total, matched / max(1, total)


def assert_same_detections(expected: dict, got: dict, box_atol: float = 1e-3) -> None:
    assert got.keys() == expected.keys()
    for key, want in expected.items():
        have = got[key]
        assert len(have) == len(want), key
        if len(want):
            np.testing.assert_allclose(have.xyxy, want.xyxy, atol=box_atol)
            np.testing.assert_allclose(have.confidence, want.confidence, atol=1e-4)
            np.testing.assert_array_equal(have.class_id, want.class_id)


# -- the null backend's forms: plumbing and accounting, on any machine --------------------------
@pytest.mark.parametrize("form", ["float32", "uint8", "frames"])
def test_every_input_form_accounts_every_frame_of_several_sources(
    small_video: Path, tiny_model: Path, form: str
) -> None:
    options = BackendOptions(batch=3, settings={"input": form})
    pipeline = Pipeline(
        [f"c{i}={small_video}" for i in range(3)], tiny_model, "null", options, plan=False
    )
    try:
        indices: dict[str, list[int]] = {}
        for result in pipeline:
            indices.setdefault(result.frame.source_name or "", []).append(result.frame.index)
        summary = pipeline.summary()
    finally:
        pipeline.close()
    assert summary.accounted
    assert summary.frames_out == 120
    assert all(seen == list(range(40)) for seen in indices.values())
    layout = {"float32": InputLayout.NCHW_FLOAT, "uint8": InputLayout.NHWC_U8_BGR}
    assert pipeline.task.layout is layout.get(form, InputLayout.FRAMES)


def test_null_frames_on_the_cpu_stage_frames_and_skip_the_device_work(tiny_model: Path) -> None:
    backend = load_backend("null", tiny_model, BackendOptions(settings={"input": "frames"}))
    assert backend.info.input_form == FRAMES
    assert backend.stand_in
    task = DetectTask(tiny_model, backend)
    slot = task.new_buffer()
    assert isinstance(slot, FrameSlot)
    assert slot.stage
    image = np.full((48, 64, 3), 7, np.uint8)
    box = task.prepare(image, slot, None)
    (rows,) = task.infer([slot])
    assert len(task.decode(rows, box)) == 0
    assert backend._calls == 1  # the call happened: delays and injected faults apply


def test_null_frames_from_worker_processes_go_up_from_their_ring_uncopied(
    small_video: Path, tiny_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stand-in does what a CUDA device does with registered rings: no staging copy."""
    registered: list[int] = []
    monkeypatch.setattr(
        StandInPinning, "register", lambda self, address, size: registered.append(size) or True
    )
    held = {"referred": 0, "copied": 0}
    hold = FrameSlot.hold

    def counted(slot: FrameSlot, image: np.ndarray, box: object) -> None:
        hold(slot, image, box)
        assert slot.tensor is not None
        held["referred" if slot.tensor.data_ptr() == image.ctypes.data else "copied"] += 1

    monkeypatch.setattr(FrameSlot, "hold", counted)
    options = BackendOptions(batch=2, settings={"input": "frames"})
    reading = SourceOptions(workers="process", max_frames=10)
    specs = [f"c{i}={small_video}" for i in range(2)]
    pipeline = Pipeline(specs, tiny_model, "null", options, source_options=reading, plan=False)
    try:
        frames = sum(1 for _ in pipeline)
        summary = pipeline.summary()
    finally:
        pipeline.close()
    assert summary.accounted
    assert frames == 20
    # Each worker's ring, once; a worker's first frames may be decoded as BGR before it hears
    # that I420 is wanted, into a ring of their own.
    assert 2 <= len(registered) <= 4
    assert held["referred"] == 20  # every frame; the warm-up's blank frames were copied


def test_null_frames_fault_injection_fails_the_run(small_video: Path, tiny_model: Path) -> None:
    options = BackendOptions(settings={"input": "frames", "fail_after": "5"})
    pipeline = Pipeline([str(small_video)], tiny_model, "null", options, plan=False)
    try:
        with pytest.raises(Exception, match="injected failure"):
            list(pipeline)
    finally:
        pipeline.close()


@pytest.mark.parametrize(
    ("settings", "device", "message"),
    [
        ({"input": "bf16"}, "cpu", "inference.settings.input: expected one of float32, uint8"),
        ({"input": "frames"}, "npu", "backend 'null' does not run on device 'npu'"),
        ({}, "cuda", "null: device 'cuda' needs inference.settings.input=frames"),
    ],
)
def test_null_input_settings_are_checked(
    tiny_model: Path, settings: dict[str, str], device: str, message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        load_backend("null", tiny_model, BackendOptions(device=device, settings=settings))


# -- the torch backend's frames form on CPU tensors ---------------------------------------------
@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"input": "gpu"}, "inference.settings.input: expected one of auto, frames, arrays"),
        ({"streams": "0"}, "inference.settings.streams: expected 1 to 8"),
        ({"streams": "two"}, "inference.settings.streams: expected 1 to 8"),
    ],
)
def test_torch_input_settings_are_checked(
    tiny_model: Path, settings: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        load_backend("torch", tiny_model, BackendOptions(settings=settings))


def test_torch_on_cuda_takes_frames_for_batches_of_several() -> None:
    from visionrt.backends.torch import _input_form
    from visionrt.types import TensorSpec

    image = TensorSpec("images", (8, 3, 640, 640), "float32")
    assert _input_form({}, True, image, 8) == (FRAMES, 2)
    assert _input_form({}, True, image, 1) == (ARRAYS, 1)  # one frame a call: the host's
    assert _input_form({"input": "frames"}, True, image, 1) == (FRAMES, 2)
    assert _input_form({"streams": "3"}, True, image, 4) == (FRAMES, 3)
    assert _input_form({}, False, image, 8) == (ARRAYS, 1)
    dynamic = TensorSpec("images", (8, 3, None, None), "float32")
    assert _input_form({}, True, dynamic, 8) == (ARRAYS, 1)
    with pytest.raises(ConfigError, match="input size is dynamic"):
        _input_form({"input": "frames"}, True, dynamic, 8)


def test_torch_takes_arrays_on_the_cpu_unless_asked(tiny_model: Path) -> None:
    plain = load_backend("torch", tiny_model, BackendOptions())
    asked = load_backend("torch", tiny_model, BackendOptions(settings={"input": "frames"}))
    assert plain.info.input_form == ARRAYS
    assert plain.concurrency == 1
    assert asked.info.input_form == FRAMES
    assert asked.concurrency == 1


def test_tiny_model_boxes_come_back_from_the_device_path(
    small_video: Path, tiny_model: Path
) -> None:
    # The tiny model's output is a constant of batch 1: batches of one.
    expected = detections(tiny_model, small_video, "torch", BackendOptions(), 10)
    framed = BackendOptions(settings={"input": "frames"})
    got = detections(tiny_model, small_video, "torch", framed, 10)
    assert_same_detections(expected, got)
    assert all(len(d) == 1 for d in got.values())


@pytest.mark.slow
def test_demo_detections_through_the_frames_path_equal_the_host_path(
    demo_model: Path, demo_video: Path
) -> None:
    # Two sources batched by 3: batches mix sources and end partial. The device letterbox is
    # exact on these frames, so the model sees the same input and the boxes agree to rounding;
    # the frames path takes the decoder's I420 planes (converted on the device as OpenCV does),
    # so the host path is given the same pictures (source.pixels i420: OpenCV's conversion).
    framed = BackendOptions(batch=3, settings={"input": "frames"})
    host = detections(demo_model, demo_video, "torch", BackendOptions(batch=3), 6, 2, "i420")
    device = detections(demo_model, demo_video, "torch", framed, 6, sources=2)
    assert sum(len(d) for d in host.values()) >= 12
    assert_same_detections(host, device)
    # And with FFmpeg's BGR (source.pixels bgr) both ways, as before I420 frames.
    host = detections(demo_model, demo_video, "torch", BackendOptions(batch=3), 6, 2)
    device = detections(demo_model, demo_video, "torch", framed, 6, sources=2, pixels="bgr")
    assert_same_detections(host, device)


def test_tiling_and_regions_keep_the_host_path(tiny_model: Path) -> None:
    framed = BackendOptions(settings={"input": "frames"})
    assert DetectTask(tiny_model, "torch", framed).layout is InputLayout.FRAMES
    assert DetectTask(tiny_model, "torch", framed, frames=False).layout is InputLayout.NCHW_FLOAT


def test_bucket_sizes_are_powers_of_two_up_to_the_batch() -> None:
    assert [bucket(n, 32) for n in (1, 2, 3, 5, 9, 17, 32)] == [1, 2, 4, 8, 16, 32, 32]
    assert [bucket(n, 48) for n in (33, 48)] == [48, 48]
    assert bucket(70, 64) == 70  # never smaller than what it holds


def test_the_runner_hands_out_inputs_only_inside_a_scope() -> None:
    runner = DeviceRunner(
        lambda x: [x.sum(dim=(1, 2, 3))], torch.device("cpu"), torch.float32, True, (4, 4), 8,
        graphs=False, streams=1,
    )  # fmt: skip
    with pytest.raises(RuntimeError, match="device_scope"):
        runner.input(2)
    with runner.scope():
        images = runner.input(3)
        assert tuple(images.shape) == (3, 3, 4, 4)
        assert images.is_contiguous(memory_format=torch.channels_last)
        images.fill_(1.0)
        (sums,) = runner.infer(images)
    assert sums.tolist() == [48.0, 48.0, 48.0]


def test_the_runners_then_step_reads_its_named_buffers() -> None:
    runner = DeviceRunner(
        lambda x: [x.sum(dim=(1, 2, 3))], torch.device("cpu"), torch.float32, False, (2, 2), 4,
        graphs=False, streams=1,
    )  # fmt: skip

    def then(outputs: list, buffers: dict) -> list:
        return [outputs[0] * buffers["scale"][:, 0]]

    with runner.scope():
        images = runner.input(2)
        images.fill_(1.0)
        runner.buffer("scale", 2, (1,), torch.float32).copy_(torch.tensor([[2.0], [3.0]]))
        (scaled,) = runner.infer(images, then)
    assert scaled.tolist() == [24.0, 36.0]


def test_the_runner_gives_each_concurrent_batch_its_own_context() -> None:
    runner = DeviceRunner(
        lambda x: [x.clone()], torch.device("cpu"), torch.float32, False, (2, 2), 4,
        graphs=False, streams=2,
    )  # fmt: skip
    inside, release = threading.Barrier(3), threading.Event()
    seen: list[int] = []

    def batch() -> None:
        with runner.scope():
            seen.append(runner.input(4).data_ptr())
            inside.wait(timeout=HANG_SECONDS)
            release.wait(timeout=HANG_SECONDS)

    threads = [threading.Thread(target=batch) for _ in range(2)]
    for thread in threads:
        thread.start()
    inside.wait(timeout=HANG_SECONDS)  # both hold a context at once: two were made
    release.set()
    for thread in threads:
        thread.join(timeout=HANG_SECONDS)
    assert len(set(seen)) == 2


# -- CUDA ----------------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.slow
@needs_cuda
@pytest.mark.parametrize("settings", [{}, {"cuda_graphs": "true"}])
def test_cuda_frames_path_matches_the_cuda_host_path(
    demo_model: Path, demo_video: Path, settings: dict[str, str]
) -> None:
    # fp32 on both paths (tf32 off): the device letterbox equals the host's on these frames,
    # so the boxes agree as the model's own runs do (cuDNN may pick other kernels for other
    # batch sizes: by IoU, not bit for bit). Batches of 4 over 3 sources end partial, which
    # with CUDA graphs replays the smaller power-of-two graphs. The host path is given the
    # pictures the frames path converts on the device (I420, OpenCV's conversion).
    host_options = BackendOptions(device="cuda", batch=4, settings={**settings, "input": "arrays"})
    host = detections(demo_model, demo_video, "torch", host_options, 9, 3, pixels="i420")
    framed = BackendOptions(device="cuda", batch=4, settings=settings)
    device = detections(demo_model, demo_video, "torch", framed, 9, sources=3)
    total, share = matched_share(host, device, iou=0.98)
    assert total >= 18
    assert share >= 0.97
    assert matched_share(device, host, iou=0.98)[1] >= 0.97  # and nothing extra


@pytest.mark.gpu
@pytest.mark.slow
@needs_cuda
def test_cuda_fp16_frames_path_matches_fp32_by_iou(demo_model: Path, demo_video: Path) -> None:
    # The reference (batch 1: the host path) is given the frames path's pictures (I420).
    reference = detections(
        demo_model, demo_video, "torch", BackendOptions(device="cuda"), 8, pixels="i420"
    )
    options = BackendOptions(
        device="cuda", precision="fp16", batch=8, settings={"cuda_graphs": "true"}
    )
    fast = detections(demo_model, demo_video, "torch", options, 8)
    total, share = matched_share(reference, fast, iou=0.9)
    assert total >= 16
    assert share >= 0.95


@pytest.mark.gpu
@needs_cuda
def test_cuda_frames_slots_are_pinned_and_two_streams_run(tiny_model: Path) -> None:
    task = DetectTask(tiny_model, "torch", BackendOptions(device="cuda", batch=2))
    assert task.layout is InputLayout.FRAMES
    assert task.backend.concurrency == 2
    single = DetectTask(tiny_model, "torch", BackendOptions(device="cuda"))
    assert single.layout is InputLayout.NCHW_FLOAT  # batch 1: host arrays unless asked
    slot = task.new_buffer()
    task.prepare(np.zeros((48, 64, 3), np.uint8), slot, None)
    assert slot.tensor.is_pinned()


@pytest.mark.gpu
@needs_cuda
def test_null_frames_on_cuda_does_the_device_work(small_video: Path, tiny_model: Path) -> None:
    options = BackendOptions(device="cuda", batch=4, settings={"input": "frames"})
    backend = load_backend("null", tiny_model, options)
    assert not backend.stand_in
    assert backend.info.device.startswith("cuda")
    pipeline = Pipeline([str(small_video)], tiny_model, backend, options, plan=False)
    try:
        assert sum(1 for _ in pipeline) == 40
    finally:
        pipeline.close()


def test_model_only_times_a_frames_backend_on_its_device(tiny_model: Path) -> None:
    from visionrt.bench.measure import measure_model_only

    backend = load_backend("null", tiny_model, BackendOptions(settings={"input": "frames"}))
    inputs = [np.zeros((1, 3, 64, 64), np.float32)] * 2
    times = measure_model_only(backend, inputs, runs=3, warmup=1)
    assert len(times) == 3
    assert backend._calls == 4  # through infer_device, not the host arrays' infer


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("settings", [{}, {"cuda_graphs": "true"}])
def test_cuda_depth_maps_stay_on_the_device_and_give_the_host_paths_distances(
    tiny_depth: Path, settings: dict[str, str]
) -> None:
    """Depth on CUDA through the frames path (with CUDA graphs: each map copied out of the
    graph's output before the next replay): the distances taken on the device equal those on
    the same maps brought to the host, over two batches, and the maps equal the host path's."""
    import numpy as np

    from visionrt.fuse.depth import box_distance
    from visionrt.tasks.depth import DepthTask
    from visionrt.types import DepthMap

    frames = {**settings, "input": "frames"}
    framed = DepthTask(tiny_depth, "torch", BackendOptions(device="cuda", settings=frames))
    host = DepthTask(tiny_depth, "torch", BackendOptions(device="cuda", settings=settings))
    rng = np.random.default_rng(5)
    boxes = np.array([[0, 0, 60, 40], [5, 3, 30, 20], [40, 10, 58, 39]], np.float32)
    for _ in range(2):  # a second batch replays the graph over the first one's outputs
        images = [rng.integers(0, 255, (40, 60, 3), dtype=np.uint8) for _ in range(2)]
        maps = []
        for task in (framed, host):
            buffers = [task.new_buffer() for _ in images]
            geometry = [task.prepare(i, b, None) for i, b in zip(images, buffers, strict=True)]
            rows = task.infer(buffers)
            maps.append([task.decode(r, g) for r, g in zip(rows, geometry, strict=True)])
        for on_device, on_host in zip(*maps, strict=True):
            assert on_device.device is not None
            distances = box_distance(on_device, boxes)
            brought = DepthMap(on_device.values)
            np.testing.assert_allclose(distances, box_distance(brought, boxes), rtol=1e-5)
            np.testing.assert_allclose(on_device.values, on_host.values, atol=0.02)
    framed.close()
    host.close()
