"""Collects stage timings and frame counts from the pipeline's threads and summarizes them."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import psutil

from visionrt.telemetry import gpu
from visionrt.telemetry.gpu import GpuMonitor
from visionrt.telemetry.samples import MAX_SAMPLES as MAX_SAMPLES
from visionrt.telemetry.samples import Samples as Samples
from visionrt.telemetry.samples import percentiles as percentiles

STAGES = ("decode", "preprocess", "infer", "postprocess", "sink")


@dataclass(slots=True)
class RunSummary:
    """What a run did: counts, rates, per-stage latency (ms), and anything that went wrong."""

    frames_in: int
    frames_out: int
    dropped: dict[str, int]
    seconds: float
    fps: float
    stages: dict[str, dict[str, float]]
    latency: dict[str, float]
    cpu_percent: float
    rss_mb: float
    backend: dict[str, Any] = field(default_factory=dict)
    # Named events that are neither frames nor drops ("depth: non-finite recomputed",
    # "slo: step down"), counted over the run.
    events: dict[str, int] = field(default_factory=dict)
    sources: list[dict[str, Any]] = field(default_factory=list)
    # The SLO degrade path, when one ran: target, ladder, final level, every step with its reason.
    slo: dict[str, Any] = field(default_factory=dict)
    # The live accuracy audit, when one ran: rate, reference, budget, per source the frames
    # sampled, audited and skipped and the fidelity found, and the events.
    audit: dict[str, Any] = field(default_factory=dict)
    # Motion gating, when on: its settings, and the frames that reused their source's last
    # results (count and share of the frames out).
    motion: dict[str, Any] = field(default_factory=dict)
    # Zones and lines, when they ran: per source name its last frame's analytics (line in/out
    # totals, objects per class inside each zone at the end; see fuse.analytics).
    analytics: dict[str, dict[str, Any]] = field(default_factory=dict)
    # `visionrt serve`: its cameras at the end, and per event target what was published, sent,
    # dropped and retried.
    service: dict[str, Any] = field(default_factory=dict)
    # `run --ray`: workers, attempts, reassignments, frames per worker and per source.
    cluster: dict[str, Any] = field(default_factory=dict)
    # NVIDIA GPUs over the run (telemetry.gpu), where NVML sees any: per GPU its busy share,
    # clocks, memory, power and throttle reasons, and whether the GPU or the host was the limit.
    gpu: dict[str, Any] = field(default_factory=dict)
    # What the run says about its configuration: the plan it used or set aside and why, the
    # parts of a flag it could not honour with that plan.
    notes: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    interrupted: bool = False
    error: str = ""

    @property
    def accounted(self) -> bool:
        """Every frame that came in either came out or was counted as dropped."""
        return self.frames_in == self.frames_out + sum(self.dropped.values())

    def to_json(self) -> dict[str, Any]:
        data = {name: getattr(self, name) for name in self.__slots__}
        data["accounted"] = self.accounted
        return data


@dataclass(slots=True)
class _SourceCounts:
    frames_in: int = 0
    frames_out: int = 0
    dropped: Counter[str] = field(default_factory=Counter)
    events: Counter[str] = field(default_factory=Counter)
    latency: Samples = field(default_factory=Samples)
    window: Samples = field(default_factory=Samples)
    first_in: float = 0.0  # perf_counter of its first frame in (0: none yet)
    last_out: float = 0.0  # and of its last result


class Listener(Protocol):
    """Told of each measurement as it happens (a Prometheus exporter keeps its own counters)."""

    def frame_in(self, source: str) -> None: ...
    def frame_out(self, latency: float, source: str) -> None: ...
    def drop(self, stage: str, reason: str, source: str, count: int) -> None: ...
    def count(self, event: str, source: str, count: int) -> None: ...
    def record(self, stage: str, seconds: float) -> None: ...
    def analytics(self, source: str, analytics: dict[str, Any]) -> None: ...


class Telemetry:
    """Thread-safe sink for the pipeline's measurements."""

    def __init__(self) -> None:
        self.samples: dict[str, Samples] = {s: Samples() for s in STAGES}
        self.latency = Samples()
        # Latencies since the last snapshot; bounded, since without --telemetry none is taken.
        self._window = Samples()
        self._gauges: dict[str, Callable[[], float]] = {}
        self._figures: Callable[[], dict[str, dict[str, Any]]] = dict
        self.frames_in = 0
        self.frames_out = 0
        self.dropped: Counter[str] = Counter()
        self.events: Counter[str] = Counter()
        self._per_source: dict[str, _SourceCounts] = {}
        self._analytics: dict[str, dict[str, Any]] = {}
        self._listeners: tuple[Listener, ...] = ()
        self._lock = threading.Lock()
        self._process = psutil.Process()
        self._gpu: GpuMonitor | None = None
        self.started = 0.0
        self.finished = 0.0
        self._cpu_start = 0.0

    def add_listener(self, listener: Listener) -> None:
        """Tell `listener` of every measurement from now on (before the run starts)."""
        self._listeners = (*self._listeners, listener)

    def start(self) -> None:
        self.started = time.perf_counter()
        self._cpu_start = sum(self._process.cpu_times()[:2])
        nvml = gpu.open_nvml()
        if nvml is not None:
            self._gpu = gpu.GpuMonitor(nvml)
            self._gpu.sample()  # a reading from the start, however short the run
            self._gpu.start()

    def stop(self) -> None:
        self.finished = time.perf_counter()
        if self._gpu is not None:
            self._gpu.stop()
            self._gpu.sample()

    def record(self, stage: str, seconds: float) -> None:
        """Add a sample; a stage not in STAGES gets its own series on first use."""
        samples = self.samples.get(stage)
        if samples is None:
            with self._lock:
                samples = self.samples.setdefault(stage, Samples())
        samples.append(seconds)
        for listener in self._listeners:
            listener.record(stage, seconds)

    def register_gauge(self, name: str, read: Callable[[], float]) -> None:
        """A value read at each snapshot (e.g. a queue's depth), under "queues"; registering a
        name again replaces its reader. Called from any thread, also while snapshots are taken."""
        with self._lock:
            self._gauges = {**self._gauges, name: read}

    def add_figures(self, read: Callable[[], dict[str, dict[str, Any]]]) -> None:
        """Figures per source name read at each snapshot (the audit's window fidelity), added
        to that source's entry under "sources"."""
        self._figures = read

    def frame_in(self, source: str = "") -> None:
        with self._lock:
            self.frames_in += 1
            counts = self._source(source)
            counts.frames_in += 1
            if not counts.first_in:
                counts.first_in = time.perf_counter()
        for listener in self._listeners:
            listener.frame_in(source)

    def frame_out(self, latency: float, source: str = "") -> None:
        self.latency.append(latency)
        with self._lock:
            self.frames_out += 1
            self._window.append(latency)
            counts = self._source(source)
            counts.frames_out += 1
            counts.latency.append(latency)
            counts.window.append(latency)
            counts.last_out = time.perf_counter()
        for listener in self._listeners:
            listener.frame_out(latency, source)

    def drop(self, stage: str, reason: str, source: str = "", count: int = 1) -> None:
        with self._lock:
            self.dropped[f"{stage}: {reason}"] += count
            self._source(source).dropped[f"{stage}: {reason}"] += count
        for listener in self._listeners:
            listener.drop(stage, reason, source, count)

    def settle(self, stage: str, reason: str) -> int:
        """A run cut short (its caller stopped taking results, it failed, it was aborted): each
        source's frames that came in and neither came out nor were dropped, counted as dropped
        at `stage` for `reason`, so the run still accounts for every frame. Returns how many."""
        with self._lock:
            pending = {
                name: counts.frames_in - counts.frames_out - sum(counts.dropped.values())
                for name, counts in self._per_source.items()
            }
        for name, missing in pending.items():
            if missing > 0:
                self.drop(stage, reason, name, missing)
        return sum(missing for missing in pending.values() if missing > 0)

    def count(self, event: str, source: str = "", count: int = 1) -> None:
        """Count a named event that is neither a frame nor a drop (a recomputed depth map, a
        degrade step), overall and for `source`."""
        with self._lock:
            self.events[event] += count
            self._source(source).events[event] += count
        for listener in self._listeners:
            listener.count(event, source, count)

    def set_analytics(self, source: str, analytics: dict[str, Any]) -> None:
        """Keep `source`'s latest zone and line figures (a frame's `analytics`, which nothing
        changes once handed over: the fuser builds new dicts each frame). Called per frame, so
        it only stores the reference; an empty one (a frame without tracks) keeps the last."""
        if not analytics:
            return
        with self._lock:
            self._analytics[source] = analytics
        for listener in self._listeners:
            listener.analytics(source, analytics)

    def analytics(self) -> dict[str, dict[str, Any]]:
        """The latest zone and line figures per source name (none without zones or lines)."""
        with self._lock:
            return dict(self._analytics)

    def _source(self, name: str) -> _SourceCounts:
        counts = self._per_source.get(name)
        if counts is None:
            counts = self._per_source[name] = _SourceCounts()
        return counts

    def per_source(self) -> dict[str, dict[str, Any]]:
        """Frames in/out, drops by reason, FPS and glass-to-result latency (ms) per source name
        (sources the caller did not name share ""). A source's FPS is its results over its own
        `seconds`: from its first frame in to its last result once the run has finished (until
        now while it runs). Over the run's seconds, a camera that finished early (one without
        depth beside one with it) showed the slow camera's pace, whatever its own."""
        finished = self.finished
        with self._lock:
            counts = {
                name: (
                    c.frames_in,
                    c.frames_out,
                    dict(c.dropped),
                    dict(c.events),
                    c.latency.values(),
                    _span(c.first_in, c.last_out if finished else time.perf_counter()),
                )
                for name, c in self._per_source.items()
            }
        return {
            name: {
                "frames_in": frames_in,
                "frames_out": frames_out,
                "dropped": dropped,
                "events": events,
                "seconds": round(seconds, 3),
                "fps": round(frames_out / seconds, 3) if seconds > 0 else 0.0,
                "latency_ms": {k: round(v, 3) for k, v in percentiles(latency).items()},
            }
            for name, (frames_in, frames_out, dropped, events, latency, seconds) in counts.items()
        }

    def elapsed(self) -> float:
        """Seconds since `start()` (until `stop()`); 0 before the run started."""
        if not self.started:
            return 0.0
        return (self.finished or time.perf_counter()) - self.started

    def snapshot(self) -> dict[str, Any]:
        """Counters now, for the per-second telemetry file and the progress bar."""
        memory = self._process.memory_info().rss / 2**20
        with self._lock:
            window = self._window.take()
            frames_in, frames_out = self.frames_in, self.frames_out
            dropped = sum(self.dropped.values())
            events = dict(self.events)
            gauges = self._gauges
            sources = {}
            for name, counts in self._per_source.items():
                recent = counts.window.take()
                sources[name] = {
                    "frames_in": counts.frames_in,
                    "frames_out": counts.frames_out,
                    "dropped": sum(counts.dropped.values()),
                    "latency_ms": _rounded(percentiles(recent)),
                }
        latency = percentiles(window)  # glass to result, over the frames since the last one
        for name, values in _read(self._figures, {}).items():
            sources.setdefault(name, {}).update(values)
        return {
            "t": round(self.elapsed(), 3),
            "frames_in": frames_in,
            "frames_out": frames_out,
            "dropped": dropped,
            "events": events,  # counted over the run, as in the summary and Prometheus
            "latency_ms": _rounded(latency),
            "sources": sources,
            "queues": {name: _read(gauge) for name, gauge in gauges.items()},
            "cpu_percent": self._process.cpu_percent(),
            "rss_mb": round(memory, 1),
            **({"gpu": self._gpu.latest()} if self._gpu is not None else {}),
        }

    def summary(self) -> RunSummary:
        seconds = self.elapsed()
        cpu = sum(self._process.cpu_times()[:2]) - self._cpu_start
        with self._lock:  # a drop reason seen for the first time would change the dict
            dropped, events = dict(self.dropped), dict(self.events)
        return RunSummary(
            frames_in=self.frames_in,
            frames_out=self.frames_out,
            dropped=dropped,
            seconds=seconds,
            fps=self.frames_out / seconds if seconds > 0 else 0.0,
            stages={s: percentiles(v) for s, v in list(self.samples.items())},
            latency=percentiles(self.latency),
            cpu_percent=100.0 * cpu / seconds if seconds > 0 else 0.0,
            rss_mb=self._process.memory_info().rss / 2**20,
            events=events,
            analytics=self.analytics(),
            gpu=self._gpu.summary() if self._gpu is not None else {},
        )


def _span(first: float, last: float) -> float:
    """Seconds from `first` to `last` (0 when nothing came in, or nothing came out yet)."""
    return max(0.0, last - first) if first else 0.0


def _rounded(latency: dict[str, float]) -> dict[str, float]:
    return {k: round(latency[k], 2) for k in ("p50", "p95", "p99")}


def _read(gauge: Callable[[], Any], failed: Any = None) -> Any:
    """A gauge's value; `failed` when reading it failed (telemetry must not end the run)."""
    try:
        return gauge()
    except Exception:
        return failed
