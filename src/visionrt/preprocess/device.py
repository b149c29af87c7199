"""Letterbox decoded frames on the model's device (torch): frames go up as uint8, once, and are
resized, padded, colour-converted and scaled there, straight into the model's input tensor.

The resize is OpenCV's INTER_LINEAR for uint8 done the way its vectorised code does it, in
fixed point (weights in 1/2048, the vertical sum with its intermediate shifts), so the device
input equals `letterbox_into`'s: on the demo video every pixel (768×576 → 640×480), elsewhere
all but ~0.1 % of pixels, those within one grey level (1/255 after scaling; tests hold both).
A float bilinear resize differed from OpenCV by one level on ~8 % of pixels, enough to move a
box of an upscaled frame to IoU 0.86 against the host path's."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
from torch import Tensor

from visionrt.frames import Pinning, in_pinned_memory
from visionrt.preprocess.letterbox import PAD_VALUE
from visionrt.types import Letterbox, as_bgr

# Bytes of one frame slot reported before a frame has arrived (its size is not known yet): a
# 1080p frame, so a lane sizes its pool as for frames of that order.
FRAME_SLOT_GUESS = 1920 * 1080 * 3
# Frame sizes a slot keeps memory for: a lane's slots serve every camera, so cameras of two or
# three sizes would otherwise make a slot allocate (pin) anew at nearly every frame.
SLOT_SIZES = 3


class FrameSlot:
    """One frame on its way to the device: its decoded bytes (`Frame.pixels`: BGR, or I420 that
    `upload` converts on the device) and their letterbox.

    `stage` copies the frame into memory the slot owns (the frame's own buffer, a decoder's
    memory, is then free at once); `allocate` makes that memory, pinned for a CUDA device so
    the upload is a DMA that overlaps compute. A frame already in pinned memory (a worker's
    ring, registered through the task's `Pinning`: `in_pinned_memory`) is not copied: the slot
    refers to it, as it does to every frame without `stage` (a CPU device reads it where it
    is). The copy was most of the preprocess thread's CPU on the frames path (issue #48).
    `let_go` drops such a reference once the batch is done, so the frame's memory (a ring
    slot) goes back then, not when the slot is next used."""

    def __init__(self, stage: bool, allocate: Callable[[tuple[int, ...]], Any] | None = None):
        self.stage = stage
        self._allocate = allocate or (lambda shape: torch.from_numpy(np.empty(shape, np.uint8)))
        self.tensor: Tensor | None = None  # (H, W, 3) or I420 (H·3/2, W) uint8, host
        self.box: Letterbox | None = None
        self._kept: dict[tuple[int, ...], Tensor] = {}  # by shape, the latest last
        self._view: npt.NDArray[np.uint8] | None = None  # the host tensor's array

    @property
    def nbytes(self) -> int:
        return self.tensor.nbytes if self.tensor is not None else FRAME_SLOT_GUESS

    def hold(self, image: npt.NDArray[np.uint8], box: Letterbox | None) -> None:
        """Take `image` (as `Frame.pixels`: H×W×3 BGR or (H·3/2)×W I420, uint8) and the
        letterbox it goes in with (None: a model whose input is the whole frame resized, as a
        depth model's)."""
        self.box = box
        if not self.stage or in_pinned_memory(image):
            self.tensor = torch.from_numpy(np.ascontiguousarray(image))
            self._view = None  # the memory of its own, if any, is in `_kept`
            return
        if self._view is None or self._view.shape != image.shape:  # a size other than last
            tensor = self._kept.pop(image.shape, None)
            if tensor is None:
                tensor = self._allocate(image.shape)
                if len(self._kept) >= SLOT_SIZES:
                    del self._kept[next(iter(self._kept))]  # the size least recently held
            self._kept[image.shape] = self.tensor = tensor
            self._view = tensor.numpy()
        np.copyto(self._view, image)  # numpy copies without the GIL

    def let_go(self) -> None:
        """The batch this slot was in is done (its upload read the frame): a frame the slot only
        refers to is let go; memory of its own is kept for the next."""
        if self._view is None:
            self.tensor = None

    def bgr(self) -> npt.NDArray[np.uint8]:
        """The held frame as H×W×3 BGR on the host (converted by OpenCV from I420, as
        `Frame.image` is): for work the host does again, such as an FP32 recompute."""
        assert self.tensor is not None, "a slot is read after hold()"
        return as_bgr(self.tensor.numpy())


class CudaPinning:
    """A `Pinning` by cudaHostRegister (portable: every device's context may read it)."""

    def register(self, address: int, size: int) -> bool:
        return int(torch.cuda.cudart().cudaHostRegister(address, size, 1)) == 0

    def unregister(self, address: int) -> None:
        torch.cuda.cudart().cudaHostUnregister(address)


class StandInPinning:
    """The null backend on the CPU standing in for a device: what it registers is 'pinned' as
    a CUDA device's registered memory is, so the host does what it would do for one."""

    def register(self, address: int, size: int) -> bool:
        return True

    def unregister(self, address: int) -> None:
        pass


def pinning_for(device: torch.device, stand_in: bool) -> Pinning | None:
    """How frames' memory is made the device's to copy from: None where it reads them where
    they are (a CPU device running a model)."""
    if device.type == "cuda":
        return CudaPinning()
    return StandInPinning() if stand_in else None


def upload(slots: Sequence[FrameSlot], device: torch.device) -> list[Tensor]:
    """The slots' frames on `device` as uint8 H×W×3 BGR, copied without blocking the host where
    the memory is pinned (on the CPU, the frames themselves); I420 frames go up as they are and
    are converted there (`i420_to_bgr`), those of one size together."""
    frames: list[Tensor | None] = [None] * len(slots)
    for shape, rows in _by_shape(slots).items():
        if len(shape) == 3:  # BGR: each frame as it is
            for row in rows:
                frames[row] = _tensor(slots[row]).to(device, non_blocking=True)
            continue
        converted = i420_to_bgr(_gather(slots, rows, device))
        for index, row in enumerate(rows):
            frames[row] = converted[index]
    # unused-ignore, here and below: without torch (an extra) its types are Any.
    return frames  # type: ignore[return-value, unused-ignore]


def letterbox_slots(slots: Sequence[FrameSlot], out: Tensor) -> None:
    """`upload` and `letterbox_batch` in one, for a detector's batch: the frames of one size go
    up into one tensor (no stacking after), and are converted, resized and written into `out`
    together (`planar_levels`, `resize_planar`), as `letterbox_batch` does for each frame."""
    out.fill_(PAD_VALUE / 255.0)
    groups: dict[tuple[tuple[int, ...], tuple[int, int]], list[int]] = {}
    for row, slot in enumerate(slots):
        assert slot.box is not None, "a detector's slot holds its letterbox"
        groups.setdefault((tuple(_tensor(slot).shape), slot.box.new_hw), []).append(row)
    for (_, new_hw), rows in groups.items():
        levels = planar_levels(_gather(slots, rows, out.device))
        _place(levels, new_hw, rows, [slots[r].box for r in rows], out)  # type: ignore[misc]


def one_layout(slots: Sequence[FrameSlot]) -> tuple[tuple[int, ...], Letterbox | None] | None:
    """The frame shape and letterbox every slot shares (a batch of one camera size, the
    common case; a depth model's slots hold no letterbox), or None where they differ."""
    first = slots[0]
    shape, box = tuple(_tensor(first).shape), first.box
    for slot in slots[1:]:
        if slot.box != box or tuple(_tensor(slot).shape) != shape:
            return None
    return shape, box


def prepare_staged(
    backend: Any, slots: Sequence[FrameSlot], key: Any, fill: Callable[[Tensor, Tensor], None]
) -> Tensor:
    """A batch of one frame shape (`one_layout`) prepared into `backend`'s input (a
    FramesBackend, inside its device scope): the frames staged in a device buffer at the
    graph's size (`device_rows`; the rows past the batch hold older frames and are not read),
    then `fill(staged, input)` run by `prepare_device`, which replays it as a CUDA graph per
    (size, shape, `key`) where graphs are on. The batch's rows of the input."""
    count, shape = len(slots), tuple(_tensor(slots[0]).shape)
    size = backend.device_rows(count)
    staged = backend.device_buffer(f"frames {shape}", size, shape, torch.uint8)
    stage_slots(slots, staged)
    images = backend.device_input(size)
    backend.prepare_device((size, shape, key), lambda: fill(staged, images))
    return images[:count]


def stage_slots(slots: Sequence[FrameSlot], staged: Tensor) -> None:
    """Each slot's frame copied into its row of `staged` (one shape, on the device: a buffer
    that stays where a CUDA graph reads it), without blocking the host where it is pinned."""
    for index, slot in enumerate(slots):
        staged[index].copy_(_tensor(slot), non_blocking=True)


def letterbox_staged(staged: Tensor, box: Letterbox, out: Tensor) -> None:
    """`staged`'s frames (BGR or I420, one shape, on the device) letterboxed into the same rows
    of `out` at one `box`, as `letterbox_slots` does: the part of a batch's preparing that a
    CUDA graph can hold (fixed shapes and addresses)."""
    out.fill_(PAD_VALUE / 255.0)
    rows = range(staged.shape[0])
    _place(planar_levels(staged), box.new_hw, rows, [box] * len(rows), out)


def _tensor(slot: FrameSlot) -> Tensor:
    assert slot.tensor is not None, "a slot is uploaded after hold()"
    return slot.tensor


def _by_shape(slots: Sequence[FrameSlot]) -> dict[tuple[int, ...], list[int]]:
    groups: dict[tuple[int, ...], list[int]] = {}
    for row, slot in enumerate(slots):
        groups.setdefault(tuple(_tensor(slot).shape), []).append(row)
    return groups


def _gather(slots: Sequence[FrameSlot], rows: Sequence[int], device: torch.device) -> Tensor:
    """The frames of `rows` (one shape) in one new tensor on `device` (`stage_slots`)."""
    first = _tensor(slots[rows[0]])
    batch = torch.empty((len(rows), *first.shape), dtype=torch.uint8, device=device)
    stage_slots([slots[row] for row in rows], batch)
    return batch


# OpenCV's BT.601 limited-range YUV → RGB in fixed point (1/2**20), the coefficients of its
# COLOR_YUV2BGR_I420: R = 1.164 (Y - 16) + 1.596 (V - 128), G = ... - 0.813 (V - 128) - 0.391
# (U - 128), B = ... + 2.018 (U - 128).
_CY, _CUB, _CUG, _CVG, _CVR, _SHIFT = 1220542, 2116026, -409993, -852492, 1673527, 20


def i420_to_bgr(planes: Tensor) -> Tensor:
    """(N, H·3/2, W) uint8 I420 (even H and W) → (N, H, W, 3) uint8 BGR, equal to
    cv2.cvtColor(COLOR_YUV2BGR_I420) pixel for pixel (each chroma sample serves its 2×2 block)."""
    return planar_levels(planes).to(torch.uint8).permute(0, 2, 3, 1).contiguous()


def planar_levels(frames: Tensor) -> Tensor:
    """(N, H, W, 3) BGR or (N, H·3/2, W) I420 uint8 frames → (N, 3, H, W) int32 BGR levels
    (0-255), planes contiguous: what the resize reads. I420 is converted as OpenCV does
    (`i420_to_bgr`); each chroma term is added to its 2×2 block of luma by broadcasting."""
    if frames.dim() == 4:
        return frames.permute(0, 3, 1, 2).to(torch.int32, memory_format=torch.contiguous_format)
    count, rows, width = frames.shape
    height = rows * 2 // 3
    flat = frames.reshape(count, rows * width)
    luma_size, chroma_size = height * width, (height // 2) * (width // 2)
    chroma_hw = (count, height // 2, width // 2)
    u = flat[:, luma_size : luma_size + chroma_size].reshape(chroma_hw).to(torch.int32) - 128
    v = flat[:, luma_size + chroma_size :].reshape(chroma_hw).to(torch.int32) - 128
    luma = flat[:, :luma_size].reshape(count, height, width).to(torch.int32)
    luma = (luma - 16).clamp_(min=0).mul_(_CY).add_(1 << (_SHIFT - 1))
    blocks = luma.view(count, height // 2, 2, width // 2, 2)
    levels = torch.empty((count, 3, height, width), dtype=torch.int32, device=frames.device)
    for channel, term in enumerate((_CUB * u, _CVG * v + _CUG * u, _CVR * v)):  # B, G, R
        into = levels[:, channel].view(count, height // 2, 2, width // 2, 2)
        torch.add(blocks, term[:, :, None, :, None], out=into)
    levels >>= _SHIFT
    return levels.clamp_(0, 255)


_WEIGHTS: dict[tuple[int, int, str], tuple[Tensor, Tensor, Tensor, Tensor]] = {}


def _weights(size: int, new: int, device: torch.device) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """OpenCV's INTER_LINEAR taps for `size` → `new` pixels along one axis: the first and
    second source index of each output pixel and their weights in 1/2048 (cached)."""
    key = (size, new, str(device))
    if key not in _WEIGHTS:
        place = ((np.arange(new) + 0.5) * (size / new) - 0.5).astype(np.float32)
        first = np.floor(place).astype(np.int64)
        frac = place - first
        low, high = first < 0, first >= size - 1  # the borders repeat the edge pixel
        frac[low | high] = 0
        first[low], first[high] = 0, size - 1
        second = np.minimum(first + 1, size - 1)
        near = np.rint((1 - frac) * 2048).astype(np.int32)
        far = np.rint(frac * 2048).astype(np.int32)
        _WEIGHTS[key] = tuple(  # type: ignore[assignment, unused-ignore]
            torch.from_numpy(a).to(device) for a in (first, second, near, far)
        )
    return _WEIGHTS[key]


def resize_planar(levels: Tensor, new_hw: tuple[int, int]) -> Tensor:
    """(N, C, H, W) int32 levels → (N, C, h, w) int32 levels, as cv2.resize(INTER_LINEAR) gives
    them for uint8 (its fixed-point horizontal pass, then the vertical one with its shifts)."""
    (height, width), device = levels.shape[2:], levels.device
    x0, x1, a0, a1 = _weights(width, new_hw[1], device)
    y0, y1, b0, b1 = _weights(height, new_hw[0], device)
    rows = levels.index_select(3, x0).mul_(a0)
    rows += levels.index_select(3, x1).mul_(a1)
    top = rows.index_select(2, y0)
    top >>= 4
    top.mul_(b0[:, None])
    top >>= 16
    bottom = rows.index_select(2, y1)
    bottom >>= 4
    bottom.mul_(b1[:, None])
    bottom >>= 16
    top += bottom
    top += 2
    top >>= 2
    return top.clamp_(0, 255)


def letterbox_batch(frames: Sequence[Tensor], boxes: Sequence[Letterbox], out: Tensor) -> None:
    """Write each frame (H×W×3 BGR uint8 on `out`'s device) letterboxed into its row of `out`
    ((N, 3, h, w) float, RGB in [0, 1]) as `letterbox_into` does on the host: one resize
    (`resize_planar`), padding 114. Frames of one size are resized together."""
    out.fill_(PAD_VALUE / 255.0)
    groups: dict[tuple[tuple[int, int], tuple[int, int]], list[int]] = {}
    for row, (frame, box) in enumerate(zip(frames, boxes, strict=True)):
        groups.setdefault((tuple(frame.shape[:2]), box.new_hw), []).append(row)  # type: ignore[arg-type, unused-ignore]
    for (_, new_hw), rows in groups.items():
        stacked = torch.stack([frames[r] for r in rows])
        _place(planar_levels(stacked), new_hw, rows, [boxes[r] for r in rows], out)


def _place(
    levels: Tensor,
    new_hw: tuple[int, int],
    rows: Sequence[int],
    boxes: Sequence[Letterbox],
    out: Tensor,
) -> None:
    """`levels` (BGR, one frame size) resized to `new_hw` and written as RGB in [0, 1] into
    `out`'s `rows` at their boxes: one copy where the rows follow each other at one place (a
    batch of one camera size), one a row otherwise."""
    if tuple(levels.shape[2:]) != new_hw:
        levels = resize_planar(levels, new_hw)
    planes = levels.flip(1).float().mul_(1.0 / 255.0)  # BGR → RGB
    new_h, new_w = new_hw
    places = {(box.top, box.left) for box in boxes}
    if len(places) == 1 and list(rows) == list(range(rows[0], rows[0] + len(rows))):
        top, left = places.pop()
        out[rows[0] : rows[0] + len(rows), :, top : top + new_h, left : left + new_w] = planes
        return
    for index, (row, box) in enumerate(zip(rows, boxes, strict=True)):
        out[row, :, box.top : box.top + new_h, box.left : box.left + new_w] = planes[index]
