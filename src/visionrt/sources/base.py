"""The source contract: options, accounting, and the `Source` base every reader implements."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from visionrt.errors import ConfigError, SourceError
from visionrt.types import Frame

STREAM_SCHEMES = ("rtsp://", "rtsps://", "rtmp://", "http://", "https://", "udp://", "tcp://")
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff")


@dataclass(frozen=True, slots=True)
class SourceOptions:
    """`mode`: file (every frame, in order), live (freshest frame wins), or auto (live for
    cameras and streams). `reconnect_*` in seconds; `max_frames` 0 means all."""

    mode: str = "auto"
    max_frames: int = 0
    decode_threads: int = 0
    reconnect_attempts: int = 5
    reconnect_backoff: float = 0.5
    reconnect_max_backoff: float = 8.0
    read_timeout: float = 10.0

    def __post_init__(self) -> None:
        if self.mode not in ("auto", "file", "live"):
            raise ConfigError(f"source.mode: expected auto, file or live, got '{self.mode}'")
        if self.max_frames < 0:
            raise ConfigError(f"source.max_frames: expected >= 0, got {self.max_frames}")


@dataclass(slots=True)
class SourceStats:
    """What happened while reading: frames given, corrupt ones skipped, frames the container
    declared but that never came (`lost`), reconnects and gaps, and one-line warnings."""

    frames: int = 0
    corrupt: int = 0
    lost: int = 0
    reconnects: int = 0
    gap_seconds: float = 0.0
    ended_early: str = ""
    events: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


class Source(ABC):
    """Yields Frames until the source ends; `stop()` may be called from another thread."""

    name: str
    live: bool = False
    fps: float = 0.0
    frame_count: int = 0  # 0 when unknown

    def __init__(self) -> None:
        self.stats = SourceStats()
        self._stopped = False

    @abstractmethod
    def frames(self) -> Iterator[Frame]:
        """Decoded frames, in order; ends on end of input or after `stop()`."""

    def stop(self) -> None:
        self._stopped = True

    def close(self) -> None:  # noqa: B027 - sources without handles have nothing to close
        """Release files and connections."""

    def report(self) -> dict[str, Any]:
        """This source's accounting, for the run summary."""
        stats = self.stats
        return {
            "name": self.name,
            "live": self.live,
            "frames": stats.frames,
            "declared": self.frame_count,
            "lost": stats.lost,
            "corrupt": stats.corrupt,
            "reconnects": stats.reconnects,
            "gap_seconds": round(stats.gap_seconds, 3),
            "ended_early": stats.ended_early,
            "warnings": list(stats.warnings),
        }

    def check_ending(self, limit: int = 0) -> None:
        """At the end of a file-mode source: nothing decoded is an error; fewer frames than the
        container declared is a warning with the count lost (not when stopped or limited)."""
        if self._stopped or self.live:
            return
        declared, read = self.frame_count, self.stats.frames
        if read == 0:
            of = f" (0 of {declared} declared)" if declared else ""
            raise SourceError(f"'{self.name}': no decodable frame{of}")
        expected = min(declared, limit) if limit else declared
        if expected and read < expected:
            self.stats.lost = expected - read
            self.stats.warnings.append(
                f"{self.name}: {read} of {declared} declared frames decoded,"
                f" {self.stats.lost} lost (truncated or corrupt file?)"
            )
