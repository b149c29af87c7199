"""Motion on a fixed camera: how much of a frame changed since the frame the models last ran on,
and where, measured on a small blurred grey copy (about 0.3 ms for a 768×576 frame), so that
unchanged frames can reuse the last results (`pipeline.motion: skip`) and moving ones can run
the detector only around what moved (`regions`).

Frame differencing against that reference, not against the previous frame: an object that moves
a pixel a frame still adds up to a change, and the results reused are those of the reference."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import cast

import cv2
import numpy as np
import numpy.typing as npt

from visionrt.errors import ConfigError
from visionrt.types import picture_hw

WIDTH = 160  # pixels across the grey copy: a person in a corridor camera is still 5-10 wide
BLUR = (5, 5)  # sensor noise and compression blocks are smaller than this; people are not
OPEN = np.ones((3, 3), np.uint8)  # isolated changed pixels left after the threshold go
NO_BOXES = np.zeros((0, 4), np.int32)


@dataclass(frozen=True, slots=True)
class Motion:
    """One frame's change since the reference: `share` of the frame, and `boxes` around the
    changed areas ((K, 4) int32 x1, y1, x2, y2 in source pixels; all of the frame when there is
    no reference)."""

    share: float
    boxes: npt.NDArray[np.int32] = field(default_factory=lambda: NO_BOXES)


MODES = ("off", "skip", "regions")


@dataclass(frozen=True, slots=True)
class MotionOptions:
    """The config's `pipeline.motion` section: motion gating for fixed cameras. A frame that did
    not change since the models last ran reuses their results (skip), and a frame that did can
    have the detector run only on windows around what moved (regions)."""

    threshold: int = 25
    """The grey-level difference that counts a pixel as changed (1 to 255)."""
    min_area: float = 0.002
    """The share of the frame that must change for it to count as moved, between 0 and 1
    (0.002: 0.2 %)."""
    dilate: int = 9
    """Changed areas closer than this merge into one motion box, since a walking person's
    difference splits into limbs, head and the place they left (1 to 80 pixels of the 160-wide
    grey copy; 9: ~5 % of the width, ~40 source pixels of a 768-wide frame)."""
    mode: str = "off"
    """off; skip: a frame under `min_area` reuses the results of the frame the models last ran
    on; regions: also, on a frame that moved, the detector runs only on windows around the
    motion and the objects last seen."""
    refresh: float = 2.0
    """The models run again at least every this many seconds of video, moved or not, for
    something that appeared without motion (above 0, at most 3600)."""
    region: int = 320
    """Side of a regions window in source pixels, and the detector input it runs at (a multiple
    of 32 from 64 to 4096)."""
    region_model: str = ""  # under a plan: pipeline.planned.planned_regions
    """The detector for the windows, an artifact made at `region` (e.g. `visionrt export --imgsz
    320x320`); "": the run's model resized (an ONNX model), or under a plan the one it finds
    (tune's region model, an export at that size, or the plan's reference resized)."""

    def __post_init__(self) -> None:
        if not 1 <= self.threshold <= 255:
            raise ConfigError(
                f"pipeline.motion.threshold: expected a grey-level difference from 1 to 255,"
                f" got {self.threshold}"
            )
        if not 0 < self.min_area < 1:
            raise ConfigError(
                "pipeline.motion.min_area: expected a share of the frame between 0 and 1"
                f" (0.002: 0.2 %), got {self.min_area:g}"
            )
        if not 1 <= self.dilate <= WIDTH // 2:
            raise ConfigError(
                f"pipeline.motion.dilate: expected 1 to {WIDTH // 2} pixels of the {WIDTH}-wide"
                f" grey copy, got {self.dilate}"
            )
        if self.mode not in MODES:
            raise ConfigError(
                f"pipeline.motion.mode (--motion): expected off, skip or regions, got '{self.mode}'"
            )
        if not 64 <= self.region <= 4096 or self.region % 32:
            raise ConfigError(
                "pipeline.motion.region: expected a multiple of 32 from 64 to 4096 pixels, got"
                f" {self.region}"
            )
        if not 0 < self.refresh <= 3600:
            raise ConfigError(
                "pipeline.motion.refresh: expected seconds > 0, at most 3600 (how often the"
                f" detector runs on a frame that did not move), got {self.refresh:g}"
            )


# Video-range luma (16–235) stretched to 0–255: what BGR→grey gives of OpenCV's I420→BGR
# conversion (its chroma terms cancel in the grey sum), within a level where colours clip.
_FULL_RANGE = np.clip(np.rint((np.arange(256) - 16) * 255 / 219), 0, 255).astype(np.uint8)


def i420_grey(pixels: npt.NDArray[np.uint8]) -> npt.NDArray[np.uint8]:
    """The H×W grey of an I420 picture (as `Frame.pixels` holds one) from its Y plane alone:
    no colour conversion, for what looks at grey only (motion gating)."""
    luma = pixels[: picture_hw(pixels)[0]]
    # OpenCV's stubs type every result as MatLike (any dtype); a uint8 table gives uint8.
    return cast("npt.NDArray[np.uint8]", cv2.LUT(luma, _FULL_RANGE))


class MotionGate:
    """One source's motion: `measure(image)` is the change since the reference (all of the frame
    when there is none, or the frame size changed); `keep()` makes the frame just measured the
    reference (the models ran on it). Not thread-safe: one per source, on one thread."""

    def __init__(self, options: MotionOptions) -> None:
        self.options = options
        self._reference: npt.NDArray[np.uint8] | None = None
        self._last: npt.NDArray[np.uint8] | None = None
        self._source_hw: tuple[int, int] | None = None

    def measure(self, image: npt.NDArray[np.uint8], boxes: bool = False) -> Motion:
        """The change of `image` (H×W×3 BGR, or H×W grey) since the reference; with `boxes`,
        where it changed."""
        hw = (int(image.shape[0]), int(image.shape[1]))
        if hw != self._source_hw:  # a new stream size: the old reference means nothing
            self._source_hw, self._reference = hw, None
        height = max(1, round(hw[0] * WIDTH / hw[1]))
        small = cv2.resize(image, (WIDTH, height), interpolation=cv2.INTER_AREA)
        grey = small if small.ndim == 2 else cv2.cvtColor(small, cv2.COLOR_BGR2GRAY)
        # OpenCV's stubs type every result as MatLike (any dtype); blurring keeps uint8.
        self._last = cast("npt.NDArray[np.uint8]", cv2.GaussianBlur(grey, BLUR, 0))
        if self._reference is None:
            return Motion(1.0, np.array([[0, 0, hw[1], hw[0]]], np.int32))
        diff = cv2.absdiff(self._last, self._reference)
        _, mask = cv2.threshold(diff, self.options.threshold - 1, 255, cv2.THRESH_BINARY)
        mask = cast("npt.NDArray[np.uint8]", cv2.morphologyEx(mask, cv2.MORPH_OPEN, OPEN))
        share = cv2.countNonZero(mask) / mask.size
        if not boxes or share == 0:
            return Motion(share)
        return Motion(share, _boxes(mask, hw, self.options.dilate))

    def changed(self, image: npt.NDArray[np.uint8]) -> float:
        """The share of the frame that differs from the reference."""
        return self.measure(image).share

    def moved(self, image: npt.NDArray[np.uint8]) -> bool:
        return self.changed(image) >= self.options.min_area

    def keep(self) -> None:
        self._reference = self._last


def _boxes(
    mask: npt.NDArray[np.uint8], source_hw: tuple[int, int], dilate: int
) -> npt.NDArray[np.int32]:
    """Boxes around the changed areas of a grey-copy `mask`, in source pixels (rounded out),
    areas closer than `dilate` pixels merged."""
    grown = cv2.dilate(mask, np.ones((dilate, dilate), np.uint8))
    count, _, stats, _ = cv2.connectedComponentsWithStats(grown, connectivity=8)
    if count <= 1:
        return NO_BOXES
    x, y, w, h = (stats[1:, i].astype(np.float64) for i in range(4))  # label 0: unchanged
    sy, sx = source_hw[0] / mask.shape[0], source_hw[1] / mask.shape[1]
    boxes = np.stack(
        [np.floor(x * sx), np.floor(y * sy), np.ceil((x + w) * sx), np.ceil((y + h) * sy)], 1
    )
    limit = [source_hw[1], source_hw[0]] * 2
    return np.clip(boxes, 0, limit).astype(np.int32)
