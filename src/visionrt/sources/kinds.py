"""Which reader serves a source string, opened in this process: declarative rows, tried in order
(as for backends)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from visionrt.errors import SourceNotFoundError
from visionrt.sources.base import IMAGE_SUFFIXES, STREAM_SCHEMES, Source, SourceOptions
from visionrt.sources.images import ImageSource
from visionrt.sources.naming import misnamed
from visionrt.sources.synthetic import SyntheticSource
from visionrt.sources.video import VideoSource


def _is_camera(spec: str) -> bool:
    return spec.isdigit() or re.fullmatch(r"/dev/video\d+", spec) is not None


def _is_images(spec: str) -> bool:
    path = Path(spec)
    return path.is_dir() or any(c in spec for c in "*?[") or path.suffix.lower() in IMAGE_SUFFIXES


def _camera(spec: str, source_id: int, options: SourceOptions) -> Source:
    device = f"/dev/video{spec}" if spec.isdigit() else spec
    return VideoSource(device, source_id, options, kind="camera")


def _video_file(spec: str, source_id: int, options: SourceOptions) -> Source:
    path = Path(spec)
    if not path.exists():
        name = misnamed(spec)
        hint = (
            f" ('{name}' is not a source name either: NAME=SOURCE takes a letter or _, then"
            " letters, digits, _ or -)"
            if name
            else ""
        )
        raise SourceNotFoundError(f"source not found: {spec}{hint}")
    if not path.is_file():
        raise SourceNotFoundError(f"source is not a file: {spec}")
    return VideoSource(spec, source_id, options, kind="file")


@dataclass(frozen=True, slots=True)
class SourceRow:
    """One kind of source: how to recognise its string, and how to open it."""

    kind: str
    matches: Callable[[str], bool]
    open: Callable[[str, int, SourceOptions], Source]


ROWS: tuple[SourceRow, ...] = (
    SourceRow("synthetic", lambda s: s.startswith("synthetic:"), SyntheticSource),
    SourceRow("camera", _is_camera, _camera),
    SourceRow(
        "stream",
        lambda s: s.lower().startswith(STREAM_SCHEMES),
        lambda s, i, o: VideoSource(s, i, o, kind="stream"),
    ),
    SourceRow("images", _is_images, ImageSource),
    SourceRow("file", lambda s: True, _video_file),  # last: anything else is a video file
)


LIVE_KINDS = ("camera", "stream")


def source_kind(spec: str) -> str:
    """The row that would open `spec`: synthetic, camera, stream, images or file."""
    return next(r for r in ROWS if r.matches(spec)).kind


def open_here(spec: str, source_id: int = 0, options: SourceOptions | None = None) -> Source:
    """Open `spec` with the reader of the first row that matches it, in this process."""
    row = next(r for r in ROWS if r.matches(spec))
    return row.open(spec, source_id, options or SourceOptions())
