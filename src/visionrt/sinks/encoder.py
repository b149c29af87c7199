"""A video stream's encoding on a thread of its own: the sink thread hands it BGR pictures and
goes on to the next sink, so each video of a run encodes beside the others.

A run writes every result into every sink on one thread (pipeline.output). Before this, its
videos were encoded there one after another: the seed scenario (three annotated videos and a
depth video) ran at 39 FPS per camera on a 2-core Zen 4 with no model at all. OpenCV converts
BGR to I420 here (a third of the time swscale took, and nearer the picture after decoding)."""

from __future__ import annotations

import queue
import threading
from typing import Any

import cv2
import numpy as np
import numpy.typing as npt

from visionrt.errors import SinkError
from visionrt.sinks.base import reason

# Pictures waiting for the encoder: enough to ride out one slow frame, few enough that a run's
# memory does not grow with its number of videos (a 1080p picture is 6 MB).
AHEAD = 4
_POLL_S = 0.1  # how often a blocked hand-over looks again at the encoder's state
_END = object()


class Encoder:
    """Encodes the pictures `put` into `stream` (PyAV, opened, yuv420p) and muxes the packets
    into `container`, in order, on its thread. An error there is raised as a SinkError by the
    next `put` and by `finish`; the pictures after it are not encoded."""

    def __init__(self, container: Any, stream: Any, name: str) -> None:
        self.container, self.stream = container, stream
        self.error: SinkError | None = None
        self._name = name
        self._pictures: queue.Queue[Any] = queue.Queue(maxsize=AHEAD)
        self._thread = threading.Thread(target=self._run, name=f"encode {name}", daemon=True)
        self._thread.start()

    def put(self, picture: npt.NDArray[np.uint8]) -> None:
        """Queue a BGR picture of the stream's size (waits while AHEAD are queued)."""
        while True:
            if self.error is not None:
                raise self.error
            try:
                self._pictures.put(picture, timeout=_POLL_S)
                return
            except queue.Full:
                continue

    def finish(self) -> None:
        """Encode what is queued, then flush the encoder's delayed frames into the container
        (which the caller closes); the encoding's error, if there was one."""
        while self._thread.is_alive():
            try:
                self._pictures.put(_END, timeout=_POLL_S)
                break
            except queue.Full:
                continue
        self._thread.join()
        if self.error is not None:
            raise self.error
        self.container.mux(self.stream.encode(None))

    def _run(self) -> None:
        import av

        while (picture := self._pictures.get()) is not _END:
            try:
                planes = cv2.cvtColor(picture, cv2.COLOR_BGR2YUV_I420)
                frame = av.VideoFrame.from_ndarray(planes, format="yuv420p")
                self.container.mux(self.stream.encode(frame))
            except Exception as err:  # a full disk, a vanished folder: one line, then no more
                self.error = SinkError(f"cannot write {self._name}: {reason(err)}")
                return
