"""Tiles' detections merged into the frame's: which box edges a tile cut, which partial views a
neighbouring tile saw past, and the greedy merge across tiles (SAHI-style)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from visionrt.types import Detections


def cut_sides(
    xyxy: npt.NDArray[np.float32],
    window: npt.NDArray[np.int32],
    source_hw: tuple[int, int],
    margin: float,
) -> npt.NDArray[np.bool_]:
    """(N, 4) bool: which of its left, top, right, bottom edges each box (source pixels) shares
    with `window`, counting only window edges inside the frame: there the tile cut the object."""
    x1, y1, x2, y2 = (int(v) for v in window)
    height, width = source_hw
    return np.stack(
        [
            (xyxy[:, 0] <= x1 + margin) & (x1 > 0),
            (xyxy[:, 1] <= y1 + margin) & (y1 > 0),
            (xyxy[:, 2] >= x2 - margin) & (x2 < width),
            (xyxy[:, 3] >= y2 - margin) & (y2 < height),
        ],
        axis=1,
    ).reshape(-1, 4)


def seen_better(
    xyxy: npt.NDArray[np.float32],
    sides: npt.NDArray[np.bool_],
    tile_id: npt.NDArray[np.intp],
    windows: npt.NDArray[np.int32],
    margin: float,
) -> npt.NDArray[np.bool_]:
    """Which cut boxes lie wholly inside another of `windows` with their cut edges inside it:
    that tile saw the object past the cut, so a partial view it did not confirm is spurious."""
    box, win = xyxy[:, None, :], windows[None, :, :].astype(np.float32)
    inside = (box[..., :2] >= win[..., :2]).all(axis=2) & (box[..., 2:] <= win[..., 2:]).all(axis=2)
    room = np.concatenate([box[..., :2] - win[..., :2], win[..., 2:] - box[..., 2:]], axis=2)
    clear = ((room > margin) | ~sides[:, None, :]).all(axis=2)
    other = np.arange(len(windows))[None, :] != tile_id[:, None]
    return sides.any(axis=1) & (inside & clear & other).any(axis=1)


def merge_tiles(
    detections: Detections,
    tile_id: npt.NDArray[np.intp],
    cut: npt.NDArray[np.bool_],
    threshold: float,
    max_det: int = 300,
    agnostic: bool = False,
    spurious: npt.NDArray[np.bool_] | None = None,
) -> Detections:
    """Merge boxes that several tiles saw of one object, greedily, best score first.

    Only boxes of different tiles are compared: the detector's own NMS already separated the
    boxes within a tile. Two boxes match above `threshold` of IoU, or of intersection over the
    smaller box when a tile edge cuts either (`cut`: a cut box is a part of the object, so its
    IoU with the whole stays low). A group of matched boxes keeps the best score and the box of
    its best-scored member no tile edge cut; when every member is cut, their union, so an object
    wider than the overlap comes out whole. A group made only of `spurious` boxes (partial views
    that a tile seeing past the cut did not confirm) is dropped."""
    order = np.argsort(-detections.confidence, kind="stable")
    xyxy, cls = detections.xyxy[order], detections.class_id[order]
    tile_id, cut = tile_id[order], cut[order]
    weak = np.zeros(len(xyxy), np.bool_) if spurious is None else spurious[order]
    area = (xyxy[:, 2] - xyxy[:, 0]) * (xyxy[:, 3] - xyxy[:, 1])
    merged = xyxy.copy()
    pending = np.ones(len(xyxy), np.bool_)  # in no group yet
    kept = np.zeros(len(xyxy), np.bool_)
    for i in range(len(xyxy)):
        if not pending[i]:
            continue
        rest = i + 1 + np.flatnonzero(pending[i + 1 :])
        rest = rest[(tile_id[rest] != tile_id[i]) & (agnostic or (cls[rest] == cls[i]))]
        low = np.maximum(xyxy[rest, :2], xyxy[i, :2])
        high = np.minimum(xyxy[rest, 2:], xyxy[i, 2:])
        inter = np.prod(np.clip(high - low, 0, None), axis=1)
        iou = inter / np.maximum(area[rest] + area[i] - inter, 1e-9)
        ios = inter / np.maximum(np.minimum(area[rest], area[i]), 1e-9)
        group = np.concatenate([[i], rest[np.where(cut[rest] | cut[i], ios, iou) > threshold]])
        pending[group] = False
        if weak[group].all():
            continue
        kept[i] = True
        whole = group[~cut[group]]  # best score first
        if whole.size:
            merged[i] = xyxy[whole[0]]
        else:
            merged[i, :2] = xyxy[group, :2].min(axis=0)
            merged[i, 2:] = xyxy[group, 2:].max(axis=0)
    keep = np.flatnonzero(kept)[:max_det]
    return Detections(merged[keep], detections.confidence[order][keep], cls[keep])
