"""One work unit on a worker: its source through a Pipeline built from the run's configuration,
the results sent back as (frame index, JSONL line) batches in frame order."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import closing
from dataclasses import replace
from typing import Any

from visionrt.config import load_config, pipeline_for
from visionrt.distributed.units import WorkUnit
from visionrt.errors import ConfigError, ModelLoadError, SourceError

Send = Callable[[tuple[tuple[int, str], ...]], None]
# What another attempt would only repeat: the user's file, model or options.
USER_ERRORS = (SourceError, ConfigError, ModelLoadError)


def unit_batches(
    unit: WorkUnit,
    run: Mapping[str, Any],
    threads: int = 0,
    batch_frames: int = 32,
    batch_seconds: float = 0.5,
    summary: dict[str, Any] | None = None,
) -> Iterator[tuple[tuple[int, str], ...]]:
    """Run `unit` with the configuration `run` (RunConfig's sections as a nested dict, its plan
    settled on the driver), yielding (frame index, JSONL line) batches in frame order (at most
    `batch_frames`, or what `batch_seconds` gathered). `threads` (the CPUs the worker was given;
    0: the runtime's default) caps inference threads. Frames before the unit's start (a retry
    resuming) are read, not sent. At the end, `summary` gets the run's summary. A bad source,
    model or option raises the CLI's one-line error (SourceError, ModelLoadError, ConfigError)."""
    cfg = load_config(values=dict(run))
    if threads:  # what the user set is kept; the runtime's default would take every core
        if not cfg.inference.threads:
            cfg = replace(cfg, inference=replace(cfg.inference, threads=threads))
        if not cfg.source.decode_threads:
            cfg = replace(cfg, source=replace(cfg.source, decode_threads=threads))
    if unit.end_frame is not None:
        if unit.end_frame <= unit.start_frame:  # an empty range (max_frames 0 is "all")
            return
        limit = min(unit.end_frame, cfg.source.max_frames or unit.end_frame)
        cfg = replace(cfg, source=replace(cfg.source, max_frames=limit))
    pipeline = pipeline_for(cfg, [f"{unit.name}={unit.spec}"])
    # A live stream's frame numbers start again with each attempt: nothing there to skip.
    skip_below = 0 if unit.live else unit.start_frame
    pending: list[tuple[int, str]] = []
    since = time.monotonic()
    try:
        with closing(iter(pipeline)) as results:  # closed early too: its threads end
            for result in results:
                index = result.frame.index
                if index < skip_below:
                    continue
                pending.append((index, json.dumps(result.to_json(), separators=(",", ":"))))
                if len(pending) >= batch_frames or time.monotonic() - since >= batch_seconds:
                    yield tuple(pending)
                    pending, since = [], time.monotonic()
        if pending:
            yield tuple(pending)
    finally:
        pipeline.close()
    if summary is not None:
        summary.update(pipeline.summary().to_json())


def run_unit(
    unit: WorkUnit, run: Mapping[str, Any], send: Send, threads: int = 0
) -> dict[str, Any]:
    """`unit_batches`, each batch handed to `send`; the run's summary."""
    summary: dict[str, Any] = {}
    for batch in unit_batches(unit, run, threads, summary=summary):
        send(batch)
    return summary
