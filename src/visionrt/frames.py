"""A decoded frame and the records made of it: `Frame`, its `DepthMap`, the `Event`s it showed
and `FrameResult`, what the pipeline yields for it."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

import numpy as np
import numpy.typing as npt

from visionrt.detections import Detections, TrackedDetections


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


class Pinning(Protocol):
    """Makes host memory a device can copy from without a staging copy (CUDA:
    cudaHostRegister, so an upload from it is one DMA): a worker's shared-memory ring is
    registered once, and a frame in it goes up from where it was decoded (`in_pinned_memory`).
    `register` is False where the memory cannot be registered: its frames are staged as any."""

    def register(self, address: int, size: int) -> bool: ...

    def unregister(self, address: int) -> None: ...


def in_pinned_memory(pixels: npt.NDArray[np.uint8]) -> bool:
    """`pixels` lie, contiguous, in memory a `Pinning` registered: the array that finally holds
    them (a ring slot's lease, sources/ring.py) says `pinned`."""
    owner: Any = pixels
    while isinstance(owner, np.ndarray):
        owner = owner.base
    return bool(pixels.flags.c_contiguous and getattr(owner, "pinned", False))


def picture_hw(pixels: npt.NDArray[np.uint8]) -> tuple[int, int]:
    """(height, width) of a picture held as `Frame.pixels` holds one (BGR or I420)."""
    if pixels.ndim == 2:
        return pixels.shape[0] * 2 // 3, pixels.shape[1]
    return pixels.shape[0], pixels.shape[1]


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
