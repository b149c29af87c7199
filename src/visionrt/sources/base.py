"""The source contract: options, accounting, and the `Source` base every reader implements."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from visionrt.errors import ConfigError, SourceError
from visionrt.frames import Frame, Pinning

STREAM_SCHEMES = ("rtsp://", "rtsps://", "rtmp://", "http://", "https://", "udp://", "tcp://")
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff")


@dataclass(frozen=True, slots=True)
class SourceOptions:
    """How each source is read (the config's `source` section): which of its frames a run
    gets, how a camera or stream that fails is reconnected, and where its frames are decoded."""

    mode: str = "auto"
    """file (every frame, in order), live (the freshest frame wins, older ones are dropped) or
    auto (live for cameras, streams and `realtime` files)."""
    max_frames: int = 0
    """Stop each source after this many frames (0: all of them)."""
    decode_threads: int = 0
    """FFmpeg's decoding threads per video source (0: FFmpeg's choice, a thread per core; with
    several sources, the cores shared out between them)."""
    reconnect_attempts: int = 5
    """Reconnects of a camera or stream that failed, and restarts of a source's worker process
    that died, before the source ends (0: never)."""
    reconnect_backoff: float = 0.5
    """Seconds before the first reconnect or restart; each next one waits twice as long."""
    reconnect_max_backoff: float = 8.0
    """The longest wait between reconnects or restarts, in seconds."""
    read_timeout: float = 10.0
    """Seconds a camera or stream may take to open or to deliver before it counts as failed."""
    realtime: bool = False
    """Read a video file at its own frame rate, as a camera delivers: live behaviour (drops,
    latency, SLO) with a file. Such a file is live in auto mode and still ends at its end."""
    workers: str = "auto"
    """thread: decode in a thread of this process; process: in a worker process of its own that
    hands frames over through shared memory; auto: a process for each camera and stream when
    there are two or more of them (none stalled by another's decoding or the GIL), else threads."""
    loop: bool = False
    """Start a `realtime` file again at its end, its times running on: a camera stand-in for a
    service and for soak tests (`visionrt serve`). Only with `realtime`."""
    # A cluster's retry resumes at `start_frame`, a long file's ranges run on several workers. A
    # video's reader seeks to the keyframe before the start where the file's timestamps place
    # its frames, and decodes the frames before it otherwise.
    start_frame: int = 0
    """The first frame of a file to read (0: its first), each frame keeping its number from the
    file's start. Video files, image folders and synthetic sources; a camera or stream is
    refused."""
    end_frame: int = 0
    """The frame a file's reading stops before (0: its end); more than `start_frame`."""
    # Source.want_i420 is auto's request. OpenCV's BT.601 BGR is a level or two from FFmpeg's on
    # some pixels.
    pixels: str = "auto"
    """How a video's frames are delivered: auto keeps YUV 4:2:0 frames as I420 when the
    detector's device converts them, bgr always converts in FFmpeg, i420 always keeps them (host
    work that needs BGR converts with OpenCV)."""

    def __post_init__(self) -> None:
        if self.pixels not in ("auto", "bgr", "i420"):
            raise ConfigError(f"source.pixels: expected auto, bgr or i420, got '{self.pixels}'")
        if self.mode not in ("auto", "file", "live"):
            raise ConfigError(f"source.mode: expected auto, file or live, got '{self.mode}'")
        if self.workers not in ("auto", "thread", "process"):
            raise ConfigError(
                f"source.workers: expected auto, thread or process, got '{self.workers}'"
            )
        if self.max_frames < 0:
            raise ConfigError(f"source.max_frames: expected >= 0, got {self.max_frames}")
        if self.start_frame < 0:
            raise ConfigError(f"source.start_frame: expected >= 0, got {self.start_frame}")
        if self.end_frame and self.end_frame <= self.start_frame:
            raise ConfigError(
                f"source.end_frame: expected 0 (the end) or > start_frame {self.start_frame},"
                f" got {self.end_frame}"
            )
        if self.loop and not self.realtime:
            raise ConfigError("source.loop: loops a file paced at its frame rate: add --realtime")
        if self.reconnect_attempts < 0:
            raise ConfigError(
                f"source.reconnect_attempts: expected >= 0 (0: never reconnect), got"
                f" {self.reconnect_attempts}"
            )


@dataclass(slots=True)
class SourceStats:
    """What happened while reading: frames given, corrupt ones skipped, frames the container
    declared but that never came (`lost`), frames decoded but never given because the reader
    was behind (`missed`, live mode), reconnects and gaps, worker processes started again after
    they died (`restarts`), and one-line warnings."""

    frames: int = 0
    corrupt: int = 0
    lost: int = 0
    missed: int = 0
    reconnects: int = 0
    restarts: int = 0
    gap_seconds: float = 0.0
    ended_early: str = ""
    events: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


class Source(ABC):
    """Yields Frames until the source ends; `stop()` may be called from another thread.

    `frame_count` is what the container declares (0 when unknown); `frame_count_estimated` says
    it was derived from a duration, so a shortfall of a frame or two is not called a loss."""

    name: str
    source_id: int  # set by each source's __init__: its place in the run's sources
    # (height, width) of its frames when known before the first one (files, cameras opened);
    # None when not known or when frames differ in size (an image folder).
    size: tuple[int, int] | None = None
    live: bool = False
    paced: bool = False  # a file read at its frame rate (live, but it ends)
    fps: float = 0.0
    frame_count: int = 0
    frame_count_estimated: bool = False
    damage_hint: str = "truncated or corrupt file?"  # said with a shortfall against frame_count

    def __init__(self) -> None:
        self.stats = SourceStats()
        self._stopped = False
        self.i420 = False  # see want_i420; a video source with `pixels` i420 starts so

    def want_i420(self) -> None:
        """Deliver frames as I420 where the decoder has them so (`Frame.pixels`), from the next
        frame on, unless `source.pixels` is bgr: their consumer uploads them to a device and
        converts there, so the host skips the colour conversion (half of decoding) and half the
        bytes. A source without YUV frames, or a picture of odd size, still delivers BGR;
        `Frame.image` is BGR either way."""
        options: SourceOptions | None = getattr(self, "options", None)
        self.i420 = options is None or options.pixels != "bgr"

    def pin_memory(self, pinning: Pinning) -> None:
        """Where this source's frames lie in memory of its own that lasts (a worker's ring),
        register it with `pinning`, so a device copies them from there. Others: nothing."""
        return

    @abstractmethod
    def frames(self) -> Iterator[Frame]:
        """Decoded frames, in order; ends on end of input or after `stop()`. A file-mode source
        that ends with no frame at all (not stopped) raises SourceError instead."""

    def stop(self) -> None:
        """Ask `frames()` to end soon; safe from any thread, never counted as a disconnect."""
        self._stopped = True

    def close(self) -> None:  # noqa: B027 - sources without handles have nothing to close
        """Release files and connections; safe to call twice."""

    def report(self) -> dict[str, Any]:
        """This source's accounting, for the run summary: `frames` given, `declared` by the
        container (0 when unknown), `lost` (asked for, the declared frames or `max_frames` of
        them, but never given, for a file-mode source that reached its end), `corrupt` (packets
        or images skipped), `missed` (decoded but never given: a live source's reader was
        behind), `reconnects`, `restarts` of a dead worker process, `gap_seconds` without a
        frame around each reconnect or restart (from the last frame before it to the first
        after it), `ended_early` (why it stopped before its end, or ""), and one-line
        `warnings`."""
        stats = self.stats
        return {
            "name": self.name,
            "live": self.live,
            "frames": stats.frames,
            "declared": self.frame_count,
            "lost": stats.lost,
            "corrupt": stats.corrupt,
            "missed": stats.missed,
            "reconnects": stats.reconnects,
            "restarts": stats.restarts,
            "gap_seconds": round(stats.gap_seconds, 3),
            "ended_early": stats.ended_early,
            "warnings": list(stats.warnings),
        }

    def check_start(self) -> None:
        """Refuse a `start_frame` at or past the frames the source declares exactly (called
        once it is open): a range of nothing is the user's mistake, not a damaged file."""
        options: SourceOptions | None = getattr(self, "options", None)
        start = options.start_frame if options is not None else 0
        if options is not None and options.loop and self.paced:
            return  # a looped file's rounds run on past its end
        exact = self.frame_count and not self.frame_count_estimated
        if start and exact and start >= self.frame_count:
            raise ConfigError(
                f"source.start_frame {start}: past the end of '{self.name}'"
                f" ({self.frame_count} frames)"
            )

    def check_ending(self) -> None:
        """Called by a file-mode source that reached the end of its input (not one stopped or
        cut short by `max_frames`): nothing decoded is an error; fewer frames than were asked
        for (those declared, or `max_frames` of them) is a warning with the count lost."""
        if self._stopped or (self.live and not self.paced):
            return
        declared, read = self.frame_count, self.stats.frames
        options: SourceOptions | None = getattr(self, "options", None)
        limits = (options.max_frames, options.end_frame) if options is not None else ()
        limit = min((n for n in limits if n), default=0)
        asked = min(declared, limit) if declared and limit else declared
        shortfall = asked - read
        # A count derived from a duration can be off by a frame or two (rounding, an audio
        # track that runs longer); only a larger shortfall is a loss.
        if self.frame_count_estimated and read and shortfall <= max(2, asked // 50):
            shortfall = 0
        self.stats.lost = max(0, shortfall)
        start = options.start_frame if options is not None else 0
        if read == 0 and start and not self.stats.corrupt:  # a length only estimated, or none
            about = f" (about {declared} frames)" if declared else ""
            raise ConfigError(f"source.start_frame {start}: past the end of '{self.name}'{about}")
        if read == 0:
            of = f" (0 of {declared} declared)" if declared else ""
            skipped = f", {self.stats.corrupt} corrupt skipped" if self.stats.corrupt else ""
            raise SourceError(f"'{self.name}': no decodable frame{of}{skipped}")
        if shortfall > 0:
            about = "about " if self.frame_count_estimated else ""
            of = f"{about}{declared} declared frames"
            if asked < declared:
                of = f"{asked} frames asked ({about}{declared} declared)"
            self.stats.warnings.append(
                f"{self.name}: {read} of {of} decoded, {shortfall} lost ({self.damage_hint})"
            )
