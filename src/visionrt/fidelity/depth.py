"""The fidelity of a depth map against a reference (AbsRel, δ<1.25 after scale-and-shift
alignment) and the frame-to-frame flicker that smoothing removes."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from visionrt.postprocess.depth import align_scale_shift


@dataclass(frozen=True, slots=True)
class DepthFidelity:
    """A prediction against a reference after alignment: `abs_rel` = mean |d − d*| / d*,
    `delta1` = share of pixels with max(d/d*, d*/d) < 1.25 (both in depth space), over
    `pixels` valid pixels; `scale` and `shift` map the prediction onto the reference."""

    abs_rel: float
    delta1: float
    scale: float
    shift: float
    pixels: int


# Depth is capped at the reference's 1st-percentile inverse depth: without a cap, the few far
# pixels whose inverse depth is ~0 (after a ReLU) turn a 0.01 shift into AbsRel in the hundreds.
FAR_QUANTILE = 0.01


def depth_fidelity(
    prediction: npt.NDArray[np.floating],
    reference: npt.NDArray[np.floating],
    inverse: bool = True,
) -> DepthFidelity:
    """AbsRel and δ<1.25 of `prediction` against `reference` (same shape) after per-frame
    least-squares scale-and-shift alignment.

    `inverse` True (relative models such as Depth Anything's, whose output is inverse depth up
    to an unknown scale and shift): the fit is done on the inverse depth, where that ambiguity
    is affine (MiDaS' protocol); both are then inverted to depth for the metrics, over the
    pixels where the reference is positive; both are floored at the reference's FAR_QUANTILE
    inverse depth (depth capped at the far end of the reference's range, as benchmarks cap at
    a maximum depth) so that the near-zero values of far pixels do not blow AbsRel up.
    `inverse` False (metric models): aligned and compared as they are, over the pixels where
    the reference is positive."""
    pred = np.asarray(prediction, np.float64)
    ref = np.asarray(reference, np.float64)
    valid = np.isfinite(ref) & (ref > 0)
    scale, shift = align_scale_shift(pred, ref, valid)
    valid &= np.isfinite(pred)
    if not valid.any() or not np.isfinite(scale):
        nan = float("nan")
        return DepthFidelity(nan, nan, scale, shift, 0)
    aligned = scale * pred[valid] + shift
    target = ref[valid]
    if inverse:
        floor = np.quantile(target, FAR_QUANTILE)
        aligned = 1.0 / np.maximum(aligned, floor)
        target = 1.0 / np.maximum(target, floor)
    else:
        aligned = np.maximum(aligned, np.finfo(np.float64).tiny)
    abs_rel = float(np.mean(np.abs(aligned - target) / target))
    ratio = np.maximum(aligned / target, target / aligned)
    return DepthFidelity(abs_rel, float(np.mean(ratio < 1.25)), scale, shift, int(valid.sum()))


def depth_flicker(
    previous: npt.NDArray[np.floating],
    current: npt.NDArray[np.floating],
    static: npt.NDArray[np.bool_] | None = None,
) -> float:
    """Frame-to-frame flicker of two consecutive depth maps: the mean |aligned current −
    previous| over the `static` pixels (those where nothing moved; all when None), relative to
    the mean |previous| there. The current map is first scale-and-shift aligned onto the
    previous one (over the same pixels), so a relative model's drift of scale is not counted,
    only changes of shape. 0 is no flicker; NaN when fewer than two pixels qualify."""
    prev = np.asarray(previous, np.float64)
    cur = np.asarray(current, np.float64)
    valid = np.isfinite(prev) & np.isfinite(cur)
    if static is not None:
        valid &= static
    scale, shift = align_scale_shift(cur, prev, valid)
    if valid.sum() < 2 or not np.isfinite(scale):
        return float("nan")
    reference = np.abs(prev[valid]).mean()
    if reference == 0:
        return float("nan")
    change = np.abs(scale * cur[valid] + shift - prev[valid]).mean()
    return float(change / reference)
