"""A service's start: its pipeline over the sources it was given, less the cameras and streams
that cannot be reached then. Those are kept to be opened again (`Service.retry`) as a stream
that drops is reconnected, so a camera that is down never stops the others from starting."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

from visionrt.config import RunConfig
from visionrt.errors import SourceError
from visionrt.fuse import check_analytics, parse_analytics
from visionrt.pipeline import Pipeline
from visionrt.sources import SourceOptions, open_source
from visionrt.sources.naming import split_name
from visionrt.sources.registry import LIVE_KINDS, source_kind


@dataclass(frozen=True, slots=True)
class Unreachable:
    """A camera or stream that could not be opened at start-up: its `name` and `uri`, the
    `tasks` it runs, its zones and lines as the config gives them (`analytics`), and why
    (`error`: the source's own message)."""

    name: str
    uri: str
    tasks: tuple[str, ...] = ("detect",)
    analytics: Mapping[str, Any] | None = None
    error: str = ""


def start_reachable(
    cfg: RunConfig, start: Callable[[RunConfig], Pipeline]
) -> tuple[Pipeline, RunConfig, list[Unreachable]]:
    """`start(cfg)` (the service's pipeline, over NAME=URI sources). When a source cannot be
    opened (SourceError), each camera and stream among them is opened on its own, and those that
    cannot be are left out of a second `start`. The pipeline, the configuration it runs (`cfg`
    less those), and those left out. The error is raised as it came when none is left out (a
    file that is not there), or when the pipeline could not take one back later: a tiled
    service (no source is added to one), or `depth.on` naming none but those."""
    try:
        return start(cfg), cfg, []
    except SourceError:
        down = unreachable(cfg)
        kept = _without(cfg, down) if down else None
        if kept is None:
            raise
    return start(kept), kept, down


def unreachable(cfg: RunConfig) -> list[Unreachable]:
    """The cameras and streams among `cfg.sources` that cannot be opened now (each tried on
    its own, all at once: a connect that times out holds up no other)."""
    named = [split_name(spec) for spec in cfg.sources]
    live = [(name, uri) for name, uri in named if source_kind(uri) in LIVE_KINDS]
    options = replace(cfg.source, workers="thread")
    with ThreadPoolExecutor(max(1, len(live)), thread_name_prefix="serve-probe") as pool:
        errors = list(pool.map(lambda named: _open_error(named[1], options), live))
    depth = cfg.depth
    down = []
    for (name, uri), error in zip(live, errors, strict=True):
        if error:
            with_depth = bool(depth.model) and (not depth.on or name in depth.on)
            tasks = ("detect", "depth") if with_depth else ("detect",)
            down.append(Unreachable(name, uri, tasks, cfg.analytics.get(name), error))
    return down


def _open_error(uri: str, options: SourceOptions) -> str:
    """Why `uri` cannot be opened ("": it can)."""
    try:
        open_source(uri, 0, options).close()
    except SourceError as err:
        return str(err)
    return ""


def _without(cfg: RunConfig, down: Sequence[Unreachable]) -> RunConfig | None:
    """`cfg` less the sources `down` (their zones and lines checked now, not when they come
    back); None where the pipeline could not add them later."""
    gone = {camera.name for camera in down}
    on = tuple(name for name in cfg.depth.on if name not in gone)
    # An empty `on` is every source: a depth model asked for the cameras left out alone would
    # run on the others.
    depth_elsewhere = cfg.depth.on and not on and len(gone) < len(cfg.sources)
    if cfg.pipeline.tiling.tile or depth_elsewhere:
        return None
    zones = parse_analytics({c.name: c.analytics for c in down if c.analytics is not None})
    check_analytics(zones, sorted(gone), cfg.pipeline.tracking.enabled)
    return replace(
        cfg,
        sources=tuple(spec for spec in cfg.sources if split_name(spec)[0] not in gone),
        analytics={name: zone for name, zone in cfg.analytics.items() if name not in gone},
        depth=replace(cfg.depth, on=on),
    )
