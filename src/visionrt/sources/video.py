"""Video files, V4L2 cameras and network streams, decoded by FFmpeg through PyAV and turned
upright as their display matrix says (a phone's portrait video is stored landscape)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from visionrt.errors import ConfigError, SourceError
from visionrt.sources.base import Source, SourceOptions
from visionrt.sources.frame_index import seek_frames
from visionrt.sources.orientation import MIRRORED, display_turns, first_turns, upright
from visionrt.sources.stop_clock import STOP_CLOCK, install_stop_clock
from visionrt.types import Frame

MAX_CONSECUTIVE_CORRUPT = 25  # live only: then the stream is broken and reconnecting may help


class VideoSource(Source):
    """`kind` is file, camera or stream; cameras and streams are live and reconnect on failure."""

    def __init__(self, spec: str, source_id: int, options: SourceOptions, kind: str) -> None:
        super().__init__()
        self.name = spec
        self.source_id = source_id
        self.options = options
        self.kind = kind
        self.i420 = options.pixels == "i420"
        self.paced = options.realtime and kind == "file"
        auto_live = kind != "file" or self.paced
        self.live = auto_live if options.mode == "auto" else options.mode == "live"
        self._container: Any = None
        self._stream: Any = None
        self._last_error = ""
        self._offset = 0.0  # a looped file's media time at its latest start
        self._rounds_index = 0  # frames since then
        self._turns: int | None = None  # a file's quarter turns to upright (read at first open)
        self._mirror_said = False
        if (options.start_frame or options.end_frame) and self.live and not self.paced:
            why = "with no frame to start or end at (ranges: files, image folders, synthetic:)"
            raise ConfigError(f"source.start_frame/end_frame: '{spec}' is a live {kind}, {why}")
        self._open()  # fail at construction: a bad path is reported before any model loads
        self.check_start()

    def _open(self) -> None:
        import av

        install_stop_clock()
        open_options: dict[str, str] = {}
        fmt = None
        if self.kind == "stream" and self.name.lower().startswith(("rtsp://", "rtsps://")):
            open_options["rtsp_transport"] = "tcp"
        if self.kind == "camera":
            fmt = "v4l2"
        try:
            timeout = None if self.kind == "file" else (self.options.read_timeout,) * 2
            self._container = av.open(self.name, format=fmt, options=open_options, timeout=timeout)
        except (av.FFmpegError, OSError) as err:
            hint = ""
            if self.kind == "file" and not isinstance(err, (FileNotFoundError, PermissionError)):
                hint = " (not a video, or a truncated or corrupt file?)"
            raise SourceError(
                f"cannot open {self.kind} '{self.name}': {_reason(err)}{hint}"
            ) from err
        if not self._container.streams.video:
            self._container.close()
            raise SourceError(f"'{self.name}' has no video stream")
        stream = self._container.streams.video[0]
        if stream.codec_context is None:
            self._container.close()
            raise SourceError(
                f"'{self.name}': the video stream cannot be decoded"
                " (no codec parameters; truncated or corrupt file?)"
            )
        # Frame threading keeps one core decoding while the other runs the model.
        stream.thread_type = "AUTO"
        if self.options.decode_threads:
            stream.thread_count = self.options.decode_threads
        self._stream = stream
        rate = stream.average_rate or stream.guessed_rate
        self.fps = float(rate) if rate else 0.0
        self.frame_count = int(stream.frames or 0)
        self.frame_count_estimated = False
        if not self.frame_count and self.kind == "file" and self._container.duration and self.fps:
            # Matroska and others declare a duration, not a count: what it implies.
            self.frame_count = round(self._container.duration / av.time_base * self.fps)
            self.frame_count_estimated = True
        if self._turns is None:
            self._turns = first_turns(self.name) if self.kind == "file" else 0
        height, width = stream.codec_context.height, stream.codec_context.width
        self.size = (width, height) if self._turns in (1, 3) else (height, width)
        # Where the video declares its end (media seconds), to tell a finite video that is over
        # from a stream that dropped; and how far this connection got.
        self._media_span, self._media_end = _declared_span(self._container, stream)
        self._media_time: float | None = None
        self._connection_frames = 0

    def frames(self) -> Iterator[Frame]:
        index = 0
        # A camera has no frame to start at; a file read in real time (its stand-in) has, and
        # is paced from the first frame it delivers.
        skip = 0 if self.live and not self.paced else self.options.start_frame
        looped = self.paced and self.options.loop and self.frame_count > 0
        rounds = skip // self.frame_count if looped else 0
        if rounds and self.fps:  # whole rounds passed over are counted, not decoded
            index = rounds * self.frame_count
            self._offset += index / self.fps
        # A file started (or ended) part-way is placed by its frames' timestamps: a seek to the
        # keyframe before its first frame, and an end that a corrupt frame does not move.
        start_pts = end_pts = None
        if self.kind == "file" and not looped and (skip or self.options.end_frame):
            start_pts, end_pts = self._place(skip, self.options.end_frame)
            index = skip if start_pts is not None else 0
        end_frame = self.options.end_frame or -1
        started = time.perf_counter()
        attempt = 0
        stamp = 0.0
        # A reconnect's gap runs from the last frame before it (a stall first waits out the read
        # timeout) to the first frame after it, or to the end when none comes.
        last_at, in_gap = started, False
        try:
            while not self._stopped:
                try:
                    for frame in self._decode():
                        attempt = 0
                        if start_pts is not None:  # from the keyframe before the first frame
                            if frame.pts is None or frame.pts < start_pts:
                                continue
                            if frame.pts != start_pts:  # the seek missed it
                                raise _Misplaced
                            start_pts = None
                        if end_pts is not None and frame.pts is not None and frame.pts >= end_pts:
                            return
                        if index < skip:  # numbered, not converted nor handed on
                            # Its time: where a loop's next round starts from, and what a
                            # file's later times are clamped to (damaged ones step back).
                            if self.paced:
                                stamp = self._media_stamp(frame)
                            elif frame.time is not None:
                                stamp = self._stamp(frame, index, started, stamp)[0]
                            index += 1
                            self._rounds_index += 1
                            continue
                        if self.paced and index == skip and skip:
                            started = time.perf_counter() - self._media_stamp(frame)
                        stamp, now = self._stamp(frame, index, started, stamp)
                        if in_gap:
                            self.stats.gap_seconds += now - last_at
                            in_gap = False
                        last_at = now
                        yield Frame(
                            source_id=self.source_id,
                            index=index,
                            pixels=self._pixels(frame),
                            timestamp=stamp,
                            captured_at=now,
                            source_name=self.name,
                        )
                        index += 1
                        self._rounds_index += 1
                        self.stats.frames = index
                        if self._stopped or index in (self.options.max_frames, end_frame):
                            return
                    if self._stopped:  # a clean stop is not a disconnect
                        return
                    if self.paced and self.options.loop and index:
                        self._rewind(stamp)
                        continue
                    if not self.live or self.paced:
                        self.check_ending()
                        return
                    if self._ended_cleanly():  # a finite video, not a dropped stream
                        return
                    reason = "end of stream"
                except _Misplaced:  # numbered from the first frame, as without an index
                    self.stats.events.append(f"{self.name}: seek missed frame {skip}, decoded")
                    start_pts, end_pts, index = None, None, 0
                    self.close()
                    self._open()
                    continue
                except SourceError as err:
                    if self._stopped:
                        return
                    if not self.live or self.paced:
                        if self.stats.frames == 0:
                            raise
                        self.stats.ended_early = str(err)
                        self.check_ending()
                        return
                    reason = str(err)
                attempt += 1
                in_gap = True
                if attempt > self.options.reconnect_attempts:
                    # The last reconnect's own failure says more than the disconnect before it.
                    self.stats.ended_early = (
                        f"{self.name}: gave up after {self.options.reconnect_attempts} reconnects"
                        f" ({self._last_error or reason})"
                    )
                    return
                self._reconnect(attempt, reason)
        finally:
            if in_gap:
                self.stats.gap_seconds += time.perf_counter() - last_at

    def _pixels(self, frame: Any) -> Any:
        """`frame` as `Frame.pixels`: its own I420 planes, copied, where asked for and it has
        them (full-range "yuvj" frames and odd sizes are converted, as OpenCV's I420 reading
        is limited-range and whole chroma samples); BGR otherwise. A frame whose display matrix
        turns it is turned upright, in BGR, as players show it."""
        turns = display_turns(frame)
        if turns == MIRRORED and not self._mirror_said:
            self._mirror_said = True
            self.stats.events.append(
                f"{self.name}: its display matrix mirrors the picture: not applied, frames as"
                " stored"
            )
        if turns > 0:
            return upright(frame.to_ndarray(format="bgr24"), turns)
        if self.i420 and frame.format.name == "yuv420p" and not (frame.width | frame.height) & 1:
            return frame.to_ndarray()
        return frame.to_ndarray(format="bgr24")

    def _place(self, start: int, end: int) -> tuple[int | None, int | None]:
        """The timestamps of frames `start` (when > 0: the container seeks to the keyframe
        before it) and `end` (when > 0); (None, None) where the frames cannot be placed by
        timestamp, and are numbered by decoding from the first one."""
        placed = seek_frames(self._container, self._stream, self.name, start, end)
        if isinstance(placed, str):
            self.stats.events.append(
                f"{self.name}: frames not placed by timestamp ({placed}): decoded from the first"
            )
            self.close()  # a seek may have moved it
            self._open()
            return None, None
        return placed

    def _stamp(
        self, frame: Any, index: int, started: float, previous: float
    ) -> tuple[float, float]:
        """The frame's timestamp and capture time; a paced file waits here for its media time."""
        now = time.perf_counter()
        if self.paced:  # media time, delivered when a camera would deliver it
            stamp = self._media_stamp(frame)
            time.sleep(max(0.0, started + stamp - now))
            return stamp, time.perf_counter()
        if self.live:
            return now - started, now
        if frame.time is not None:  # damaged files can step back: clamp
            return (float(frame.time) if index == 0 else max(previous, float(frame.time))), now
        return previous + (1.0 / self.fps if self.fps else 0.0), now

    def _media_stamp(self, frame: Any) -> float:
        """A paced file's frame at its media time, after the rounds before (looped)."""
        stamp = float(frame.time) if frame.time is not None else self._rounds_index / self.fps
        return stamp + self._offset

    def _rewind(self, last: float) -> None:
        """A looped file starts again: reopened, its times continuing after `last`."""
        self._offset = last + (1.0 / self.fps if self.fps else 0.0)
        self._rounds_index = 0
        self.close()
        self._open()

    def _ended_cleanly(self) -> bool:
        """The input ended without an error after the frames, or the duration, that it
        declared: a finite video (a file served over HTTP) that is over, not a dropped stream.
        A stream cut mid-way ends with a read error or short of what it declared; a camera, or a
        stream that declares neither, never ends this way."""
        if self.kind == "camera":
            return False
        declared = int(self._stream.frames or 0)
        if declared and self._connection_frames >= declared - max(2, declared // 50):
            return True
        if self._media_end is None or self._media_time is None:
            return False
        frame_seconds = 1.0 / self.fps if self.fps else 0.0
        # As for a frame count derived from a duration: a frame or two of rounding, or an
        # audio track that runs a little longer.
        slack = max(2 * frame_seconds, self._media_span / 50)
        return self._media_time + frame_seconds >= self._media_end - slack

    def _decode(self) -> Iterator[Any]:
        """Decoded frames; a packet that fails to decode or a frame the decoder flags as
        corrupt is skipped and counted."""
        import av

        if self._container is None:
            raise SourceError(f"'{self.name}': not connected")
        corrupt_run = 0
        try:
            packets = self._container.demux(self._stream)
            while not self._stopped:
                with STOP_CLOCK.watching(self):
                    packet = next(packets, None)
                if packet is None:
                    return
                try:
                    decoded = packet.decode()
                except av.FFmpegError:
                    self.stats.corrupt += 1
                    corrupt_run += 1
                    if self.live and corrupt_run > MAX_CONSECUTIVE_CORRUPT:
                        raise SourceError(
                            f"'{self.name}': {corrupt_run} corrupt packets in a row"
                        ) from None
                    continue
                corrupt_run = 0
                for frame in decoded:
                    self._connection_frames += 1
                    if frame.time is not None:
                        self._media_time = float(frame.time)
                    if frame.is_corrupt:  # decoded with errors concealed: grey or smeared
                        self.stats.corrupt += 1
                    else:
                        yield frame
        except av.FFmpegError as err:
            raise SourceError(
                f"'{self.name}': read failed after frame {self.stats.frames}: {_reason(err)}"
            ) from err

    def _reconnect(self, attempt: int, reason: str) -> None:
        delay = min(
            self.options.reconnect_backoff * 2 ** (attempt - 1), self.options.reconnect_max_backoff
        )
        self.stats.events.append(f"reconnect {attempt} after: {reason}")
        self.close()
        deadline = time.monotonic() + delay
        while time.monotonic() < deadline and not self._stopped:
            time.sleep(0.05)
        if self._stopped:
            return
        try:
            with STOP_CLOCK.watching(self):
                self._open()
            self._last_error = ""
        except SourceError as err:
            if self._stopped:  # interrupted by stop(): not a failed attempt
                return
            self._last_error = str(err)
            self.stats.events.append(str(err))
        self.stats.reconnects += 1

    def close(self) -> None:
        # The stream holds the codec context, and with it FFmpeg's frame-threading decoder
        # threads: closing the container leaves them running for as long as this object lives
        # (a service keeps each source it ever had, for its summary).
        self._stream = None
        if self._container is not None:
            try:
                self._container.close()
            finally:
                self._container = None


class _Misplaced(Exception):
    """A seek did not land on the frame the index placed there."""


def _declared_span(container: Any, stream: Any) -> tuple[float, float | None]:
    """(duration, end) in media seconds that the video stream, or else the container,
    declares; (0, None) when neither does (a camera, a live stream)."""
    import av

    if stream.duration and stream.time_base:
        start = stream.start_time * stream.time_base if stream.start_time is not None else 0
        span = float(stream.duration * stream.time_base)
        return span, float(start) + span
    if container.duration:
        start = (container.start_time or 0) / av.time_base
        span = container.duration / av.time_base
        return span, start + span
    return 0.0, None


def _reason(err: BaseException) -> str:
    text = getattr(err, "strerror", None) or str(err)
    return text.splitlines()[0] if text else type(err).__name__
