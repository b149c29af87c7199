"""Where the detector looks on a frame that moved (`pipeline.motion: regions`): square windows of
the region detector's size around the motion and around the objects last seen, so that an object
that stops moving is still looked at, or the whole frame when the windows would cost about as
much as it (Frigate's regions, with the cost rule made explicit)."""

from __future__ import annotations

import threading
from typing import cast

import numpy as np
import numpy.typing as npt

from visionrt.preprocess.letterbox import compute_letterbox
from visionrt.preprocess.tile import TileGrid

# Windows whose input pixels reach this share of a full-frame pass run as that pass instead: a
# backend call has a fixed cost (INT8 OpenVINO on Zen 4: one 320×320 row 14 ms, a 512×640 frame
# 35 ms, where the pixels alone say 11 ms), and one pass sees context the windows cut.
FULL_FRAME_SHARE = 0.75
# How far past an object last seen its window reaches: that box is a few frames old (the frames
# in flight) and the object went on moving; a share of its size, at least KNOWN_MARGIN pixels.
KNOWN_GROWTH = 0.25
KNOWN_MARGIN = 16


class RegionPlanner:
    """Per source, the boxes last seen (`remember`, from the consumer thread) and the windows for
    a frame (`plan`, from the preprocess thread). `side`: the region detector's square input;
    `full_input` (height, width): the full-frame detector's input. A window holds what `side`
    input pixels hold at the full-frame pass's scale: the detector sees objects at the size the
    whole frame shows them (at 1:1 a 768×576 frame's people look larger than in its 512×640
    pass, and the detector finds people there that the reference does not)."""

    def __init__(self, sources: int, side: int, full_input: tuple[int, int]) -> None:
        self.side, self.full_input = side, full_input
        self.max_windows = max(1, int(FULL_FRAME_SHARE * full_input[0] * full_input[1]) // side**2)
        self._known: list[npt.NDArray[np.float32]] = [
            np.zeros((0, 4), np.float32) for _ in range(sources)
        ]
        self._lock = threading.Lock()

    def add_source(self) -> None:
        """One more source (a service's camera added while it runs), numbered next."""
        with self._lock:
            self._known.append(np.zeros((0, 4), np.float32))

    def remember(self, source_id: int, xyxy: npt.NDArray[np.float32]) -> None:
        """The boxes delivered on a source's latest frame (tracks' when tracking)."""
        with self._lock:
            self._known[source_id] = np.asarray(xyxy, np.float32).reshape(-1, 4).copy()

    def plan(
        self, source_id: int, motion: npt.NDArray[np.int32], source_hw: tuple[int, int]
    ) -> npt.NDArray[np.int32] | None:
        """Windows covering `motion` boxes and the objects last seen on the source ((K, 4) int32
        x1, y1, x2, y2 in source pixels), or None: the whole frame costs no more."""
        with self._lock:
            known = _grown(self._known[source_id])
        moving = motion.astype(np.float32).reshape(-1, 4)
        # Objects the motion touches are looked at whole (the difference often holds only part
        # of a person); the others did not move, and the fuser keeps their last boxes.
        known = known[_touching(known, moving)]
        boxes = np.concatenate([moving, known])
        if len(boxes) == 0:
            return None  # nothing to look at, yet the frame moved: a full pass is the safe side
        scale = min(self.full_input[0] / source_hw[0], self.full_input[1] / source_hw[1])
        side = max(32, round(self.side / scale))
        windows = cover(boxes, source_hw, side)
        # A window larger than `side` (a box that big: a pan, a cut, a person close by) would
        # show the detector less than the whole-frame pass does: that pass runs instead.
        larger = (windows[:, 2:] - windows[:, :2]).max(initial=0) > side
        if len(windows) > self.max_windows or larger:
            return None
        return windows


def _touching(
    boxes: npt.NDArray[np.float32], motion: npt.NDArray[np.float32]
) -> npt.NDArray[np.bool_]:
    """Which `boxes` overlap any motion box."""
    low = np.maximum(boxes[:, None, :2], motion[None, :, :2])
    high = np.minimum(boxes[:, None, 2:], motion[None, :, 2:])
    # NumPy's stubs cannot tell a reduction over one axis of an array from a scalar.
    crossing = cast("npt.NDArray[np.bool_]", ((high - low) > 0).all(axis=2))
    return cast("npt.NDArray[np.bool_]", crossing.any(axis=1))


def _grown(xyxy: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    size = np.maximum(xyxy[:, 2:] - xyxy[:, :2], 0)
    pad = np.maximum(size * KNOWN_GROWTH, KNOWN_MARGIN)
    return np.concatenate([xyxy[:, :2] - pad, xyxy[:, 2:] + pad], axis=1)


def cover(
    boxes: npt.NDArray[np.float32], source_hw: tuple[int, int], side: int
) -> npt.NDArray[np.int32]:
    """Square windows of `side` (or of a larger box's own side) that together hold every box
    whole: greedily, largest box first, a box joins the first window whose boxes and it still fit
    in `side`. Windows are shifted inside the frame (a frame smaller than `side` gives windows of
    its size)."""
    height, width = source_hw
    clipped = np.clip(boxes, 0, [width, height, width, height])
    order = np.argsort(-np.prod(clipped[:, 2:] - clipped[:, :2], axis=1), kind="stable")
    groups: list[npt.NDArray[np.float32]] = []  # each a union box x1, y1, x2, y2
    for box in clipped[order]:
        for i, union in enumerate(groups):
            joined = np.concatenate(
                [np.minimum(union[:2], box[:2]), np.maximum(union[2:], box[2:])]
            )
            if (joined[2:] - joined[:2]).max() <= side or _inside(box, union):
                groups[i] = joined
                break
        else:
            groups.append(box.copy())
    return np.array([_window(u, source_hw, side) for u in groups], np.int32).reshape(-1, 4)


def _inside(box: npt.NDArray[np.float32], union: npt.NDArray[np.float32]) -> bool:
    return bool((box[:2] >= union[:2]).all() and (box[2:] <= union[2:]).all())


def _window(union: npt.NDArray[np.float32], source_hw: tuple[int, int], side: int) -> list[int]:
    """A square of `side` (or the union's longer side) centred on `union`, inside the frame."""
    height, width = source_hw
    size = max(side, int(np.ceil((union[2:] - union[:2]).max())))
    out = []
    for low, high, length in ((union[0], union[2], width), (union[1], union[3], height)):
        span = min(size, length)
        start = round((low + high) / 2 - span / 2)
        out.append(min(max(start, 0), length - span))
    w, h = min(size, width), min(size, height)
    return [out[0], out[1], out[0] + w, out[1] + h]


def region_grid(
    windows: npt.NDArray[np.int32], source_hw: tuple[int, int], input_hw: tuple[int, int]
) -> TileGrid:
    """The grid that letterboxes each window into a row of the region detector's input."""
    letterboxes = tuple(
        compute_letterbox((int(y2 - y1), int(x2 - x1)), input_hw) for x1, y1, x2, y2 in windows
    )
    return TileGrid(source_hw, windows.astype(np.int32), letterboxes, full_frame=False)
