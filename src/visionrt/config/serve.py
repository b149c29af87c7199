"""`visionrt serve`'s own options (the config's `serve:` section)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from visionrt.errors import ConfigError


@dataclass(frozen=True, slots=True)
class ServeOptions:
    """`visionrt serve`: where its HTTP API and live view listen, what the API may open, the
    live view's previews, when a camera is "down", and where events go."""

    host: str = "127.0.0.1"
    """The address the API and live view listen on; beyond this machine (127.0.0.1, localhost,
    ::1) only with a `token`."""
    port: int = 8080
    """Their port, 0 to 65535 (0: a free one)."""
    token: str = ""
    """The token every request must carry ("": none; `visionrt serve` reads VISIONRT_TOKEN)."""
    files: tuple[str, ...] = ()
    """The folders the API may open video files and images from (streams and cameras need
    none)."""
    preview_rate: float = 5.0
    """Live-view previews per second of each camera (above 0)."""
    preview_width: int = 640
    """The widest a preview is, in pixels (16 or more)."""
    down_after: float = 5.0
    """Seconds without a frame before a camera is "down" (above 0)."""
    events: dict[str, Any] = field(default_factory=dict)
    """Where events go: {mqtt: {host, port, topic, qos}, webhooks: [{url, attempts, headers}]}
    (see docs/events.md)."""
    event_queue: int = 1000
    """Events waiting per target, past which new ones are dropped and counted (1 or more)."""

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"serve.port: expected 0 to 65535, got {self.port}")
        if not self.down_after > 0:
            raise ConfigError(f"serve.down_after: expected seconds > 0, got {self.down_after}")
        # Checked here, under the user's names, before a model loads (the publisher and the
        # previews check their own arguments again, under theirs).
        if isinstance(self.event_queue, bool) or self.event_queue < 1:
            raise ConfigError(
                f"serve.event_queue: expected events >= 1 (waiting per target), got"
                f" {self.event_queue}"
            )
        if not self.preview_rate > 0:
            raise ConfigError(
                f"serve.preview_rate: expected previews per second > 0, got {self.preview_rate}"
            )
        if self.preview_width < 16:
            raise ConfigError(
                f"serve.preview_width: expected >= 16 pixels, got {self.preview_width}"
            )
