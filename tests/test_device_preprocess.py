"""The device letterbox (torch, run here on CPU tensors) against the host's `letterbox_into`."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest

torch = pytest.importorskip("torch")

from visionrt.preprocess import InputLayout, compute_letterbox, letterbox_into  # noqa: E402
from visionrt.preprocess.device import FrameSlot, letterbox_batch, upload  # noqa: E402
from visionrt.sources import SourceOptions, open_source  # noqa: E402

pytestmark = pytest.mark.torch


def host_input(image: np.ndarray, input_hw: tuple[int, int]) -> np.ndarray:
    out = np.empty((3, *input_hw), np.float32)
    letterbox_into(image, out, compute_letterbox(image.shape[:2], input_hw), InputLayout.NCHW_FLOAT)
    return out


def device_input(images: list[np.ndarray], input_hw: tuple[int, int], dtype=None) -> np.ndarray:
    out = torch.empty((len(images), 3, *input_hw), dtype=dtype or torch.float32)
    boxes = [compute_letterbox(image.shape[:2], input_hw) for image in images]
    letterbox_batch([torch.from_numpy(image) for image in images], boxes, out)
    return out.float().numpy()


def textured(height: int, width: int, seed: int) -> np.ndarray:
    """Noise with edges and gradients: every resize tap matters."""
    rng = np.random.default_rng(seed)
    image = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
    image[:, : width // 3] = np.linspace(0, 255, width // 3, dtype=np.uint8)[None, :, None]
    return image


@pytest.fixture(scope="module")
def demo_frames(demo_video: Path) -> list[np.ndarray]:
    source = open_source(str(demo_video), 0, SourceOptions(mode="file", max_frames=3))
    try:
        return [frame.image.copy() for frame in source.frames()]
    finally:
        source.close()


def test_demo_frames_are_letterboxed_exactly_as_on_the_host(demo_frames: list[np.ndarray]) -> None:
    # 768×576 → 640×480 inside 640×640: OpenCV's fixed-point resize reproduced pixel for pixel.
    device = device_input(demo_frames, (640, 640))
    for row, frame in enumerate(demo_frames):
        np.testing.assert_array_equal(device[row], host_input(frame, (640, 640)))


@pytest.mark.parametrize(
    ("height", "width", "input_hw"),
    [
        (240, 320, (640, 640)),  # upscaled 2x
        (500, 333, (640, 640)),  # odd sizes, padded left and right
        (1080, 1920, (384, 640)),  # downscaled 3x, exactly fitting
        (97, 131, (96, 128)),  # a hair smaller
        (640, 640, (640, 640)),  # no resize at all
        (48, 2000, (320, 640)),  # extreme aspect: 15 rows of content
    ],
)
def test_other_sizes_are_within_one_level_on_a_few_pixels(
    height: int, width: int, input_hw: tuple[int, int]
) -> None:
    image = textured(height, width, seed=height)
    difference = np.abs(device_input([image], input_hw)[0] - host_input(image, input_hw)) * 255
    assert difference.max() <= 1.0 + 1e-4
    assert (difference > 1e-3).mean() <= 0.005  # seen: 0.08 % at most


def test_a_batch_of_mixed_sizes_gives_each_row_its_own_letterbox() -> None:
    images = [textured(120, 160, 1), textured(300, 200, 2), textured(120, 160, 3)]
    device = device_input(images, (128, 128))
    for row, image in enumerate(images):
        host = host_input(image, (128, 128))
        assert np.abs(device[row] - host).max() * 255 <= 1.0 + 1e-4
    # padding is the host's grey, wherever the content is not
    assert device[1, :, :, :5].max() == pytest.approx(114 / 255)


def test_half_precision_output_is_the_float_input_rounded() -> None:
    image = textured(200, 300, 5)
    full = device_input([image], (256, 256))
    half = device_input([image], (256, 256), dtype=torch.float16)
    np.testing.assert_allclose(half, full, atol=1e-3)


def test_a_stale_row_is_fully_overwritten() -> None:
    out = torch.full((1, 3, 64, 64), float("nan"))
    image = textured(30, 60, 7)
    letterbox_batch([torch.from_numpy(image)], [compute_letterbox((30, 60), (64, 64))], out)
    assert torch.isfinite(out).all()


def test_a_staged_slot_owns_its_copy_and_an_unstaged_one_refers_to_the_frame() -> None:
    image = textured(20, 30, 8)
    box = compute_letterbox(image.shape[:2], (32, 32))
    staged, referring = FrameSlot(stage=True), FrameSlot(stage=False)
    staged.hold(image, box)
    referring.hold(image, box)
    image[:] = 0  # the decoder reuses its buffer
    assert staged.tensor is not None
    assert int(staged.tensor.sum()) > 0
    assert referring.tensor is not None
    assert int(referring.tensor.sum()) == 0
    assert staged.box == box
    tensor = staged.tensor
    staged.hold(textured(20, 30, 9), box)
    assert staged.tensor is tensor  # same size: the slot's memory is reused
    staged.hold(textured(40, 30, 9), box)
    assert tuple(staged.tensor.shape) == (40, 30, 3)
    frames = upload([staged, referring], torch.device("cpu"))
    assert [tuple(f.shape) for f in frames] == [(40, 30, 3), (20, 30, 3)]


def test_the_slot_uses_the_allocator_it_is_given() -> None:
    made: list[tuple[int, ...]] = []

    def allocate(shape: tuple[int, ...]) -> object:
        made.append(shape)
        return torch.empty(shape, dtype=torch.uint8)

    slot = FrameSlot(stage=True, allocate=allocate)
    assert slot.nbytes > 0  # before any frame: a guess the lane sizes its pool by
    box = compute_letterbox((10, 12), (32, 32))
    slot.hold(textured(10, 12, 1), box)
    assert made == [(10, 12, 3)]
    assert slot.nbytes == 360
    # Cameras of several sizes share the slots: each size's memory is kept, not made anew.
    for _ in range(3):
        for height in (10, 20, 30):
            slot.hold(textured(height, 12, 2), box)
    assert made == [(10, 12, 3), (20, 12, 3), (30, 12, 3)]
    slot.hold(textured(40, 12, 3), box)  # a fourth size: the least recently held one goes
    slot.hold(textured(10, 12, 3), box)
    assert made[-2:] == [(40, 12, 3), (10, 12, 3)]


def test_cv2_is_the_reference_it_matches() -> None:
    # Guards the claim of the module: the host path resizes with cv2.INTER_LINEAR.
    image = textured(50, 70, 3)
    box = compute_letterbox(image.shape[:2], (64, 64))
    host = host_input(image, (64, 64))
    resized = cv2.resize(image, box.new_hw[::-1], interpolation=cv2.INTER_LINEAR)
    expected = resized[:, :, ::-1].transpose(2, 0, 1).astype(np.float32) / np.float32(255)
    rows = slice(box.top, box.top + box.new_hw[0])
    cols = slice(box.left, box.left + box.new_hw[1])
    np.testing.assert_allclose(host[:, rows, cols], expected, atol=1e-7)


def test_slots_of_mixed_sizes_and_pixels_go_in_as_their_frames_do() -> None:
    """A detector's batch straight from its slots (`letterbox_slots`: each size copied up into
    one tensor, converted and placed together) equals the frames uploaded one by one and
    letterboxed (`letterbox_batch`), value for value: BGR and I420 frames of three sizes, one
    size's rows apart, one row a frame that needs no resize."""
    from visionrt.preprocess.device import letterbox_slots

    input_hw = (64, 64)
    bgr = [textured(48, 40, 1), textured(30, 60, 2), textured(48, 40, 3), textured(64, 64, 4)]
    i420 = [cv2.cvtColor(textured(40, 36, s), cv2.COLOR_BGR2YUV_I420) for s in (5, 6)]
    slots = []
    for pixels in [bgr[0], i420[0], bgr[1], bgr[2], i420[1], bgr[3]]:
        hw = pixels.shape[:2] if pixels.ndim == 3 else (pixels.shape[0] * 2 // 3, pixels.shape[1])
        slot = FrameSlot(stage=True)
        slot.hold(pixels, compute_letterbox(hw, input_hw))
        slots.append(slot)
    expected = torch.empty((len(slots), 3, *input_hw))
    letterbox_batch(upload(slots, torch.device("cpu")), [s.box for s in slots], expected)
    got = torch.full_like(expected, 7.0)  # whatever a previous batch left
    letterbox_slots(slots, got)
    assert torch.equal(got, expected)
    # And the I420 rows are OpenCV's BGR letterboxed on the host (an upscale: within one
    # level, as for every size but the demo's; see the module's docstring).
    for row, pixels in ((1, i420[0]), (4, i420[1])):
        host = host_input(cv2.cvtColor(pixels, cv2.COLOR_YUV2BGR_I420), input_hw)
        assert np.abs(got[row].numpy() - host).max() <= 1 / 255 + 1e-6


def test_a_staged_batch_of_one_layout_is_what_letterbox_slots_makes() -> None:
    """One camera size in one box: staged into a buffer of the graph's size (its last rows
    older frames), prepared by `letterbox_staged`; the batch's rows equal `letterbox_slots`'."""
    from visionrt.preprocess.device import (
        letterbox_slots,
        letterbox_staged,
        one_layout,
        stage_slots,
    )

    input_hw = (64, 64)
    frames = [cv2.cvtColor(textured(40, 36, s), cv2.COLOR_BGR2YUV_I420) for s in range(3)]
    box = compute_letterbox((40, 36), input_hw)
    slots = []
    for pixels in frames:
        slot = FrameSlot(stage=True)
        slot.hold(pixels, box)
        slots.append(slot)
    layout = one_layout(slots)
    assert layout == (frames[0].shape, box)
    staged = torch.from_numpy(np.stack([frames[2]] * 4))  # a graph of 4 rows: 1 stale
    stage_slots(slots, staged)
    got = torch.full((4, 3, *input_hw), 7.0)
    letterbox_staged(staged, box, got)
    expected = torch.empty((3, 3, *input_hw))
    letterbox_slots(slots, expected)
    assert torch.equal(got[:3], expected)
    other = FrameSlot(stage=True)
    other.hold(textured(40, 36, 9), box)  # BGR of the same size: another shape
    assert one_layout([*slots, other]) is None


class _Registered:
    """Memory a `Pinning` registered, as a worker's ring slot is (`ring._Lease`)."""

    pinned = True

    def __init__(self, array: np.ndarray) -> None:
        self.array = array  # kept alive with the view
        self.__array_interface__ = array.__array_interface__


def test_a_frame_in_pinned_memory_is_referred_to_and_let_go_after_its_batch() -> None:
    image = np.asarray(_Registered(textured(20, 30, 4)))
    box = compute_letterbox(image.shape[:2], (32, 32))
    slot = FrameSlot(stage=True)
    slot.hold(textured(20, 30, 5), box)  # a frame elsewhere: copied into the slot's memory
    own = slot.tensor
    assert own is not None
    slot.hold(image, box)
    assert slot.tensor is not None
    assert slot.tensor.data_ptr() == image.ctypes.data  # the upload reads it where it is
    slot.let_go()
    assert slot.tensor is None  # the frame's memory (a ring slot) may go back now
    slot.hold(image[:, ::2], box)  # not contiguous: copied, as any frame
    assert slot.tensor is not None
    assert slot.tensor.data_ptr() != image.ctypes.data
    slot.hold(textured(20, 30, 6), box)
    assert slot.tensor is own  # the slot's own memory was kept for the next copy
    slot.let_go()
    assert slot.tensor is own
