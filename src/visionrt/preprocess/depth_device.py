"""The depth model's input made on its device (torch): decoded frames go up as uint8, once,
and are resized, colour-converted and normalised there, straight into the model's input
tensor — what `depth_into` does on the host into float32 (4× the bytes to upload).

The resize is bicubic, as `depth_into`'s (OpenCV's INTER_CUBIC, Depth Anything's own
preprocessing): torch's bicubic has OpenCV's kernel (A = −0.75) and border (edge pixels
repeated); rounded and saturated to uint8 levels as OpenCV's uint8 resize leaves them, it gives
`depth_into`'s levels on all but ~0.02 % of the pixels of the demo video at 518, 364 and 266
(those one level apart), upscaled frames too (tests hold it)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from visionrt.preprocess.depth import IMAGENET_MEAN, IMAGENET_STD
from visionrt.preprocess.device import planar_levels


def depth_batch(frames: Sequence[Tensor], out: Tensor) -> None:
    """Write each frame (H×W×3 BGR uint8 on `out`'s device) into its row of `out` ((N, 3, h,
    w), any float dtype) as `depth_into` does: bicubic to (h, w), RGB, (x/255 − mean)/std.
    Frames of one size are resized together."""
    groups: dict[tuple[int, ...], list[int]] = {}
    for row, frame in enumerate(frames):
        groups.setdefault(tuple(frame.shape), []).append(row)
    for rows in groups.values():
        stacked = torch.stack([frames[r] for r in rows]) if len(rows) > 1 else frames[rows[0]][None]
        planes = _normalised(stacked.permute(0, 3, 1, 2).flip(1).float(), out)
        if len(rows) == len(frames):
            out.copy_(planes)
        else:
            out[torch.tensor(rows, device=out.device)] = planes


def depth_staged(staged: Tensor, out: Tensor) -> None:
    """`staged`'s frames (BGR or I420, one shape, on the device) into the same rows of `out`, as
    `depth_batch` does: the part of a batch's preparing a CUDA graph can hold."""
    levels = planar_levels(staged)  # BGR planes, as `upload` gives them
    out.copy_(_normalised(levels.flip(1).float(), out))


def _normalised(planes: Tensor, out: Tensor) -> Tensor:
    """(N, 3, H, W) float RGB levels → bicubic to `out`'s size, as uint8 levels, normalised."""
    height, width = out.shape[2:4]
    if tuple(planes.shape[2:]) != (height, width):
        planes = F.interpolate(planes, size=(height, width), mode="bicubic", align_corners=False)
        planes = planes.round_().clamp_(0, 255)
    scale, offset = _normalisation(out.device)
    return planes.mul_(scale).sub_(offset).to(out.dtype)


_NORMALISATION: dict[str, tuple[Tensor, Tensor]] = {}


def _normalisation(device: torch.device) -> tuple[Tensor, Tensor]:
    """ImageNet's 1/(255·std) and mean/std on `device`, made once: a copy from the host each
    batch would wait for the work queued on the stream before it."""
    key = str(device)
    if key not in _NORMALISATION:
        scale = torch.tensor([1.0 / (255.0 * s) for s in IMAGENET_STD]).view(1, 3, 1, 1)
        offset = torch.tensor([m / s for m, s in zip(IMAGENET_MEAN, IMAGENET_STD, strict=True)])
        _NORMALISATION[key] = scale.to(device), offset.view(1, 3, 1, 1).to(device)
    return _NORMALISATION[key]


def depth_rows(outputs: list[Tensor], buffers: dict[str, Tensor]) -> list[Tensor]:
    """After the model, on the device (in its CUDA graph): each row's map as (N, h, w)
    float32, and whether every value of it is finite (the NaN/Inf guard's verdict, so only
    a flag per row decides on the host whether a row is recomputed)."""
    maps = outputs[0].float()
    maps = maps.reshape(maps.shape[0], *maps.shape[-2:])
    return [maps, torch.isfinite(maps).flatten(1).all(1)]
