"""A depth model's frames on its backend's device: each frame staged once in pinned memory,
uploaded as uint8, prepared there (preprocess.depth_device) into the model's input, run, and
its map checked for NaN/Inf there; only a finite flag per row comes back, and each map stays
on the device until something asks for its values (postprocess.depth_device: the distances
are taken there) (the 'frames' input form; DepthTask's host path prepares float32 arrays on
the host)."""

from __future__ import annotations

from typing import cast

import numpy as np
import numpy.typing as npt
import torch

from visionrt.backends.base import Backend, FramesBackend
from visionrt.postprocess.depth_device import DeviceDepthMap
from visionrt.preprocess.depth_device import depth_batch, depth_rows, depth_staged
from visionrt.preprocess.device import FrameSlot, one_layout, pinning_for, prepare_staged, upload
from visionrt.tasks.base import warm_up_device
from visionrt.types import DepthMap


def _pinned(shape: tuple[int, ...]) -> torch.Tensor:
    return torch.empty(shape, dtype=torch.uint8, pin_memory=True)


class DeviceDepth:
    """`backend` takes frames (BackendInfo.input_form FRAMES); a stand-in (the null backend
    on the CPU) copies as for a device and gives zero maps."""

    def __init__(self, backend: Backend, input_hw: tuple[int, int]) -> None:
        self.backend = cast(FramesBackend, backend)
        self.input_hw = input_hw
        self.device = torch.device(backend.info.device)
        self.stand_in = self.backend.stand_in
        self._stage = self.device.type != "cpu" or self.stand_in
        self._allocate = _pinned if self.device.type == "cuda" else None
        # A worker's ring is registered with it, and its frames go up from there (FrameSlot).
        self.pinning = pinning_for(self.device, self.stand_in)
        self._contexts = max(1, backend.concurrency)

    def new_slot(self) -> FrameSlot:
        return FrameSlot(self._stage, self._allocate)

    def infer(
        self, slots: list[FrameSlot]
    ) -> tuple[npt.NDArray[np.float32] | torch.Tensor, npt.NDArray[np.bool_]]:
        """Each slot's map at the model's size, (N, h, w) float32 — left on the device, a copy
        of the model's output (a CUDA graph's next replay overwrites that) — and which rows
        hold NaN/Inf (only these flags wait for the device). A stand-in's: host zeros."""
        count = len(slots)
        with self.backend.device_scope(), torch.inference_mode():
            if self.stand_in:  # the call still happens: its delay and fault injection count
                self.backend.infer_device(self.backend.device_input(count))
                return np.zeros((count, *self.input_hw), np.float32), np.zeros(count, bool)
            images = self._prepare(slots)
            maps, finite = self.backend.infer_device(images, then=depth_rows)
            maps = maps.clone()  # queued before the flags' copy, so done once they are here
            return maps, ~finite.cpu().numpy()

    @staticmethod
    def to_source(
        plane: torch.Tensor, source_hw: tuple[int, int], metric: bool, recomputed: bool
    ) -> DepthMap:
        """One row of `infer`'s maps as the frame's DepthMap, still on the device: resized to
        the source and brought to the host only when something asks for its values."""
        return DepthMap(
            metric=metric, recomputed=recomputed, device=DeviceDepthMap(plane, source_hw)
        )

    def _prepare(self, slots: list[FrameSlot]) -> torch.Tensor:
        """The batch prepared into the model's input: frames of one shape through
        `prepare_staged` (a CUDA graph where graphs are on), others as `depth_batch`."""
        if one_layout(slots) is None:
            images = self.backend.device_input(len(slots))
            depth_batch(upload(slots, self.device), images)
            return images
        return prepare_staged(self.backend, slots, None, depth_staged)

    def warm_up(self, batch: int, calls: int) -> None:
        """`calls` full batches of grey frames at the input size, after a batch of every power
        of two below it in every device context: CUDA graphs are captured here, before the run."""
        blank = np.full((*self.input_hw, 3), 114, np.uint8)
        slots = [self.new_slot() for _ in range(batch)]
        for slot in slots:
            slot.hold(blank, None)
        warm_up_device(self.infer, slots, calls, self._contexts)
