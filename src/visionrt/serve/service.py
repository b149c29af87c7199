"""A long-running service: the pipeline over cameras added and removed while it runs, each
camera's state watched (running, down, ended), its frames into files, live previews and events."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from visionrt.errors import ConfigError, SourceError, VisionRTError
from visionrt.fuse import SourceAnalytics
from visionrt.pipeline import Pipeline
from visionrt.pipeline.degrade import Change
from visionrt.pipeline.roster import NameInUse, Roster, Stopping
from visionrt.serve.outputs import ServiceSinks
from visionrt.serve.preview import PreviewHub
from visionrt.serve.requests import NO_DEPTH, check_name, check_tasks, check_uri
from visionrt.serve.requests import camera_names as camera_names  # `visionrt serve`'s names
from visionrt.serve.startup import Unreachable
from visionrt.sinks.events import EventPublisher, make_event
from visionrt.sources import Source, SourceOptions
from visionrt.telemetry.stats import RunSummary
from visionrt.types import FrameResult

ALL_SOURCES = "*"  # the `source` of an event about every source (the latency ladder's steps)


@dataclass
class Camera:
    """One source of the service as the API shows it. `state`: starting (no frame yet),
    running, down (no frame for `down_after` seconds, or not opened yet: unreachable at
    start-up, `error` says why), ended (a file's end, or reconnects given up: `error`), failed
    (its reader raised: `error`), removed. `source_id` is -1 until it is opened;
    `reconnects` counts the attempts to open it before then."""

    name: str
    uri: str
    tasks: tuple[str, ...]
    source_id: int
    analytics: Mapping[str, Any] | None = None  # its zones and lines, as a request gives them
    reconnects: int = 0
    added: float = field(default_factory=time.time)
    state: str = "starting"
    error: str = ""
    fps: float = 0.0
    outputs: list[str] = field(default_factory=list)
    seen_out: int = 0  # frames out at the last look
    seen_at: float = field(default_factory=time.monotonic)  # when frames last came out


class Service:
    """`pipeline` (made with service=True) run into `sinks`, with live previews (`preview`) and
    events (`publisher`, None: kept for the API only). `files`: folders the API may open video
    and image files from (no other path is read). Call `run()` on one thread (it returns the
    summary when `stop()` is called); `add`, `remove`, `restart`, `retry`, `cameras`, `events`
    from any other."""

    def __init__(
        self,
        pipeline: Pipeline,
        sinks: ServiceSinks,
        preview: PreviewHub,
        publisher: EventPublisher | None = None,
        uris: Sequence[str] = (),
        files: Sequence[str] = (),
        down_after: float = 5.0,
        keep_events: int = 200,
    ) -> None:
        self.pipeline, self.sinks, self.preview = pipeline, sinks, preview
        if pipeline.roster is not None:  # a camera gone for good keeps only its counts
            sinks.on_settled = pipeline.roster.forget
        self.publisher, self.files, self.down_after = publisher, tuple(files), down_after
        self.telemetry = pipeline.telemetry
        self._events: deque[dict[str, Any]] = deque(maxlen=keep_events)
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._running = False
        self.cameras: dict[str, Camera] = {}
        self._gone: list[dict[str, Any]] = []  # cameras removed or replaced, as they were then
        # Cameras not opened yet, by name: each one's reconnecting thread stops when its event
        # is set (removed, or the service stopped).
        self._waiting: dict[str, threading.Event] = {}
        # Told after a camera was added or removed (the metrics' per-source readers).
        self.on_change: Callable[[], None] | None = None
        depth_on = set(pipeline.depth_sources())
        for i, name in enumerate(pipeline.names):
            tasks = ("detect", "depth") if i in depth_on else ("detect",)
            uri = uris[i] if i < len(uris) else pipeline.sources[i].name
            zones = as_request(pipeline.analytics.get(name))
            camera = self.cameras[name] = Camera(name, uri, tasks, i, zones)
            fps = pipeline.sources[i].fps
            camera.outputs = [str(p) for p in sinks.open_source(i, name, fps)]
        pipeline.hooks.on_degrade = self._degraded

    # -- the API's side ----------------------------------------------------------------------
    def add(
        self,
        name: Any,
        uri: Any,
        tasks: Sequence[str] = ("detect",),
        analytics: Mapping[str, Any] | None = None,
    ) -> Camera:
        """Open and start a camera (in place of one of that name that ended); ConfigError (a
        bad request, a name that runs or is reconnecting) or SourceError (it cannot be opened)
        change nothing.
        `name` and `uri` are taken as a request gave them (strings, or not): checked here."""
        check_name(name)
        tasks = check_tasks(tasks)
        if "depth" in tasks and len(self.pipeline.tasks) < 2:  # the detector alone
            raise ConfigError(NO_DEPTH)
        check_uri(uri, self.files)
        if name in self._waiting:
            raise NameInUse(f"a source named '{name}' is reconnecting: remove it first")
        camera = Camera(name, uri, tasks, -1, analytics)
        self._open(camera)
        with self._lock:
            ended = self.cameras.get(name)
            self.cameras[name] = camera
        if ended is not None:  # replaced: its files are finalized as a removed camera's
            self._keep(ended)
            self._retire(ended)
        self._publish(name, "added", {"uri": uri, "tasks": list(tasks)})
        if self.on_change is not None:
            self.on_change()
        return camera

    def _roster(self) -> Roster:
        if self.pipeline.roster is None:
            raise ConfigError("sources are added to a Pipeline made with service=True")
        return self.pipeline.roster

    def _open(self, camera: Camera) -> None:
        """Open `camera`'s source and start it, its files open before its first frame (raises
        as `Roster.add`, changing nothing); its `source_id` and `outputs` set."""
        outputs: list[str] = []

        def opened(source: Source) -> None:
            paths = self.sinks.open_source(source.source_id, camera.name, source.fps)
            outputs.extend(str(p) for p in paths)

        depth = "depth" in camera.tasks
        source = self._roster().add(camera.name, camera.uri, depth, camera.analytics, opened)
        # Counts are kept by name: a camera added again under it starts from where they are.
        camera.seen_out = self.telemetry.per_source().get(camera.name, {}).get("frames_out", 0)
        camera.seen_at = time.monotonic()
        camera.source_id, camera.outputs = source.source_id, outputs

    def retry(self, down: Unreachable) -> Camera:
        """Keep a camera that could not be opened at start-up: listed as down (`error` says it
        is unreachable) and opened again as a stream that drops reconnects (the source
        options' backoff and attempts) once the service runs; ended when they run out."""
        camera = Camera(down.name, down.uri, down.tasks, -1, down.analytics, state="down")
        camera.error = f"unreachable: {down.error}"
        cancel = threading.Event()
        with self._lock:
            self.cameras[camera.name] = camera
            self._waiting[camera.name] = cancel
            running = self._running
        self._publish(camera.name, "down", {"error": camera.error})
        if running:
            self._start_reconnecting(camera, cancel)
        return camera

    def _start_reconnecting(self, camera: Camera, cancel: threading.Event) -> None:
        name = f"serve-reconnect-{camera.name}"
        threading.Thread(
            target=self._reconnect, args=(camera, cancel), name=name, daemon=True
        ).start()

    def _reconnect(self, camera: Camera, cancel: threading.Event) -> None:
        """Open `camera` after each backoff until it opens, `cancel` is set, or the attempts
        run out (as `VideoSource` reconnects a stream that dropped)."""
        options = self.pipeline.roster.options if self.pipeline.roster else SourceOptions()
        attempt = 0
        while attempt < options.reconnect_attempts:
            delay = options.reconnect_backoff * 2**attempt
            if cancel.wait(min(delay, options.reconnect_max_backoff)):
                return
            try:
                self._open(camera)
            except Stopping:  # not running yet, or stopping (then `cancel` comes): no attempt
                continue
            except SourceError as err:
                attempt += 1
                camera.error = f"unreachable: {err}"  # before the count that says it is new
                camera.reconnects = attempt
                continue
            except VisionRTError as err:  # it can never be added (a tiled service)
                self._end(camera, "failed", str(err))
                return
            with self._lock:
                removed = cancel.is_set()  # while it opened
                self._waiting.pop(camera.name, None)
                camera.error = ""
            if removed:
                self._roster().remove(camera.name)
                self._retire(camera)
            elif self.on_change is not None:
                self.on_change()
            return
        gave_up = f"{camera.name}: gave up after {attempt} reconnects ({camera.error})"
        self._end(camera, "ended", gave_up)

    def _end(self, camera: Camera, state: str, error: str) -> None:
        with self._lock:
            if self._waiting.pop(camera.name, None) is None:  # removed meanwhile
                return
            camera.state, camera.error = state, error
        self._publish(camera.name, "ended", {"error": error})

    def remove(self, name: str) -> Camera:
        """Stop a camera (KeyError: no such camera); the frames it read are still delivered."""
        with self._lock:
            camera = self.cameras.pop(name)
            cancel = self._waiting.pop(name, None)
            if cancel is not None:  # not opened: its reconnecting stops
                cancel.set()
        if cancel is None and camera.source_id >= 0:  # (never opened: its attempts ran out)
            self._roster().remove(name)
            self._retire(camera)
        camera.state = "removed"
        self._keep(camera)
        self.preview.remove(name)
        self._publish(name, "removed", {"uri": camera.uri, "tasks": list(camera.tasks)})
        if self.on_change is not None:
            self.on_change()
        return camera

    def _keep(self, camera: Camera) -> None:
        """A camera removed or replaced: its row as it is now, for `describe(gone=True)`."""
        row = self._row(camera)
        with self._lock:
            self._gone.append(row)

    def _retire(self, camera: Camera) -> None:
        """The camera's own files close once its last frames are written."""
        graph = self.pipeline.graph
        if graph is not None and camera.source_id >= 0:
            self.sinks.retire_source(camera.source_id, graph.readers[camera.source_id])

    def restart(self, name: str, wait: float = 10.0) -> Camera:
        """Remove the camera and add it again from its URI, with its zones and lines (a stream
        that went bad)."""
        with self._lock:
            camera = self.cameras[name]
        self.remove(name)
        graph = self.pipeline.graph
        if graph is not None and camera.source_id >= 0:  # its reader lets go of the device
            graph.readers[camera.source_id].join(wait)
        return self.add(name, camera.uri, camera.tasks, camera.analytics)

    def describe(self, gone: bool = False) -> list[dict[str, Any]]:
        """Each camera's state, FPS, latency, frames, drops and reconnects; with `gone`, also
        the cameras removed or replaced by one of their name, each as it was then (state
        removed, or the ended or failed of one replaced), all in the order they were added."""
        with self._lock:
            cameras = list(self.cameras.values())
            earlier = list(self._gone) if gone else []
        rows = [*earlier, *(self._row(camera) for camera in cameras)]
        return sorted(rows, key=lambda row: float(row["added"])) if gone else rows

    def _row(self, camera: Camera) -> dict[str, Any]:
        mine = self.telemetry.per_source().get(camera.name, {})
        opened = camera.source_id >= 0
        reconnects = camera.reconnects
        if opened:
            reconnects += self.pipeline.sources[camera.source_id].stats.reconnects
        return {
            "name": camera.name,
            "uri": camera.uri,
            "tasks": list(camera.tasks),
            "state": camera.state,
            "error": camera.error,
            "fps": round(camera.fps, 2),
            "latency_ms": mine.get("latency_ms", {}),
            "frames_in": mine.get("frames_in", 0),
            "frames_out": mine.get("frames_out", 0),
            "drops": sum(mine.get("dropped", {}).values()),
            "reconnects": reconnects,
            "added": camera.added,
            "outputs": camera.outputs,
        }

    def events(self, limit: int = 50) -> list[dict[str, Any]]:
        """The last `limit` events, oldest first."""
        with self._lock:
            return list(self._events)[-limit:] if limit > 0 else []

    # -- running -------------------------------------------------------------------------
    def run(self) -> RunSummary:
        """Run until `stop()`; the outputs are finalized however it ends."""
        watcher = threading.Thread(target=self._watch, name="serve-watch", daemon=True)
        watcher.start()
        with self._lock:
            self._running = True
            waiting = [(self.cameras[name], cancel) for name, cancel in self._waiting.items()]
        for camera, cancel in waiting:
            self._start_reconnecting(camera, cancel)
        try:
            return self.pipeline.run([self.sinks], on_result=self._on_result)
        finally:
            self._stopped.set()
            with self._lock:
                for cancel in self._waiting.values():
                    cancel.set()
            watcher.join(5.0)

    def stop(self) -> None:
        self.pipeline.stop()

    def _on_result(self, result: FrameResult) -> None:
        """On the sink thread: the preview takes a frame now and then; events go out."""
        self.preview.offer(result)
        frame = result.frame
        for event in result.events:
            self._emit(
                make_event(
                    frame.source_name,
                    event.kind,
                    event.action,
                    name=event.name,
                    frame=frame.index,
                    timestamp=round(frame.timestamp, 6),
                    track_id=event.track_id,
                    class_name=event.class_name,
                )
            )

    def _watch(self, period: float = 1.0) -> None:
        """Each camera's FPS and state, once a `period`: down when no frame came for
        `down_after` seconds, up again when frames come; ended or failed when its reader ended
        on its own. The files of cameras removed or ended are finalized here, whether or not
        another camera's frames come."""
        last = time.monotonic()
        while not self._stopped.wait(period):
            now = time.monotonic()
            counts = self.telemetry.per_source()
            with self._lock:
                cameras = list(self.cameras.values())
            for camera in cameras:
                self._look(camera, counts.get(camera.name, {}).get("frames_out", 0), now - last)
            self.sinks.settle()
            last = now

    def _look(self, camera: Camera, frames_out: int, seconds: float) -> None:
        if camera.source_id < 0:  # not opened yet: its reconnecting says how it goes
            return
        now = time.monotonic()
        new = frames_out - camera.seen_out
        camera.seen_out = frames_out
        camera.fps = new / seconds if seconds > 0 else 0.0
        graph = self.pipeline.graph
        reader = graph.readers[camera.source_id] if graph is not None else None
        if new > 0:
            camera.seen_at = now
            if camera.state == "down":
                self._publish(camera.name, "up", {})
            if camera.state in ("starting", "down"):
                camera.state = "running"
        elif reader is not None and not reader.is_alive() and camera.state not in ENDED:
            failure = graph.source_side.failures.get(camera.source_id) if graph else None
            ended = self.pipeline.sources[camera.source_id].stats.ended_early
            camera.error = failure or ended or ""
            camera.state = "failed" if failure else "ended"
            self._retire(camera)
            self._publish(camera.name, "ended", {"error": camera.error} if camera.error else {})
        elif camera.state == "running" and now - camera.seen_at > self.down_after:
            camera.state = "down"
            self._publish(camera.name, "down", {"seconds_without_frames": self.down_after})

    def _degraded(self, change: Change) -> None:
        action = "step down" if change.level_to > change.level_from else "step up"
        detail = {"reason": change.reason, "level": change.level_to, "rung": change.label}
        self._emit(make_event(ALL_SOURCES, "slo", action, detail=detail))

    def _publish(self, source: str, action: str, detail: dict[str, Any]) -> None:
        self.telemetry.count(f"source: {action}", source)
        self._emit(make_event(source, "source", action, detail=detail))

    def _emit(self, event: dict[str, Any]) -> None:
        with self._lock:
            self._events.append(event)
        if self.publisher is not None:
            self.publisher.publish(event)


ENDED = ("ended", "failed", "removed")


def as_request(analytics: SourceAnalytics | None) -> dict[str, Any] | None:
    """A source's zones and lines as a request gives them (None: it has none)."""
    if analytics is None or not (analytics.zones or analytics.lines):
        return None
    return {
        "zones": {zone.name: zone.polygon.tolist() for zone in analytics.zones},
        "lines": {line.name: [list(line.a), list(line.b)] for line in analytics.lines},
    }
