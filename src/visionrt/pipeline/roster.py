"""A running service's sources: opening one into the stages while the others run (its schedule,
gating, fusers and audit window made for it), and retiring one."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from visionrt.errors import ConfigError
from visionrt.fuse import check_analytics, parse_analytics
from visionrt.pipeline.build import source_fusers
from visionrt.pipeline.graph import Graph
from visionrt.pipeline.opening import OpenRun
from visionrt.pipeline.sizes import frame_size
from visionrt.sources import Source, SourceOptions
from visionrt.sources.registry import LIVE_KINDS, open_source, source_kind


class NameInUse(ConfigError):
    """A source of that name runs (HTTP 409)."""


class Stopping(RuntimeError):
    """The service is stopping or not running: no source can be added (HTTP 503)."""


class Roster:
    """The sources a service's opened `run` runs now, or ran until they ended, by name
    (`active`); `graph()` is its stage graph while it runs, `note` says what a source's fusers
    find. `add` and `remove` are called from any thread (the HTTP API's). Adds run one at a
    time (a source's id is its place in the lists); a remove never waits for an add that is
    still opening its source."""

    def __init__(
        self,
        run: OpenRun,
        graph: Callable[[], Graph | None],
        note: Callable[[str], None],
        options: SourceOptions,
    ) -> None:
        self.run, self._graph, self._note, self.options = run, graph, note, options
        self.active: dict[str, int] = {name: i for i, name in enumerate(run.names)}
        self._opening: set[str] = set()  # names an add has claimed
        self._lock = threading.Lock()  # `active` and `_opening`
        self._adding = threading.Lock()

    def add(
        self,
        name: str,
        spec: str,
        depth: bool = False,
        analytics: Mapping[str, Any] | None = None,
        on_open: Callable[[Source], None] | None = None,
    ) -> Source:
        """Open `spec` as source `name` and start it: a bad source (SourceError) or request
        (ConfigError) changes nothing. The other sources are not held up: opening happens
        here, and the stages only see lists grow. `on_open` is told of the source once it is
        open, before its first frame is read (its own outputs open there)."""
        run, graph = self.run, self._graph()
        if graph is None or not graph.source_side.accepting():
            raise Stopping("the service is not running: no source can be added")
        zones = parse_analytics({name: analytics}) if analytics else {}
        check_analytics(zones, [name], run.options.tracking.enabled)
        depth_lanes = list(range(1, len(run.parts.tasks)))
        if depth and not depth_lanes:
            raise ConfigError("tasks: depth needs a depth model: start the service with --depth")
        if run.options.tiling.tile:
            raise ConfigError("pipeline.tiling.tile: sources cannot be added to a tiled service")
        with self._lock:
            # One that ended (a file's end, a stream past its reconnects) gives up its name.
            if name in self._opening or (name in self.active and self._reading(name)):
                raise NameInUse(f"a source named '{name}' is running: remove it first")
            self._opening.add(name)
        source_id = -1
        try:
            with self._adding:
                source_id = self._start(name, spec, depth, depth_lanes, zones, on_open)
        finally:
            with self._lock:
                self._opening.discard(name)
                if source_id >= 0:
                    self.active[name] = source_id
        return self.run.sources[source_id]

    def _start(
        self,
        name: str,
        spec: str,
        depth: bool,
        depth_lanes: list[int],
        zones: Mapping[str, Any],
        on_open: Callable[[Source], None] | None,
    ) -> int:
        """Open the source as the next id and hand it to the stages; its id."""
        run, graph = self.run, self._graph()
        assert graph is not None
        source_id = len(run.sources)
        workers = self.options.workers
        if workers == "auto":  # each camera or stream in a worker process of its own
            workers = "process" if source_kind(spec) in LIVE_KINDS else "thread"
        source = open_source(spec, source_id, replace(self.options, workers=workers))
        lanes = [run.parts.detector_lane(frame_size(source)), *(depth_lanes if depth else [])]
        try:
            if on_open is not None:
                on_open(source)
            run.parts.schedule.append(lanes)
            graph.scheduler.add_source(lanes, source.live)
            if graph.gating is not None:
                graph.gating.add_source()
            if run.parts.planner is not None:
                run.parts.planner.add_source()
            if run.auditor is not None:
                run.auditor.add_source(name)
            fusers = source_fusers(run.parts, run.options, source_id, zones.get(name), self._note)
            graph.add_source(source, name, True, fusers)
        except BaseException:
            # Only while stopping: the lists grown above then see no frame, and no source is
            # added after this one.
            source.close()
            raise
        run.sources.append(source)
        run.names.append(name)
        run.named.append(True)
        return source_id

    def _reading(self, name: str) -> bool:
        graph = self._graph()
        return graph is None or graph.readers[self.active[name]].is_alive()

    def forget(self, source_id: int) -> None:
        """A removed or ended source whose last frames are through (a service's files of it
        finalized): its per-frame state is let go, so a service whose cameras come and go for
        weeks keeps only each one's counts. Nothing while its reader still runs."""
        graph = self._graph()
        if graph is not None and not graph.readers[source_id].is_alive():
            graph.forget(source_id)

    def remove(self, name: str) -> int:
        """Stop reading source `name`; the frames it read are still delivered. Its id."""
        with self._lock:
            source_id = self.active.pop(name, None)
        if source_id is None:
            raise KeyError(name)
        graph = self._graph()
        if graph is not None:
            graph.retire(source_id)
        else:
            self.run.sources[source_id].stop()
        return source_id
