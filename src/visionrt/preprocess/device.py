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

    `stage` copies the frame into memory the slot owns (the frame's own buffer, a decoder's or
    a worker's shared memory, is then free at once); `allocate` makes that memory, pinned for
    a CUDA device so the upload is a DMA that overlaps compute. Without `stage` the slot only
    refers to the frame (a CPU device reads it where it is)."""

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
        if not self.stage:
            self.tensor = torch.from_numpy(np.ascontiguousarray(image))
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

    def bgr(self) -> npt.NDArray[np.uint8]:
        """The held frame as H×W×3 BGR on the host (converted by OpenCV from I420, as
        `Frame.image` is): for work the host does again, such as an FP32 recompute."""
        assert self.tensor is not None, "a slot is read after hold()"
        return as_bgr(self.tensor.numpy())


def upload(slots: Sequence[FrameSlot], device: torch.device) -> list[Tensor]:
    """The slots' frames on `device` as uint8 H×W×3 BGR, copied without blocking the host where
    the memory is pinned (on the CPU, the frames themselves); I420 frames go up as they are and
    are converted there (`i420_to_bgr`), those of one size together."""
    frames = []
    planar: dict[tuple[int, ...], list[int]] = {}
    for row, slot in enumerate(slots):
        assert slot.tensor is not None, "a slot is uploaded after hold()"
        frames.append(slot.tensor.to(device, non_blocking=True))
        if slot.tensor.dim() == 2:
            planar.setdefault(tuple(slot.tensor.shape), []).append(row)
    for rows in planar.values():
        converted = i420_to_bgr(torch.stack([frames[r] for r in rows]))
        for index, row in enumerate(rows):
            frames[row] = converted[index]
    return frames


# OpenCV's BT.601 limited-range YUV → RGB in fixed point (1/2**20), the coefficients of its
# COLOR_YUV2BGR_I420: R = 1.164 (Y - 16) + 1.596 (V - 128), G = ... - 0.813 (V - 128) - 0.391
# (U - 128), B = ... + 2.018 (U - 128).
_CY, _CUB, _CUG, _CVG, _CVR, _SHIFT = 1220542, 2116026, -409993, -852492, 1673527, 20


def i420_to_bgr(planes: Tensor) -> Tensor:
    """(N, H·3/2, W) uint8 I420 (even H and W) → (N, H, W, 3) uint8 BGR, equal to
    cv2.cvtColor(COLOR_YUV2BGR_I420) pixel for pixel (each chroma sample serves its 2×2 block)."""
    count, rows, width = planes.shape
    height = rows * 2 // 3
    flat = planes.reshape(count, rows * width)
    luma_size, chroma_size = height * width, (height // 2) * (width // 2)
    chroma_hw = (count, height // 2, width // 2)
    u = flat[:, luma_size : luma_size + chroma_size].reshape(chroma_hw).to(torch.int32) - 128
    v = flat[:, luma_size + chroma_size :].reshape(chroma_hw).to(torch.int32) - 128
    luma = flat[:, :luma_size].reshape(count, height, width).to(torch.int32)
    luma = (luma - 16).clamp_(min=0) * _CY
    half = 1 << (_SHIFT - 1)
    channels = []
    for term in (half + _CUB * u, half + _CVG * v + _CUG * u, half + _CVR * v):  # B, G, R
        full = term.repeat_interleave(2, dim=1).repeat_interleave(2, dim=2)
        channels.append(((luma + full) >> _SHIFT).clamp_(0, 255))
    return torch.stack(channels, dim=-1).to(torch.uint8)


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
        _WEIGHTS[key] = tuple(  # type: ignore[assignment]
            torch.from_numpy(a).to(device) for a in (first, second, near, far)
        )
    return _WEIGHTS[key]


def resize_linear(frames: Tensor, new_hw: tuple[int, int]) -> Tensor:
    """(N, H, W, C) uint8 → (N, h, w, C) int32 levels, as cv2.resize(INTER_LINEAR) gives them."""
    (height, width), device = frames.shape[1:3], frames.device
    x0, x1, a0, a1 = _weights(width, new_hw[1], device)
    y0, y1, b0, b1 = _weights(height, new_hw[0], device)
    pixels = frames.to(torch.int32)
    rows = pixels.index_select(2, x0) * a0[:, None] + pixels.index_select(2, x1) * a1[:, None]
    top = ((rows.index_select(1, y0) >> 4) * b0[:, None, None]) >> 16
    bottom = ((rows.index_select(1, y1) >> 4) * b1[:, None, None]) >> 16
    return ((top + bottom + 2) >> 2).clamp_(0, 255)


def letterbox_batch(frames: Sequence[Tensor], boxes: Sequence[Letterbox], out: Tensor) -> None:
    """Write each frame (H×W×3 BGR uint8 on `out`'s device) letterboxed into its row of `out`
    ((N, 3, h, w) float, RGB in [0, 1]) as `letterbox_into` does on the host: one resize
    (`resize_linear`), padding 114. Frames of one size are resized together."""
    out.fill_(PAD_VALUE / 255.0)
    groups: dict[tuple[tuple[int, int], tuple[int, int]], list[int]] = {}
    for row, (frame, box) in enumerate(zip(frames, boxes, strict=True)):
        groups.setdefault((tuple(frame.shape[:2]), box.new_hw), []).append(row)  # type: ignore[arg-type]
    for ((src_h, src_w), new_hw), rows in groups.items():
        stacked = torch.stack([frames[r] for r in rows]) if len(rows) > 1 else frames[rows[0]][None]
        levels = stacked if new_hw == (src_h, src_w) else resize_linear(stacked, new_hw)
        planes = levels.permute(0, 3, 1, 2).flip(1).float()  # BGR → RGB, channels first
        planes = planes.mul_(1.0 / 255.0).to(out.dtype)
        new_h, new_w = new_hw
        for index, row in enumerate(rows):
            box = boxes[row]
            out[row, :, box.top : box.top + new_h, box.left : box.left + new_w] = planes[index]
