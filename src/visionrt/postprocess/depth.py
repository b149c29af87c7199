"""Depth model output → DepthMap at source resolution; distances of boxes from a depth map; the
fidelity of a depth map against a reference (AbsRel, δ<1.25 after scale-and-shift alignment);
temporal smoothing of live depth and the flicker it removes."""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np
import numpy.typing as npt

from visionrt.errors import ConfigError
from visionrt.types import DepthMap

# Part of each box a distance is taken over: its central half in width and height, so that the
# background around a person or the ground under a car weighs little in the median.
INNER_FRACTION = 0.5


def depth_plane(output: npt.NDArray[np.floating]) -> npt.NDArray[np.float32]:
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


def box_distance(
    depth: DepthMap, xyxy: npt.NDArray[np.floating], inner: float = INNER_FRACTION
) -> npt.NDArray[np.float32]:
    """(N,) float32: the median of `depth` over the central `inner` part (in width and in
    height) of each (x1, y1, x2, y2) box in source pixels, in `depth.units`.

    Boxes are clipped to the frame first (the inner part is that of the visible box); NaN
    where a box has no finite depth value inside, or lies outside the frame."""
    boxes = np.asarray(xyxy, np.float32).reshape(-1, 4)
    values = depth.values
    height, width = values.shape
    out = np.full(len(boxes), np.nan, np.float32)
    for i, (x1, y1, x2, y2) in enumerate(boxes):
        x1, x2 = np.clip((x1, x2), 0, width)
        y1, y2 = np.clip((y1, y2), 0, height)
        if not (x2 > x1 and y2 > y1):  # outside the frame, empty, or NaN coordinates
            continue
        margin_x = (x2 - x1) * (1 - inner) / 2
        margin_y = (y2 - y1) * (1 - inner) / 2
        left, top = int(np.floor(x1 + margin_x)), int(np.floor(y1 + margin_y))
        right = max(left + 1, int(np.ceil(x2 - margin_x)))
        bottom = max(top + 1, int(np.ceil(y2 - margin_y)))
        region = values[top : min(bottom, height), left : min(right, width)]
        finite = region[np.isfinite(region)]
        if finite.size:
            out[i] = np.median(finite)
    return out


# -- fidelity -------------------------------------------------------------------------------


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


# -- temporal smoothing and flicker -----------------------------------------------------------

# The scale-and-shift fit between consecutive maps is done on every FIT_STRIDE-th pixel in each
# direction: two numbers fitted on a 16th of a 576×768 map differ from the full fit by far less
# than frame-to-frame noise, and the fit then costs well under a millisecond.
FIT_STRIDE = 4


def _fit_onto(
    previous: npt.NDArray[np.float32], current: npt.NDArray[np.float32]
) -> tuple[float, float] | None:
    """(scale, shift) mapping `previous` onto `current`, fitted on a strided grid; None when no
    fit exists (too few finite pixels)."""
    grid = (slice(None, None, FIT_STRIDE), slice(None, None, FIT_STRIDE))
    scale, shift = align_scale_shift(previous[grid], current[grid])
    if not (np.isfinite(scale) and np.isfinite(shift)):
        return None
    return scale, shift


@dataclass(slots=True)
class _Smoothed:
    values: npt.NDArray[np.float32]
    timestamp: float | None
    metric: bool


class DepthSmoother:
    """Exponential moving average of each source's depth maps, for live depth (off by default:
    it trades flicker for lag on moving objects).

    `smooth` returns (1 − alpha) · current + alpha · previous, where previous is the last
    smoothed map of that source. A relative model's output (`DepthMap.metric` False) is inverse
    depth up to an unknown scale and shift that drift from frame to frame, so the previous map
    is first mapped onto the current one by the least-squares scale and shift
    (`align_scale_shift`): blending unaligned maps would mix two scales and pull the result
    toward the old frame's. The output keeps the current frame's scale. Metric maps are blended
    as they are, which `align` (default: not metric) can override.

    A source's history starts over when the map's size or metric flag changes, the timestamp
    goes backwards (a file looped, a camera restarted), or no fit exists; a NaN in the history
    gives way to the current value, and a NaN in the current map stays NaN.

    Call it in frame order per source (the pipeline's in-order fuse step); not thread-safe."""

    def __init__(self, alpha: float, align: bool | None = None) -> None:
        if not 0.0 <= alpha < 1.0:
            raise ConfigError(f"depth.smoothing: expected 0 <= alpha < 1, got {alpha}")
        self.alpha = float(alpha)
        self.align = align
        self._state: dict[int, _Smoothed] = {}

    def reset(self, source_id: int | None = None) -> None:
        """Forget one source's history (or every source's)."""
        if source_id is None:
            self._state.clear()
        else:
            self._state.pop(source_id, None)

    def smooth(self, source_id: int, depth: DepthMap, timestamp: float | None = None) -> DepthMap:
        """The smoothed map of `source_id` with `depth` (its frame at `timestamp` seconds) as
        the newest; `depth` itself when alpha is 0 or the history starts over."""
        if self.alpha == 0.0:
            return depth
        current = depth.values
        state = self._state.get(source_id)
        blended: npt.NDArray[np.float32] | None = None
        if (
            state is not None
            and state.values.shape == current.shape
            and state.metric == depth.metric
            and not (
                timestamp is not None
                and state.timestamp is not None
                and timestamp < state.timestamp
            )
        ):
            align = (not depth.metric) if self.align is None else self.align
            fit = _fit_onto(state.values, current) if align else (1.0, 0.0)
            if fit is not None:
                blended = self._blend(state.values, current, *fit)
        values = current if blended is None else blended
        self._state[source_id] = _Smoothed(values, timestamp, depth.metric)
        if blended is None:
            return depth
        return DepthMap(blended, metric=depth.metric, recomputed=depth.recomputed)

    def _blend(
        self,
        previous: npt.NDArray[np.float32],
        current: npt.NDArray[np.float32],
        scale: float,
        shift: float,
    ) -> npt.NDArray[np.float32]:
        """(1 − alpha)·current + alpha·(scale·previous + shift), accumulated in place (two
        float32 arrays instead of the plain expression's four temporaries)."""
        out = np.multiply(current, np.float32(1.0 - self.alpha), dtype=np.float32)
        out += np.multiply(previous, np.float32(self.alpha * scale), dtype=np.float32)
        out += np.float32(self.alpha * shift)
        lost = ~np.isfinite(out)
        if lost.any():  # NaN/Inf in the history gives way; the current's own NaN stays
            np.copyto(out, current, where=lost)
        return out


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
