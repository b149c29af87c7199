"""Depth model output → DepthMap at source resolution, and the least-squares scale-and-shift fit
between two depth maps (used by smoothing and by fidelity)."""

from __future__ import annotations

import cv2
import numpy as np
import numpy.typing as npt

from visionrt.errors import ConfigError
from visionrt.types import DepthMap


def depth_plane(output: npt.NDArray[np.generic]) -> npt.NDArray[np.float32]:
    """One row of raw output, (H, W) or with leading axes of 1 ((1, H, W), (1, 1, H, W)), as an
    (H, W) float32 array."""
    plane = np.asarray(output)
    while plane.ndim > 2 and plane.shape[0] == 1:
        plane = plane[0]
    if plane.ndim != 2:
        raise ConfigError(
            f"depth output: expected an (H, W) map per frame, got shape {list(np.shape(output))}"
        )
    return plane.astype(np.float32, copy=False)


def nonfinite_rows(batch: npt.NDArray[np.floating]) -> npt.NDArray[np.bool_]:
    """(B,) True for each row of a (B, …) output holding a NaN or an infinity."""
    flat = np.asarray(batch).reshape(len(batch), -1)
    return np.asarray(~np.isfinite(flat).all(axis=1), np.bool_)


def depth_to_source(
    output: npt.NDArray[np.floating],
    source_hw: tuple[int, int],
    metric: bool = False,
    recomputed: bool = False,
) -> DepthMap:
    """One row of raw output → a DepthMap resized to the source frame (bilinear: unlike bicubic
    it does not overshoot at depth edges, so no negative or out-of-range depth appears)."""
    plane = depth_plane(output)
    height, width = source_hw
    if plane.shape != (height, width):
        plane = np.asarray(cv2.resize(plane, (width, height), interpolation=cv2.INTER_LINEAR))
    return DepthMap(np.ascontiguousarray(plane, np.float32), metric=metric, recomputed=recomputed)


def align_scale_shift(
    prediction: npt.NDArray[np.floating],
    reference: npt.NDArray[np.floating],
    mask: npt.NDArray[np.bool_] | None = None,
) -> tuple[float, float]:
    """(scale, shift) minimizing Σ (scale·prediction + shift − reference)² over `mask` (and
    the finite pixels of both): the closed-form least-squares fit, in float64."""
    pred = np.asarray(prediction, np.float64)
    ref = np.asarray(reference, np.float64)
    if pred.shape != ref.shape:
        raise ConfigError(
            f"depth alignment: expected equal shapes, got {pred.shape} and {ref.shape}"
        )
    valid = np.isfinite(pred) & np.isfinite(ref)
    if mask is not None:
        valid &= mask
    p, r = pred[valid], ref[valid]
    if p.size < 2:
        return float("nan"), float("nan")
    p_mean, r_mean = p.mean(), r.mean()
    variance = np.square(p - p_mean).sum()
    if variance == 0:  # a constant prediction: only the shift can be fitted
        return 0.0, float(r_mean)
    scale = float(((p - p_mean) * (r - r_mean)).sum() / variance)
    return scale, float(r_mean - scale * p_mean)
