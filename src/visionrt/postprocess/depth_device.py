"""A depth map kept on its model's device (torch) until the host needs it: resized to the source
there as `depth_to_source` resizes on the host (bilinear, half-pixel centres, no antialias:
OpenCV's INTER_LINEAR), and each box's median taken there, so a run that wants only distances
brings back N numbers a frame instead of the whole map."""

from __future__ import annotations

import threading

import numpy as np
import numpy.typing as npt
import torch
import torch.nn.functional as F
from torch import Tensor


class DeviceDepthMap:
    """`plane`: one (h, w) float32 map at the model's size, on its device, owned (not a CUDA
    graph's output buffer, which the next replay overwrites); `shape`: the source's (H, W).
    `types.DeviceMap`'s contract; thread-safe (the consumer takes medians, a sink may take the
    values)."""

    def __init__(self, plane: Tensor, shape: tuple[int, int]) -> None:
        self._plane = plane
        self.shape = shape
        self._lock = threading.Lock()
        self._source: Tensor | None = None

    def _at_source(self) -> Tensor:
        """The map at the source's size, on the device (made once)."""
        with self._lock:
            if self._source is None:
                plane = self._plane
                if tuple(plane.shape) != self.shape:
                    plane = F.interpolate(
                        plane[None, None], size=self.shape, mode="bilinear", align_corners=False
                    )[0, 0]
                self._source = plane.contiguous()
            return self._source

    def host(self) -> npt.NDArray[np.float32]:
        return np.ascontiguousarray(self._at_source().cpu().numpy(), np.float32)

    def medians(self, regions: npt.NDArray[np.int64]) -> npt.NDArray[np.float32]:
        """The median of the finite values in each (top, bottom, left, right) region, as
        `np.median` gives it (the mean of the two middle values of an even count); NaN where
        a region is empty or has none. All boxes at once — each region gathered into a row
        padded with NaN, one row-wise `nanquantile` — so a frame's boxes cost the same device
        calls however many they are (32 torch operations), and one copy back."""
        count = len(regions)
        heights = np.maximum(regions[:, 1] - regions[:, 0], 0) if count else regions[:, 0]
        widths = np.maximum(regions[:, 3] - regions[:, 2], 0) if count else regions[:, 0]
        if count == 0 or heights.max() == 0 or widths.max() == 0:
            return np.full(count, np.nan, np.float32)
        plane = self._at_source()
        device = plane.device
        facts = torch.as_tensor(np.stack([regions[:, 0], heights, regions[:, 2], widths], 1))
        top, height, left, width = facts.to(device).unbind(1)
        down = torch.arange(int(heights.max()), device=device)
        across = torch.arange(int(widths.max()), device=device)
        rows = (top[:, None] + down).clamp_(max=plane.shape[0] - 1)  # (B, Hm)
        cols = (left[:, None] + across).clamp_(max=plane.shape[1] - 1)  # (B, Wm)
        values = plane[rows[:, :, None], cols[:, None, :]]  # (B, Hm, Wm)
        inside = (down < height[:, None])[:, :, None] & (across < width[:, None])[:, None, :]
        # Infinities count as missing, as on the host; padding is NaN, which nanquantile skips.
        values = torch.where(inside & torch.isfinite(values), values, float("nan"))
        found = torch.nanquantile(values.reshape(count, -1), 0.5, dim=1)
        return np.asarray(found.cpu().numpy(), np.float32)
