"""`visionrt serve`'s own options (the config's `serve:` section)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from visionrt.errors import ConfigError


@dataclass(frozen=True, slots=True)
class ServeOptions:
    """`visionrt serve`: where its HTTP API and live view listen (beyond 127.0.0.1 only with a
    `token`, also read from VISIONRT_TOKEN), the folders the API may open video files from
    (`files`; streams and cameras need none), previews per second and width, seconds without a
    frame before a camera is "down", and where events go (`events`: {mqtt: {host, port, topic,
    qos}, webhooks: [{url, attempts, headers}]}, see docs/events.md)."""

    host: str = "127.0.0.1"
    port: int = 8080
    token: str = ""
    files: tuple[str, ...] = ()
    preview_rate: float = 5.0
    preview_width: int = 640
    down_after: float = 5.0
    events: dict[str, Any] = field(default_factory=dict)
    event_queue: int = 1000

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
