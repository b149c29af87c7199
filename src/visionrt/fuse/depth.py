"""Depth as a fusion step: each detection's distance from the frame's depth map, and temporal
smoothing of live depth."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from visionrt.errors import ConfigError
from visionrt.fuse.base import Fused
from visionrt.postprocess.depth import align_scale_shift
from visionrt.types import DepthMap

# Part of each box a distance is taken over: its central half in width and height, so that the
# background around a person or the ground under a car weighs little in the median.
INNER_FRACTION = 0.5


def box_distance(
    depth: DepthMap, xyxy: npt.NDArray[np.floating], inner: float = INNER_FRACTION
) -> npt.NDArray[np.float32]:
    """(N,) float32: the median of `depth` over the central `inner` part (in width and in
    height) of each (x1, y1, x2, y2) box in source pixels, in `depth.units`.

    Boxes are clipped to the frame first (the inner part is that of the visible box); NaN
    where a box has no finite depth value inside, or lies outside the frame. A map still on
    its device is measured there: only the N medians come back."""
    regions = box_regions(depth.shape, xyxy, inner)
    if depth.device is not None:
        return depth.device.medians(regions)
    values = depth.values
    out = np.full(len(regions), np.nan, np.float32)
    for i, (top, bottom, left, right) in enumerate(regions):
        finite = values[top:bottom, left:right]
        finite = finite[np.isfinite(finite)]
        if finite.size:
            out[i] = np.median(finite)
    return out


def box_regions(
    shape: tuple[int, int], xyxy: npt.NDArray[np.floating], inner: float = INNER_FRACTION
) -> npt.NDArray[np.int64]:
    """(N, 4) top, bottom, left, right: the pixels of each box's central `inner` part within a
    map of `shape`, the box clipped to it first; an empty region (all zeros) for a box outside
    the frame, empty, or with NaN coordinates."""
    boxes = np.asarray(xyxy, np.float32).reshape(-1, 4)
    height, width = shape
    regions = np.zeros((len(boxes), 4), np.int64)
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
        regions[i] = (top, min(bottom, height), left, min(right, width))
    return regions


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


class DepthFuser:
    """One source's depth: the map of task `task` (smoothed in frame order when `smoother`) and
    each detection's distance from it. A frame the depth model did not run on takes the
    latest map, `depth_from` naming the frame it was made on: a frame motion gating reused
    (nothing moved), and with `hold` (depth on 1 frame in N) every frame between. While a map is
    held, a tracked object keeps the distance measured on it there (its box has moved since:
    the held map has other things at its new place), and other boxes are measured on it."""

    def __init__(
        self, task: str = "depth", smoother: DepthSmoother | None = None, hold: bool = False
    ) -> None:
        self.task, self.smoother, self.hold = task, smoother, hold
        self._latest: tuple[DepthMap, int] | None = None  # the latest map made, and its frame
        self._by_track: dict[int, float] = {}  # each track's distance on that map

    def fuse(self, fused: Fused) -> None:
        # A reused frame's results are an earlier frame's: its map is the latest one made (and
        # smoothed once, there), not a new one.
        depth = None if fused.reused else fused.results.get(self.task)
        if depth is None:
            if self._latest is None or not (self.hold or fused.reused):
                return
            depth, made_on = self._latest
            if depth.shape != fused.frame.size:  # the camera changed size
                return
            fused.depth_from = made_on
        else:
            if self.smoother is not None:  # in order per source, as EMA needs
                depth = self.smoother.smooth(fused.frame.source_id, depth, fused.frame.timestamp)
            self._latest = (depth, fused.frame.index)
        fused.depth = depth
        fused.distance = box_distance(depth, fused.detections.xyxy)
        if self.hold and fused.tracks is not None:
            self._track_distances(fused.tracks.track_id.tolist(), fused.distance, fused.depth_from)

    def _track_distances(
        self, ids: list[int], distance: npt.NDArray[np.float32], held_from: int | None
    ) -> None:
        """On the map's own frame (`held_from` None), keep each track's distance; on a frame
        holding it, give each track the distance kept for it."""
        if held_from is None:
            self._by_track = {
                track: float(value)
                for track, value in zip(ids, distance, strict=True)
                if np.isfinite(value)
            }
            return
        for i, track in enumerate(ids):
            kept = self._by_track.get(track)
            if kept is not None:
                distance[i] = kept
