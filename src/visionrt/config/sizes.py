"""The config's `sizes` section: per source frame size "HEIGHTxWIDTH", the detector the sources of
that size run instead of the run's own."""

from __future__ import annotations

from dataclasses import dataclass, field

from visionrt.backends import BackendOptions
from visionrt.errors import ConfigError

Size = tuple[int, int]  # a source's frames: (height, width) in pixels


@dataclass(frozen=True, slots=True)
class SizedDetector:
    """The detector the sources of one frame size run instead of the run's own: what a plan
    proved there (`accuracy.geometry`: another artifact, input size or precision). The run
    config's `sizes` section holds one per size, keyed "HEIGHTxWIDTH"."""

    model: str
    """The detector file the sources of this size run."""
    backend: str = ""
    """Its runtime, as the run's `backend` ("": the one that reads its file)."""
    inference: BackendOptions = field(default_factory=BackendOptions)
    """Its runtime options: its own, not the run's `inference` (a key not given takes its
    default; its section below)."""


def size_key(size: Size) -> str:
    """The run config's key for a frame size: "480x640"."""
    return f"{size[0]}x{size[1]}"


def parse_size_key(key: str) -> Size:
    """The frame size a key names ("480x640" → (480, 640)), or a ConfigError naming it."""
    height, sep, width = str(key).lower().partition("x")
    if not (sep and height.isdigit() and width.isdigit() and int(height) and int(width)):
        raise ConfigError(
            f"sizes: '{key}': expected a frame size HEIGHTxWIDTH in pixels, e.g. 480x640"
        )
    return int(height), int(width)
