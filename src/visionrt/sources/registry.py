"""Opening sources: each by the reader its string names (sources.kinds), in this process or in a
worker process of its own; unique names for several."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import replace

from visionrt.sources.base import Source, SourceOptions
from visionrt.sources.kinds import LIVE_KINDS, ROWS, SourceRow, open_here, source_kind
from visionrt.sources.naming import default_name, split_name, unique_names
from visionrt.sources.process import ProcessSource

__all__ = [
    "LIVE_KINDS",
    "ROWS",
    "SourceRow",
    "open_source",
    "open_sources",
    "source_kind",
    "worker_options",
]


def usable_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def worker_options(specs: list[str], options: SourceOptions) -> list[SourceOptions]:
    """Each source's options with `workers` "auto" settled: process for the cameras and streams
    when two or more are opened together, thread for the rest. Several sources share the cores
    for decoding: `decode_threads` 0 (FFmpeg's own choice, a thread per core for each) becomes
    cores // sources each, at least 1, so 64 streams on 16 cores run 64 decoder threads rather
    than over a thousand."""
    if options.decode_threads == 0 and len(specs) > 1:
        options = replace(options, decode_threads=max(1, usable_cores() // len(specs)))
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
    return open_here(spec, source_id, options)


def open_sources(
    given: Sequence[str | Source],
    options: SourceOptions,
    ranges: Sequence[tuple[int, int]] | None = None,
) -> tuple[list[Source], list[str], list[bool], list[str]]:
    """Open each source (`rgb=cam0.mp4` names one; a Source is taken as it is): the sources, their
    unique names, whether each name was given, and each spec without its name ("" for a
    Source). `ranges`: each source's (`start_frame`, `end_frame`), in place of `options`'."""
    named = [split_name(s) if isinstance(s, str) else ("", s) for s in given]
    specs = [spec if isinstance(spec, str) else "" for _, spec in named]
    per_source = worker_options(specs, options)
    if ranges is not None:
        if len(ranges) != len(given):
            raise ValueError(f"{len(ranges)} frame ranges for {len(given)} sources")
        per_source = [
            replace(o, start_frame=start, end_frame=end)
            for o, (start, end) in zip(per_source, ranges, strict=True)
        ]
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
