"""A frame's detections as validated arrays: `Detections` (boxes, scores, classes) and a
tracker's `TrackedDetections` (those boxes with track ids)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from visionrt.errors import ConfigError

_F32, _I32 = np.dtype(np.float32), np.dtype(np.int32)


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise ConfigError(message)


@dataclass(frozen=True, slots=True)
class Detections:
    """Detections of one frame as a struct of arrays.

    `xyxy` is (N, 4) float32 in source-frame pixels (x1, y1, x2, y2), `confidence` (N,) float32
    in [0, 1], `class_id` (N,) int32. Validated on construction; operations return new values.
    """

    xyxy: npt.NDArray[np.float32]
    confidence: npt.NDArray[np.float32]
    class_id: npt.NDArray[np.int32]

    def __post_init__(self) -> None:
        xyxy, conf, cls = self.xyxy, self.confidence, self.class_id
        # The messages are made only on failure: formatting them for every frame's detections
        # (a dtype's str is slow) took a tenth of the consumer thread at 2,000 frames a second.
        if not (isinstance(xyxy, np.ndarray) and xyxy.ndim == 2 and xyxy.shape[1] == 4):
            shape = getattr(xyxy, "shape", type(xyxy))
            raise ConfigError(f"Detections.xyxy: expected an (N, 4) array, got {shape}")
        n = xyxy.shape[0]
        if not (isinstance(conf, np.ndarray) and conf.shape == (n,)):
            shape = getattr(conf, "shape", conf)
            raise ConfigError(f"Detections.confidence: expected shape ({n},), got {shape}")
        if not (isinstance(cls, np.ndarray) and cls.shape == (n,)):
            shape = getattr(cls, "shape", cls)
            raise ConfigError(f"Detections.class_id: expected shape ({n},), got {shape}")
        for name, array, dtype in (
            ("xyxy", xyxy, _F32),
            ("confidence", conf, _F32),
            ("class_id", cls, _I32),
        ):
            if array.dtype != dtype:
                raise ConfigError(f"Detections.{name}: expected {dtype}, got {array.dtype}")

    @classmethod
    def empty(cls) -> Detections:
        return _EMPTY

    def __len__(self) -> int:
        return int(self.xyxy.shape[0])

    def filter(self, keep: npt.NDArray[np.bool_] | npt.NDArray[np.intp]) -> Detections:
        """A new Detections with only the rows selected by a mask or index array."""
        return Detections(self.xyxy[keep], self.confidence[keep], self.class_id[keep])


# Shared: a frame with no detections needs no arrays of its own (arrays of no rows hold nothing
# a caller could change).
_EMPTY = Detections(
    np.zeros((0, 4), np.float32), np.zeros((0,), np.float32), np.zeros((0,), np.int32)
)


@dataclass(frozen=True, slots=True)
class TrackedDetections:
    """A tracker's boxes for one frame: `detections` (source pixels, the detector's box when it saw
    the object this frame, the tracker's prediction otherwise), `track_id` (N,) int64 (from 1 per
    tracker), and `predicted` (N,) bool, True for boxes the detector did not see this frame."""

    detections: Detections
    track_id: npt.NDArray[np.int64]
    predicted: npt.NDArray[np.bool_]

    def __post_init__(self) -> None:
        n = len(self.detections)
        for name, dtype in (("track_id", np.int64), ("predicted", np.bool_)):
            value = getattr(self, name)
            _check(
                isinstance(value, np.ndarray) and value.shape == (n,) and value.dtype == dtype,
                f"TrackedDetections.{name}: expected a ({n},) {np.dtype(dtype).name} array, got "
                f"{getattr(value, 'shape', type(value))} {getattr(value, 'dtype', '')}".rstrip(),
            )

    @classmethod
    def empty(cls) -> TrackedDetections:
        return cls(Detections.empty(), np.zeros((0,), np.int64), np.zeros((0,), np.bool_))

    def __len__(self) -> int:
        return len(self.detections)
