"""A long-running service: the pipeline over cameras added and removed while it runs, each
camera's state watched (running, down, ended), its frames into files, live previews and events."""

from __future__ import annotations

import glob
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from visionrt.errors import ConfigError
from visionrt.pipeline import Pipeline
from visionrt.pipeline.degrade import Change
from visionrt.serve.outputs import ServiceSinks
from visionrt.serve.preview import PreviewHub
from visionrt.sinks.events import EventPublisher, make_event
from visionrt.sources import Source
from visionrt.sources.base import IMAGE_SUFFIXES
from visionrt.sources.naming import default_name, misnamed, split_name, unique_names
from visionrt.telemetry.stats import RunSummary
from visionrt.types import FrameResult

NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,63}")
TASKS = ("detect", "depth")
ALL_SOURCES = "*"  # the `source` of an event about every source (the latency ladder's steps)
# `visionrt serve` has no --depth: its depth model is the config's.
NO_DEPTH = (
    "tasks: depth needs a depth model, and this service runs none: start it with one:"
    " --set depth.model=MODEL, or depth: {model: MODEL} in its --config"
)


@dataclass
class Camera:
    """One source of the service as the API shows it. `state`: starting (no frame yet),
    running, down (no frame for `down_after` seconds), ended (a file's end), failed (its
    reader raised: `error`), removed."""

    name: str
    uri: str
    tasks: tuple[str, ...]
    source_id: int
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
    files from (no other path is read). Call `run()` on one thread (it returns the summary when
    `stop()` is called); `add`, `remove`, `restart`, `cameras`, `events` from any other."""

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
        self.cameras: dict[str, Camera] = {}
        # Told after a camera was added or removed (the metrics' per-source readers).
        self.on_change: Callable[[], None] | None = None
        depth_on = set(pipeline.depth_sources())
        for i, name in enumerate(pipeline.names):
            tasks = ("detect", "depth") if i in depth_on else ("detect",)
            uri = uris[i] if i < len(uris) else pipeline.sources[i].name
            camera = self.cameras[name] = Camera(name, uri, tasks, i)
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
        bad request, a name that runs) or SourceError (it cannot be opened) change nothing.
        `name` and `uri` are taken as a request gave them (strings, or not): checked here."""
        check_name(name)
        tasks = check_tasks(tasks)
        if "depth" in tasks and len(self.pipeline.tasks) < 2:  # the detector alone
            raise ConfigError(NO_DEPTH)
        check_uri(uri, self.files)
        outputs: list[str] = []

        def opened(source: Source) -> None:  # its files exist before its first frame
            paths = self.sinks.open_source(source.source_id, name, source.fps)
            outputs.extend(str(p) for p in paths)

        source = self.pipeline.add_source(name, uri, "depth" in tasks, analytics, opened)
        camera = Camera(name, uri, tasks, source.source_id, outputs=outputs)
        # Counts are kept by name: a camera added again under it starts from where they are.
        camera.seen_out = self.telemetry.per_source().get(name, {}).get("frames_out", 0)
        with self._lock:
            ended = self.cameras.get(name)
            self.cameras[name] = camera
        if ended is not None:  # replaced: its files are finalized as a removed camera's
            self._retire(ended)
        self._publish(name, "added", {"uri": uri, "tasks": list(tasks)})
        if self.on_change is not None:
            self.on_change()
        return camera

    def remove(self, name: str) -> Camera:
        """Stop a camera (KeyError: no such camera); the frames it read are still delivered."""
        with self._lock:
            camera = self.cameras.pop(name)
        self.pipeline.remove_source(name)
        self._retire(camera)
        camera.state = "removed"
        self.preview.remove(name)
        self._publish(name, "removed", {"uri": camera.uri, "tasks": list(camera.tasks)})
        if self.on_change is not None:
            self.on_change()
        return camera

    def _retire(self, camera: Camera) -> None:
        """The camera's own files close once its last frames are written."""
        graph = self.pipeline.graph
        if graph is not None:
            self.sinks.retire_source(camera.source_id, graph.readers[camera.source_id])

    def restart(self, name: str, wait: float = 10.0) -> Camera:
        """Remove the camera and add it again from its URI (a stream that went bad)."""
        with self._lock:
            camera = self.cameras[name]
        self.remove(name)
        graph = self.pipeline.graph
        if graph is not None:  # its reader lets go of the device or connection first
            graph.readers[camera.source_id].join(wait)
        return self.add(name, camera.uri, camera.tasks)

    def describe(self) -> list[dict[str, Any]]:
        """Each camera's state, FPS, latency, frames, drops and reconnects."""
        counts = self.telemetry.per_source()
        with self._lock:
            cameras = list(self.cameras.values())
        rows = []
        for camera in cameras:
            mine = counts.get(camera.name, {})
            stats = self.pipeline.sources[camera.source_id].stats
            rows.append(
                {
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
                    "reconnects": stats.reconnects,
                    "added": camera.added,
                    "outputs": camera.outputs,
                }
            )
        return rows

    def events(self, limit: int = 50) -> list[dict[str, Any]]:
        """The last `limit` events, oldest first."""
        with self._lock:
            return list(self._events)[-limit:] if limit > 0 else []

    # -- running -------------------------------------------------------------------------
    def run(self) -> RunSummary:
        """Run until `stop()`; the outputs are finalized however it ends."""
        watcher = threading.Thread(target=self._watch, name="serve-watch", daemon=True)
        watcher.start()
        try:
            return self.pipeline.run([self.sinks], on_result=self._on_result)
        finally:
            self._stopped.set()
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
STREAMS = ("rtsp://", "rtsps://", "rtmp://", "http://", "https://", "srt://", "udp://", "tcp://")


def check_name(name: Any) -> None:
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise ConfigError(
            f"name: expected a letter or _ then up to 63 letters, digits, _ or -, got {name!r}"
        )


def camera_names(specs: Sequence[str]) -> list[tuple[str, str]]:
    """(name, URI) of each source `serve` starts with: the name given (`cam1=URI`), or the one
    `run` gives it (its file stem, made unique) with what a camera's name cannot hold replaced
    by _ (`synthetic:64x48:100` → `synthetic_64x48_100`). A NAME= that is not a name is a
    ConfigError naming it (a path of that name does not exist)."""
    split = [split_name(spec) for spec in specs]
    for spec in specs:
        if bad := misnamed(spec):
            raise ConfigError(
                f"source '{spec}': '{bad}' is not a name (NAME=URI: a letter or _, then up to"
                " 63 letters, digits, _ or -), and no file of that path exists"
            )
    stems = [name or _as_name(default_name(uri, i)) for i, (name, uri) in enumerate(split)]
    names = unique_names(stems, [bool(name) for name, _ in split])
    for name, spec in zip(names, specs, strict=True):
        try:
            check_name(name)
        except ConfigError as err:
            raise ConfigError(f"source '{spec}': {err}") from None
    return [(name, uri) for name, (_, uri) in zip(names, split, strict=True)]


def _as_name(stem: str) -> str:
    """A default name as a camera's: room left for a `-N` that makes it unique."""
    name = re.sub(r"[^A-Za-z0-9_-]", "_", stem)[:58]
    return name if NAME.fullmatch(name) else f"_{name}"[:58]


def check_tasks(tasks: Any) -> tuple[str, ...]:
    if isinstance(tasks, str) or not isinstance(tasks, Sequence) or "detect" not in tasks:
        raise ConfigError(f"tasks: expected a list holding detect (and depth), got {tasks!r}")
    unknown = [t for t in tasks if t not in TASKS]
    if unknown:
        raise ConfigError(f"tasks: unknown task {unknown[0]!r}: expected detect, depth")
    return tuple(dict.fromkeys(tasks))


def check_uri(uri: Any, files: Sequence[str]) -> None:
    """A URI the API may open: a stream URL, a camera (/dev/videoN), `synthetic:…`, or a video
    file, image, image folder or glob inside one of `files`. Every path it reaches is judged
    once links are resolved (`opened_paths`), so neither `..` nor a link leaves them."""
    if not isinstance(uri, str) or not uri or len(uri) > 2048 or "\n" in uri or "\0" in uri:
        raise ConfigError("uri: expected a stream URL, a camera or a file path")
    lowered = uri.lower()
    if lowered.startswith(STREAMS) or lowered.startswith("synthetic:"):
        return
    if re.fullmatch(r"/dev/video\d+", uri):
        return
    allowed = [Path(folder).resolve() for folder in files]
    for path in opened_paths(uri):
        resolved = path.resolve()
        if not any(resolved.is_relative_to(folder) for folder in allowed):
            where = ", ".join(str(f) for f in allowed) or "none: set serve.files"
            reaches = "" if str(path) == uri else f": it reaches {str(path)!r}"
            raise ConfigError(
                "uri: files are opened only from the folders in serve.files"
                f" ({where}), got {uri!r}{reaches}"
            )


def opened_paths(uri: str) -> list[Path]:
    """The paths a source of `uri` may read, links not yet resolved: `uri` itself, every
    path a glob matches (as `ImageSource` matches it), and every image file a folder lists
    (each may be a link of its own)."""
    path = Path(uri)
    paths = [path]
    if any(c in uri for c in "*?["):
        paths += [Path(p) for p in sorted(glob.glob(uri))]
    if path.is_dir():
        paths += sorted(p for p in path.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
    return paths
