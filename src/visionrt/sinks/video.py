"""Annotated video: boxes, class names, scores, track ids and distances drawn on each frame (and,
asked for, motion gating's moved boxes and detector windows), encoded by PyAV (H.264) on a
thread of the video's own (sinks.encoder)."""

from __future__ import annotations

import contextlib
from fractions import Fraction
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import numpy.typing as npt

from visionrt.errors import SinkError
from visionrt.sinks.base import Sink, check_writable, finalize, partial_path
from visionrt.sinks.encoder import Encoder
from visionrt.types import Detections, FrameResult

_PALETTE = ((56, 56, 255), (151, 157, 255), (31, 112, 255), (29, 178, 255), (49, 210, 207))
# BGR, away from the palette's reds and yellows: where the frame moved, and where the detector ran.
MOTION_COLOR = (0, 200, 0)
REGION_COLOR = (255, 160, 0)


def annotate(
    image: npt.NDArray[np.uint8],
    detections: Detections,
    class_names: tuple[str, ...],
    track_ids: npt.NDArray[np.int64] | None = None,
    predicted: npt.NDArray[np.bool_] | None = None,
    distance: npt.NDArray[np.float32] | None = None,
    motion_boxes: npt.NDArray[np.int32] | None = None,
    regions: npt.NDArray[np.int32] | None = None,
    metric: bool = False,
) -> npt.NDArray[np.uint8]:
    """A copy of `image` with each detection's box and label drawn on it: '#id name score
    distance', the distance in metres ('3.20 m') where the depth is `metric`, else relative
    ('rel 0.53': a relative inverse depth, larger is nearer). With tracks, a box's colour
    follows its id and predicted boxes (the detector did not see them this frame) are drawn
    thin; a NaN distance is left out. A label that would cover one drawn before goes below it.
    `motion_boxes` and `regions` ((K, 4) x1, y1, x2, y2 source pixels: what moved, the windows
    the detector ran on) are drawn first, one pixel wide, in MOTION_COLOR and REGION_COLOR."""
    canvas = image.copy()
    placed: list[tuple[int, int, int, int]] = []  # the labels drawn: x1, y1, x2, y2
    for boxes, color in ((regions, REGION_COLOR), (motion_boxes, MOTION_COLOR)):
        for x1, y1, x2, y2 in boxes.tolist() if boxes is not None else ():
            cv2.rectangle(canvas, (x1, y1), (x2, y2), color, 1)
    xyxy = detections.xyxy.astype(int).tolist()
    keys = [int(k) for k in (track_ids if track_ids is not None else detections.class_id)]
    colors = [_PALETTE[key % len(_PALETTE)] for key in keys]
    for i, (x1, y1, x2, y2) in enumerate(xyxy):  # every box first: no box crosses a label
        thin = predicted is not None and bool(predicted[i])
        cv2.rectangle(canvas, (x1, y1), (x2, y2), colors[i], 1 if thin else 2)
    for i, (x1, y1, _, _) in enumerate(xyxy):
        cls = int(detections.class_id[i])
        name = class_names[cls] if cls < len(class_names) else str(cls)
        label = f"{name} {float(detections.confidence[i]):.2f}"
        if track_ids is not None:
            label = f"#{keys[i]} {label}"
        if distance is not None and np.isfinite(distance[i]):
            value = float(distance[i])
            label += f" {value:.2f} m" if metric else f" rel {value:.2f}"
        _label(canvas, label, x1, y1, colors[i], placed)
    return canvas


def _label(
    canvas: npt.NDArray[np.uint8],
    text: str,
    x: int,
    y: int,
    color: Any,
    placed: list[tuple[int, int, int, int]],
) -> None:
    (tw, th), _ = cv2.getTextSize(text, cv2.FONT_HERSHEY_SIMPLEX, 0.5, 1)
    top = max(y - th - 4, 0)
    # People in a crowd have boxes whose tops meet: a label that would cover one already drawn
    # moves below it (and so on), as far as the picture goes.
    while top + th + 4 < canvas.shape[0] and any(
        x < x2 and x + tw + 2 > x1 and top < y2 and top + th + 4 > y1 for x1, y1, x2, y2 in placed
    ):
        top = max(y2 for x1, y1, x2, y2 in placed if x < x2 and x + tw + 2 > x1 and top < y2)
    placed.append((x, top, x + tw + 2, top + th + 4))
    cv2.rectangle(canvas, (x, top), (x + tw + 2, top + th + 4), color, -1)
    cv2.putText(
        canvas,
        text,
        (x + 1, top + th + 1),
        cv2.FONT_HERSHEY_SIMPLEX,
        0.5,
        (255, 255, 255),
        1,
        cv2.LINE_AA,
    )


class VideoSink(Sink):
    """One MP4 (of one source when `source_id` is set), named `<stem>.partial.mp4` until closed;
    `draw_regions` adds motion gating's moved boxes and detector windows (`annotate`)."""

    def __init__(
        self,
        path: str | Path,
        fps: float = 30.0,
        codec: str = "libx264",
        source_id: int | None = None,
        preset: str = "veryfast",
        draw_regions: bool = False,
    ) -> None:
        import av

        self.path = Path(path)
        self.source_id = source_id
        self.draw_regions = draw_regions  # motion gating's boxes and windows too
        try:  # an unknown codec fails here, before any frame is processed
            av.codec.Codec(codec, "w")
        except (av.FFmpegError, ValueError) as err:
            raise SinkError(f"cannot encode {self.path}: unknown encoder '{codec}'") from err
        check_writable(self.path)
        self.fps = fps if fps > 0 else 30.0
        self.codec = codec
        self.preset = preset
        self._probe()
        self._partial = partial_path(self.path)
        self._container: Any = None
        self._stream: Any = None
        self._encoder: Encoder | None = None
        self._closed = False

    def _probe(self) -> None:
        """Open the encoder as `_start` will, on a small picture and no file: what it refuses
        (an unknown preset; mjpeg, which takes no limited-range yuv420p) fails here, before
        any frame is processed, not with the first frame while the run's other outputs wait."""
        import av

        try:
            context = av.CodecContext.create(self.codec, "w")
            self._configure(context, 64, 64)
            context.open()  # freed with the object: PyAV's contexts have no close()
        except (av.FFmpegError, ValueError) as err:
            raise SinkError(f"cannot encode {self.path} with {self.codec}: {err}") from err

    def _configure(self, context: Any, height: int, width: int) -> None:
        context.width, context.height = width, height
        context.pix_fmt = "yuv420p"
        context.time_base = 1 / Fraction(self.fps).limit_denominator(1001)
        if self.codec == "libx264":
            context.options = {"preset": self.preset, "crf": "23"}

    def _start(self, height: int, width: int) -> None:
        import av

        if height < 2 or width < 2:  # yuv420p halves each side: a 1-pixel side has no chroma
            raise SinkError(
                f"cannot encode {self.path}: its frames are {width}×{height} pixels, and a video"
                " needs at least 2×2"
            )
        try:
            self._container = av.open(str(self._partial), mode="w")
            rate = Fraction(self.fps).limit_denominator(1001)
            stream = self._container.add_stream(self.codec, rate=rate)
            self._configure(stream.codec_context, height - height % 2, width - width % 2)
            stream.codec_context.open()  # bad options (an unknown preset) fail here, clearly
        except (av.FFmpegError, ValueError) as err:
            self._discard()
            raise SinkError(f"cannot encode {self.path} with {self.codec}: {err}") from err
        self._stream = stream
        self._encoder = Encoder(self._container, stream, str(self._partial))

    def _discard(self) -> None:
        """Drop an encoder that never took a frame, and any file it made: nothing was written."""
        container, self._container, self._stream = self._container, None, None
        if container is not None:
            with contextlib.suppress(Exception):  # it failed already; its own error is reported
                container.close()
        self._partial.unlink(missing_ok=True)

    def write(self, result: FrameResult) -> None:
        if self._closed:
            raise SinkError(f"{self.path}: write after close")
        if self.source_id is not None and result.frame.source_id != self.source_id:
            return
        tracks = result.tracks
        image = annotate(
            result.frame.image,
            result.detections,
            result.class_names,
            tracks.track_id if tracks is not None else None,
            tracks.predicted if tracks is not None else None,
            result.distance,
            result.motion_boxes if self.draw_regions else None,
            result.regions if self.draw_regions else None,
            metric=result.depth is not None and result.depth.metric,
        )
        if self._stream is None:
            self._start(*image.shape[:2])
        assert self._encoder is not None, "started with the stream"
        height, width = self._stream.height, self._stream.width
        # The annotated copy, not the frame: the frame's buffer is free once this returns.
        self._encoder.put(np.ascontiguousarray(image[:height, :width]))

    def close(self, complete: bool = True) -> list[Path]:
        """All or nothing: the file is renamed complete only when the encoder's delayed frames
        and the container's index were written; otherwise it keeps its `.partial` name."""
        import av

        self._closed = True
        if self._container is None:
            return []
        container, self._container = self._container, None
        try:
            try:
                if self._encoder is not None:
                    self._encoder.finish()  # what is queued, then the delayed frames
            finally:
                container.close()  # the index: without it the MP4 does not play
        except (av.FFmpegError, OSError) as err:
            raise SinkError(f"cannot finalize {self.path}: {err.strerror or err}") from err
        if not complete:
            return [self._partial]
        return [finalize(self._partial, self.path)]


def join_videos(parts: list[Path], final: Path) -> Path:
    """The MP4 files `parts` (each encoded the same way: one run's frame ranges) as one file
    `final`, their frames one after another, packets copied (nothing encoded again). Written
    as `final`'s `.partial` until whole; a SinkError when a part cannot be read or the file
    written."""
    import av

    check_writable(final)
    partial = partial_path(final)
    try:
        with av.open(str(partial), mode="w") as out:
            stream: Any = None
            offset = Fraction(0)  # seconds: the parts before
            for part in parts:
                with av.open(str(part)) as source:
                    video = source.streams.video[0]
                    # PyAV says None only for a stream not yet set up; a demuxed one has it.
                    time_base = video.time_base
                    assert time_base is not None
                    if stream is None:
                        stream = out.add_stream_from_template(video)
                    shift = round(offset / time_base)  # in this part's time base
                    end = shift
                    for packet in source.demux(video):
                        if packet.dts is None:  # the demuxer's flush packet
                            continue
                        if packet.pts is not None:
                            end = max(end, shift + packet.pts + (packet.duration or 0))
                            packet.pts += shift
                        packet.dts += shift
                        packet.stream = stream  # muxed in its own time base, rescaled there
                        out.mux(packet)
                    offset = end * time_base
    except (av.FFmpegError, OSError, IndexError) as err:
        partial.unlink(missing_ok=True)
        raise SinkError(f"cannot join {len(parts)} parts into {final}: {err}") from err
    return finalize(partial, final)
