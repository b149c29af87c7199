"""Which reader serves a source string: declarative rows, tried in order (as for backends)."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from visionrt.errors import SourceNotFoundError
from visionrt.sources.base import IMAGE_SUFFIXES, STREAM_SCHEMES, Source, SourceOptions
from visionrt.sources.images import ImageSource
from visionrt.sources.naming import default_name, split_name, unique_names
from visionrt.sources.process import ProcessSource
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
        raise SourceNotFoundError(f"source not found: {spec}")
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


def worker_options(specs: list[str], options: SourceOptions) -> list[SourceOptions]:
    """Each source's options with `workers` "auto" settled: process for the cameras and streams
    when two or more are opened together, thread for the rest."""
    if options.workers != "auto":
        return [options] * len(specs)
    live = [source_kind(spec) in LIVE_KINDS for spec in specs]
    several = sum(live) >= 2
    return [
        replace(options, workers="process" if several and is_live else "thread") for is_live in live
    ]


def open_source(spec: str, source_id: int = 0, options: SourceOptions | None = None) -> Source:
    """Open a video file, image file/folder/glob, camera (`/dev/videoN` or an index), stream URL,
    or `synthetic:WIDTHxHEIGHT:FRAMES`. With `options.workers == "process"` the source is
    opened and decoded in a worker process of its own (`ProcessSource`)."""
    options = options or SourceOptions()
    if options.workers == "process":
        return ProcessSource(spec, source_id, options)
    row = next(r for r in ROWS if r.matches(spec))
    return row.open(spec, source_id, options)


def open_sources(
    given: Sequence[str | Source], options: SourceOptions
) -> tuple[list[Source], list[str], list[bool], list[str]]:
    """Open each source (`rgb=cam0.mp4` names one; a Source is taken as it is): the sources, their
    unique names, whether each name was given, and each spec without its name ("" for a
    Source)."""
    named = [split_name(s) if isinstance(s, str) else ("", s) for s in given]
    specs = [spec if isinstance(spec, str) else "" for _, spec in named]
    per_source = worker_options(specs, options)
    sources = [
        spec if isinstance(spec, Source) else open_source(spec, i, per_source[i])
        for i, (_, spec) in enumerate(named)
    ]
    was_named = [bool(name) for name, _ in named]
    names = unique_names(
        [
            name or default_name(s.name, i)
            for i, ((name, _), s) in enumerate(zip(named, sources, strict=True))
        ],
        was_named,
    )
    return sources, names, was_named, specs
