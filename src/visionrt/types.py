"""Values passed between stages: frames, letterbox and depth-resize geometry, a detector head's
anchor count, detections, depth maps, tensor specs and backend facts."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

import numpy as np
import numpy.typing as npt

from visionrt.errors import ConfigError


@dataclass(frozen=True, slots=True)
class Frame:
    """One decoded picture.

    `pixels` is the picture as decoded: H×W×3 uint8 BGR, or — from a decoder asked for it
    (`Source.want_i420`), for frames whose next stop is a device — planar YUV 4:2:0 (I420,
    BT.601 limited range) as one (H·3/2)×W uint8 array: the Y plane, then U and V at half
    size. `image` is always BGR: an I420 frame is converted (OpenCV) on first use and kept.
    `timestamp` is seconds from the source's start (media time for files, wall-clock since open
    for live sources); `captured_at` is `time.perf_counter()` when the frame left the decoder,
    used for glass-to-result latency. `item` is the file the picture came from where a source
    has many (an image folder or glob; "" otherwise): kept when a user's name for the source
    replaces `source_name`.
    """

    source_id: int
    index: int
    pixels: npt.NDArray[np.uint8]
    timestamp: float
    captured_at: float
    source_name: str = ""
    item: str = ""
    _bgr: npt.NDArray[np.uint8] | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def image(self) -> npt.NDArray[np.uint8]:
        """H×W×3 uint8 BGR."""
        if self.pixels.ndim == 3:
            return self.pixels
        if self._bgr is None:  # two threads may both convert: the same result, kept once
            object.__setattr__(self, "_bgr", as_bgr(self.pixels))
        assert self._bgr is not None
        return self._bgr

    @property
    def size(self) -> tuple[int, int]:
        """(height, width) of the picture."""
        return picture_hw(self.pixels)


def as_bgr(pixels: npt.NDArray[np.uint8]) -> npt.NDArray[np.uint8]:
    """A picture held as `Frame.pixels` holds one, as H×W×3 BGR (I420 converted by OpenCV)."""
    if pixels.ndim == 3:
        return pixels
    import cv2

    # OpenCV's stubs type every result as MatLike (any dtype); a colour conversion keeps uint8.
    return cast("npt.NDArray[np.uint8]", cv2.cvtColor(pixels, cv2.COLOR_YUV2BGR_I420))


def picture_hw(pixels: npt.NDArray[np.uint8]) -> tuple[int, int]:
    """(height, width) of a picture held as `Frame.pixels` holds one (BGR or I420)."""
    if pixels.ndim == 2:
        return pixels.shape[0] * 2 // 3, pixels.shape[1]
    return pixels.shape[0], pixels.shape[1]


@dataclass(frozen=True, slots=True)
class TensorSpec:
    """Name, shape (None or a string for a dynamic axis) and NumPy dtype name of a tensor."""

    name: str
    shape: tuple[int | str | None, ...]
    dtype: str


@dataclass(frozen=True, slots=True)
class BackendInfo:
    """What a loaded backend actually runs on (not what was asked for)."""

    runtime: str
    version: str
    device: str
    precision: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    details: dict[str, Any] = field(default_factory=dict)
    # What `infer` is best given (backends.base: ARRAYS or FRAMES): host arrays shaped and typed
    # as `inputs` says (float32 NCHW, or uint8 NHWC when preprocessing is folded in), or
    # decoded frames the task prepares on the backend's device (backends.base.FramesBackend).
    input_form: str = "arrays"


@dataclass(frozen=True, slots=True)
class Letterbox:
    """Source (h, w) → input (h, w): resize by `scale` to (new_h, new_w), pad by (top, left)."""

    source_hw: tuple[int, int]
    input_hw: tuple[int, int]
    scale: float
    new_hw: tuple[int, int]
    top: int
    left: int


@dataclass(frozen=True, slots=True)
class DepthGeometry:
    """Source (h, w) → depth input (h, w): a plain resize, no padding; the map goes back by the
    inverse resize."""

    source_hw: tuple[int, int]
    input_hw: tuple[int, int]


def boxes_to_source(xyxy: npt.NDArray[np.float32], box: Letterbox) -> npt.NDArray[np.float32]:
    """Input-pixel boxes → source-pixel boxes, clipped to the source frame."""
    out = xyxy.astype(np.float32, copy=True)
    out[:, 0::2] -= box.left
    out[:, 1::2] -= box.top
    out /= np.float32(box.scale)
    src_h, src_w = box.source_hw
    np.clip(out[:, 0::2], 0, src_w, out=out[:, 0::2])
    np.clip(out[:, 1::2], 0, src_h, out=out[:, 1::2])
    return out


def boxes_to_input(xyxy: npt.NDArray[np.float32], box: Letterbox) -> npt.NDArray[np.float32]:
    """Source-pixel boxes → input-pixel boxes (the forward map, for tests and calibration)."""
    out = xyxy.astype(np.float32, copy=True) * np.float32(box.scale)
    out[:, 0::2] += box.left
    out[:, 1::2] += box.top
    return out


# The strides of an anchor-free YOLO head's three levels (Ultralytics v8/9/11/12), in pixels.
DEFAULT_STRIDES = (8, 16, 32)


def anchor_count(height: int, width: int, strides: Sequence[int] = DEFAULT_STRIDES) -> int:
    """Number of anchor points a detector head has at an input of `height` × `width` pixels:
    what decoding tells head layouts apart by and what a resize rewrites."""
    return sum((height // s) * (width // s) for s in strides)


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


class DeviceMap(Protocol):
    """A depth map still on its model's device (`tasks.device_depth`), at source resolution:
    its `shape`, its values brought to the host (`host`, once), and the median of the finite
    values in each region, computed there (`medians`: (N, 4) top, bottom, left, right; NaN for
    an empty region or one without a finite value)."""

    shape: tuple[int, int]

    def host(self) -> npt.NDArray[np.float32]: ...

    def medians(self, regions: npt.NDArray[np.int64]) -> npt.NDArray[np.float32]: ...


class DepthMap:
    """Depth of one frame at source resolution: `values` (H, W) float32.

    `metric` True: metres from the camera; False: relative inverse depth (larger is nearer, no
    unit), what Depth Anything's relative models give. `recomputed` says reduced precision gave
    NaN/Inf and the frame was recomputed in FP32.

    A map made on a device stays there (`device`) until something asks for `values` (a depth
    video, the maps' files, smoothing, the audit), which brings it to the host once: a run whose
    sinks need only each object's distance takes the medians there (`fuse.depth.box_distance`)
    and never moves the whole map."""

    __slots__ = ("_lock", "_values", "device", "metric", "recomputed")

    def __init__(
        self,
        values: npt.NDArray[np.float32] | None = None,
        metric: bool = False,
        recomputed: bool = False,
        device: DeviceMap | None = None,
    ) -> None:
        if values is None and device is None:
            raise ValueError("a depth map needs its values or its device map")
        self._values, self.device = values, device
        self.metric, self.recomputed = metric, recomputed
        self._lock = threading.Lock() if values is None else None

    @property
    def values(self) -> npt.NDArray[np.float32]:
        """(H, W) float32 on the host (from the device on the first ask; thread-safe)."""
        if self._values is None:
            assert self._lock is not None
            assert self.device is not None
            with self._lock:
                if self._values is None:
                    self._values = self.device.host()
        return self._values

    @property
    def shape(self) -> tuple[int, int]:
        """(H, W), without bringing a device map to the host."""
        if self._values is not None:
            return (int(self._values.shape[0]), int(self._values.shape[1]))
        assert self.device is not None
        return self.device.shape

    def __repr__(self) -> str:
        where = "host" if self._values is not None else "device"
        return f"DepthMap({self.shape}, {where}, metric={self.metric})"

    @property
    def units(self) -> str:
        return "metres" if self.metric else "relative inverse depth"

    def stats(self) -> dict[str, float]:
        """min, max, mean and median over the finite values (all NaN when there are none)."""
        finite = self.values[np.isfinite(self.values)]
        if finite.size == 0:
            nan = float("nan")
            return {"min": nan, "max": nan, "mean": nan, "median": nan}
        return {
            "min": float(finite.min()),
            "max": float(finite.max()),
            "mean": float(finite.mean()),
            "median": float(np.median(finite)),
        }


@dataclass(frozen=True, slots=True)
class Event:
    """Something a frame showed happen (fuse.analytics): `kind` "zone" (`action` enter/leave)
    or "line" (in/out) named `name`, by track `track_id` of class `class_name`. Counted per
    source under its `label`; a service publishes it (sinks.events)."""

    kind: str
    action: str
    name: str
    track_id: int | None = None
    class_name: str | None = None

    @property
    def label(self) -> str:
        """ "zone door: enter": the event's count in the summary and Prometheus."""
        return f"{self.kind} {self.name}: {self.action}"


@dataclass(frozen=True, slots=True)
class FrameResult:
    """What the pipeline yields per frame: the frame, its detections, and per-stage seconds;
    with a depth task, its `depth` map and each detection's `distance` (NaN where the box has no
    finite depth), in `depth.units`."""

    frame: Frame
    detections: Detections
    timings: dict[str, float]
    class_names: tuple[str, ...] = ()
    depth: DepthMap | None = None
    distance: npt.NDArray[np.float32] | None = None
    tracks: TrackedDetections | None = None
    # With motion gating: "full" (the models ran on it), "regions: K" (the detector ran on K
    # windows around motion and known objects) or "reused" (its source's last results, no
    # motion since); "" without gating.
    processed: str = ""
    # With motion gating: the boxes that moved since the frame the models last ran on, and the
    # windows the detector ran on in regions mode ((K, 4) int32 x1, y1, x2, y2 in source
    # pixels; None when not measured or the whole frame ran).
    motion_boxes: npt.NDArray[np.int32] | None = None
    regions: npt.NDArray[np.int32] | None = None
    # Zones and lines (`analytics` config): per zone the count per class inside and each track's
    # seconds there, per line the in/out totals so far; empty without them.
    analytics: dict[str, Any] = field(default_factory=dict)
    events: tuple[Event, ...] = ()  # what the frame showed happen (zones and lines)
    # With depth on 1 frame in N: the frame `depth` was made on, when not this one.
    depth_from: int | None = None

    def to_json(self) -> dict[str, Any]:
        det = self.detections
        names = self.class_names
        rows: list[dict[str, Any]] = [
            {
                "xyxy": [round(float(v), 2) for v in det.xyxy[i]],
                "confidence": round(float(det.confidence[i]), 4),
                "class_id": int(det.class_id[i]),
                "class_name": names[det.class_id[i]] if det.class_id[i] < len(names) else "",
            }
            for i in range(len(det))
        ]
        if self.tracks is not None:
            for row, track, predicted in zip(
                rows, self.tracks.track_id, self.tracks.predicted, strict=True
            ):
                row["track_id"] = int(track)
                row["predicted"] = bool(predicted)
        if self.distance is not None:
            for row, value in zip(rows, self.distance, strict=True):
                row["distance"] = round(float(value), 4) if np.isfinite(value) else None
        line: dict[str, Any] = {
            "source": self.frame.source_name,
            "source_id": self.frame.source_id,
            "frame": self.frame.index,
            "timestamp": round(self.frame.timestamp, 6),
            "detections": rows,
        }
        if self.processed:
            line["processed"] = self.processed
        if self.analytics:
            line["analytics"] = self.analytics
        if self.depth is not None:
            stats = self.depth.stats()
            line["depth"] = {
                "units": self.depth.units,
                "recomputed": self.depth.recomputed,
                **{k: round(v, 4) if np.isfinite(v) else None for k, v in stats.items()},
                **({"from": self.depth_from} if self.depth_from is not None else {}),
            }
        return line

    @classmethod
    def from_json(cls, line: dict[str, Any], tracked: bool = False) -> FrameResult:
        """A result back from its `to_json` line, for writers that work from JSONL (a cluster's
        driver writing COCO, CSV and MOT from the lines its workers sent): boxes, scores,
        classes, tracks, distances, frame and source as written (rounded as written); no image,
        depth map or timings. `tracked`: the run tracked, so a frame without boxes has (no)
        tracks too — its line cannot say."""
        rows = line.get("detections", [])
        det = Detections(
            np.array([row["xyxy"] for row in rows], np.float32).reshape(-1, 4),
            np.array([row["confidence"] for row in rows], np.float32),
            np.array([row["class_id"] for row in rows], np.int32),
        )
        names = [""] * (max((row["class_id"] for row in rows), default=-1) + 1)
        for row in rows:
            names[row["class_id"]] = row.get("class_name", "")
        tracks = None
        if tracked or (rows and all("track_id" in row for row in rows)):
            tracks = TrackedDetections(
                det,
                np.array([row["track_id"] for row in rows], np.int64),
                np.array([row.get("predicted", False) for row in rows], np.bool_),
            )
        distance = None
        if rows and all("distance" in row for row in rows):
            values = [np.nan if row["distance"] is None else row["distance"] for row in rows]
            distance = np.array(values, np.float32)
        frame = Frame(
            int(line.get("source_id", 0)),
            int(line["frame"]),
            np.zeros((0, 0, 3), np.uint8),
            float(line.get("timestamp", 0.0)),
            0.0,
            str(line.get("source", "")),
        )
        return cls(frame, det, {}, tuple(names), None, distance, tracks)
