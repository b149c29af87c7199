"""Live previews of each source: a few frames a second taken from the pipeline's sink thread,
annotated, downsized and JPEG-encoded on a thread of their own, kept one per source."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import cast

import cv2
import numpy as np
import numpy.typing as npt

from visionrt.errors import ConfigError
from visionrt.sinks.video import annotate
from visionrt.types import Detections, FrameResult

log = logging.getLogger(__name__)

BOUNDARY = "frame"


@dataclass(frozen=True, slots=True)
class Preview:
    """One encoded preview: `frame` is the video frame index, `timestamp` its seconds from the
    source's start, `seq` counts this source's previews from 1."""

    jpeg: bytes
    frame: int
    timestamp: float
    seq: int


@dataclass(frozen=True, slots=True)
class _Pending:
    """What the encoder needs of one frame, owned by the hub (the image is a private copy)."""

    image: npt.NDArray[np.uint8]
    result: FrameResult
    epoch: int


def _counters() -> dict[str, int]:
    return {"offered": 0, "skipped": 0, "replaced": 0, "encoded": 0, "errors": 0}


class PreviewHub:
    """Latest annotated JPEG per source, at most `rate` per second per source, at most
    `max_width` pixels wide. `offer` is called for every frame on the pipeline's sink thread and
    only copies the image of a frame it takes; one daemon thread does the drawing and encoding.
    `clock` is the time source for the rate cap (injectable for tests)."""

    def __init__(
        self,
        rate: float = 5.0,
        quality: int = 70,
        max_width: int = 640,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not rate > 0:
            raise ConfigError(f"preview rate: expected > 0 per second, got {rate}")
        if not 1 <= quality <= 100:
            raise ConfigError(f"preview quality: expected 1..100, got {quality}")
        if max_width < 16:
            raise ConfigError(f"preview max_width: expected >= 16 pixels, got {max_width}")
        self.rate, self.quality, self.max_width = rate, quality, max_width
        self._interval = 1.0 / rate
        self._clock = clock
        self._cond = threading.Condition()
        self._pending: dict[str, _Pending] = {}
        self._latest: dict[str, Preview] = {}
        self._taken_at: dict[str, float] = {}
        self._stats: dict[str, dict[str, int]] = {}
        # Bumped by remove(): an encode or a wait that began before a removal must not see the
        # source again, even when a source of the same name is added right after.
        self._epoch: dict[str, int] = {}
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="visionrt-preview", daemon=True)
        self._thread.start()

    # -- the pipeline's side ---------------------------------------------------------------

    def offer(self, result: FrameResult) -> None:
        """Take this frame for its source's preview unless one was taken less than 1/rate
        seconds ago. Never blocks on encoding."""
        name = result.frame.source_name
        now = self._clock()
        with self._cond:
            if self._closed:
                return
            counts = self._stats.setdefault(name, _counters())
            counts["offered"] += 1
            last = self._taken_at.get(name)
            if last is not None and now - last < self._interval:
                counts["skipped"] += 1
                return
            self._taken_at[name] = now
            epoch = self._epoch.get(name, 0)
        # The pipeline may reuse the frame's buffer once offer returns; copy outside the lock so
        # the encoder and HTTP waiters are not held up by a large frame.
        image = np.array(result.frame.image, dtype=np.uint8, copy=True)
        with self._cond:
            if self._closed or self._epoch.get(name, 0) != epoch:
                return
            if name in self._pending:
                self._stats[name]["replaced"] += 1
            self._pending[name] = _Pending(image, result, epoch)
            self._cond.notify_all()

    # -- readers ---------------------------------------------------------------------------

    def latest(self, name: str) -> Preview | None:
        """The newest preview of `name`, None before its first one."""
        with self._cond:
            return self._latest.get(name)

    def wait(self, name: str, after_seq: int, timeout: float) -> Preview | None:
        """The newest preview of `name` once its seq is above `after_seq`; None after `timeout`
        seconds, or as soon as the source is removed or the hub closed."""
        preview, _ended = self._wait(name, after_seq, timeout, self._epoch_of(name))
        return preview

    def _epoch_of(self, name: str) -> int:
        with self._cond:
            return self._epoch.get(name, 0)

    def _wait(
        self, name: str, after_seq: int, timeout: float, epoch: int
    ) -> tuple[Preview | None, bool]:
        """(preview or None, whether the source ended: removed since `epoch`, or hub closed)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                if self._closed or self._epoch.get(name, 0) != epoch:
                    return None, True
                preview = self._latest.get(name)
                if preview is not None and preview.seq > after_seq:
                    return preview, False
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None, False
                self._cond.wait(remaining)

    def stats(self) -> dict[str, dict[str, int]]:
        """Per source: frames offered, skipped by the rate cap, taken but replaced by a newer one
        before encoding, encoded, and failed to encode."""
        with self._cond:
            return {name: dict(counts) for name, counts in self._stats.items()}

    # -- lifecycle -------------------------------------------------------------------------

    def remove(self, name: str) -> None:
        """Forget a source: its preview, pending frame and counters; its waiters and MJPEG
        streams end. A later offer under the same name starts it afresh from seq 1."""
        with self._cond:
            self._epoch[name] = self._epoch.get(name, 0) + 1
            for table in (self._pending, self._latest, self._taken_at, self._stats):
                table.pop(name, None)
            self._cond.notify_all()

    def close(self) -> None:
        """Stop the encoder thread; waiters return None and later offers are ignored."""
        with self._cond:
            self._closed = True
            self._pending.clear()
            self._cond.notify_all()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=5.0)

    def __enter__(self) -> PreviewHub:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the encoder thread ----------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._closed:
                    self._cond.wait()
                if self._closed:
                    return
                # Oldest-inserted first, so one busy source cannot starve the others.
                name = next(iter(self._pending))
                item = self._pending.pop(name)
            try:
                jpeg = self._encode(item)
            except Exception:
                # A bad frame costs its preview, not the live view of every source.
                log.exception("preview of source %r frame %d failed", name, item.result.frame.index)
                with self._cond:
                    if name in self._stats:
                        self._stats[name]["errors"] += 1
                continue
            with self._cond:
                if self._closed or self._epoch.get(name, 0) != item.epoch:
                    continue
                previous = self._latest.get(name)
                self._latest[name] = Preview(
                    jpeg=jpeg,
                    frame=item.result.frame.index,
                    timestamp=item.result.frame.timestamp,
                    seq=previous.seq + 1 if previous is not None else 1,
                )
                self._stats.setdefault(name, _counters())["encoded"] += 1
                self._cond.notify_all()

    def _encode(self, item: _Pending) -> bytes:
        result, image = item.result, item.image
        height, width = image.shape[:2]
        detections = result.detections
        # Downsize first and draw on the small picture: cheaper, and lines and labels stay
        # legible instead of shrinking to sub-pixel width with the frame.
        if width > self.max_width:
            scale = self.max_width / width
            size = (self.max_width, max(1, round(height * scale)))
            # OpenCV's stubs type every result as MatLike (any dtype); resizing keeps uint8.
            image = cast(
                "npt.NDArray[np.uint8]", cv2.resize(image, size, interpolation=cv2.INTER_AREA)
            )
            detections = Detections(
                detections.xyxy * np.float32(scale), detections.confidence, detections.class_id
            )
        tracks = result.tracks
        canvas = annotate(
            image,
            detections,
            result.class_names,
            tracks.track_id if tracks is not None else None,
            tracks.predicted if tracks is not None else None,
            result.distance,
            metric=result.depth is not None and result.depth.metric,
        )
        ok, buffer = cv2.imencode(".jpg", canvas, [cv2.IMWRITE_JPEG_QUALITY, self.quality])
        if not ok:
            raise ValueError(f"JPEG encoding failed for a {width}x{height} frame")
        return buffer.tobytes()


def mjpeg_chunks(
    hub: PreviewHub, name: str, stop: threading.Event | None = None, poll: float = 1.0
) -> Iterator[bytes]:
    """multipart/x-mixed-replace parts (boundary `BOUNDARY`) of `name`'s previews as they are
    encoded, starting with the latest; ends when the source is removed, the hub closes or `stop`
    is set (checked every `poll` seconds)."""
    epoch = hub._epoch_of(name)
    seq = 0
    while stop is None or not stop.is_set():
        preview, ended = hub._wait(name, seq, poll, epoch)
        if ended:
            return
        if preview is None:
            continue
        seq = preview.seq
        head = (
            f"--{BOUNDARY}\r\nContent-Type: image/jpeg\r\n"
            f"Content-Length: {len(preview.jpeg)}\r\n\r\n"
        )
        yield head.encode("ascii") + preview.jpeg + b"\r\n"
