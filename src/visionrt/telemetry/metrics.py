"""Serves a run's telemetry as Prometheus metrics over HTTP (prometheus-client), on localhost by
default: frames in/out, drops by stage and reason, events, reconnects and restarts per source,
stage and glass-to-result latency histograms, queue depths, the live audit's fidelity per source,
objects in zones and line crossings, CPU/RSS, and NVIDIA GPU use where nvidia-ml-py finds a
GPU."""

from __future__ import annotations

import hmac
import socket
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from visionrt.errors import ConfigError, SinkError
from visionrt.telemetry.gpu import open_nvml, prometheus_families, read_gpus

# The live audit's window figures per source, as gauges: key in `figures()` → (name, help).
FIGURES = {
    "fidelity": ("visionrt_fidelity", "Audit: mAP50 against the FP32 reference, last window"),
    "fidelity_frames": ("visionrt_fidelity_frames", "Audit: audited frames in that window"),
    "depth_abs_rel": ("visionrt_depth_abs_rel", "Audit: depth AbsRel against FP32, window"),
    "depth_delta1": ("visionrt_depth_delta1", "Audit: depth δ<1.25 against FP32, window"),
}
# Hosts that keep an endpoint on this machine; any other needs a token.
LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")
# Glass-to-result and stage latencies on CPU run from ~1 ms (decode) to seconds (depth at 518).
BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class MetricsServer:
    """Prometheus metrics of one run at http://HOST:PORT/metrics.

    Counters and histograms are fed as the pipeline measures (it is a telemetry listener);
    queue depths, source reconnects/restarts, process CPU/RSS and GPU figures are read at each
    scrape, and so are the latest zone and line figures per source the listener was given.
    `port` 0 picks a free port (see `port` after `start`). `sources` gives the
    per-source readers: name → callable returning the source's stats (reconnects, restarts,
    missed), `gauges` name → queue depth reader, `info` labels for visionrt_build_info.
    Beyond this machine (`host` not in LOCAL_HOSTS) only with a `token`, which each scrape
    then sends (`Authorization: Bearer TOKEN`, Prometheus' `authorization` setting)."""

    def __init__(
        self,
        port: int,
        host: str = "127.0.0.1",
        info: dict[str, str] | None = None,
        token: str = "",
    ) -> None:
        try:
            import prometheus_client as prom
        except ImportError as err:  # a core dependency; a broken install says so
            raise ConfigError(
                "--metrics-port needs prometheus-client: pip install prometheus-client"
            ) from err
        if not 0 <= port <= 65535:
            raise ConfigError(f"--metrics-port: expected 0 to 65535, got {port}")
        check_host(host, token)
        self._prom, self.token = prom, token
        prom.disable_created_metrics()  # `_created` series only double the scrape for us
        self.host, self.port = host, port
        self.registry = prom.CollectorRegistry()
        make = self._metric
        self.frames_in = make(prom.Counter, "frames_in", "Frames read from the source", "source")
        self.frames_out = make(prom.Counter, "frames_out", "Frames with a result", "source")
        self.dropped = make(
            prom.Counter,
            "frames_dropped",
            "Frames dropped, by stage and reason",
            "source",
            "stage",
            "reason",
        )
        self.events = make(
            prom.Counter, "events",
            "Counted events (reconnects, worker restarts, recomputed depth, degrade steps, audit)",
            "source", "event",
        )  # fmt: skip
        self.latency = make(
            prom.Histogram,
            "latency_seconds",
            "Glass-to-result latency: capture to result",
            "source",
            buckets=BUCKETS,
        )
        self.stage = make(
            prom.Histogram, "stage_seconds", "Time per frame in each stage", "stage",
            buckets=BUCKETS,
        )  # fmt: skip
        prom.Info("visionrt_build", "What runs", registry=self.registry).info(info or {})
        prom.ProcessCollector(namespace="visionrt", registry=self.registry)
        self._sources: dict[str, Callable[[], Any]] = {}
        self._gauges: Callable[[], dict[str, float | None]] = dict
        self._figures: Callable[[], dict[str, dict[str, float]]] = dict
        self._analytics: dict[str, dict[str, Any]] = {}  # latest per source, for the scrape
        self.registry.register(_ScrapeCollector(self))
        self._server: Any = None
        self._thread: Any = None

    def _metric(self, kind: Any, name: str, doc: str, *labels: str, **extra: Any) -> Any:
        return kind(f"visionrt_{name}", doc, labels, registry=self.registry, **extra)

    def watch(
        self,
        sources: dict[str, Callable[[], Any]],
        gauges: Callable[[], dict[str, float | None]],
        figures: Callable[[], dict[str, dict[str, float]]] | None = None,
    ) -> None:
        """Readers used at scrape time: each source's stats by name, the queue depths, and the
        audit's figures per source (FIGURES)."""
        self._sources, self._gauges = dict(sources), gauges
        self._figures = figures or dict

    def follow(self, pipeline: Any) -> None:
        """Point the scrape-time readers at `pipeline` (a Pipeline): each source's stats, the
        queue depths and the audit's figures — again after a service's sources change, or
        for a cluster worker's next group."""
        named = zip(pipeline.names, pipeline.sources, strict=True)
        figures = pipeline.auditor.figures if pipeline.auditor is not None else None
        self.watch({name: _stats_reader(s) for name, s in named}, pipeline.queue_depths, figures)

    def start(self) -> MetricsServer:
        """Listen now (a SinkError when the port is taken or not allowed)."""
        self._server, self._thread = serve_registry(self.registry, self.host, self.port, self.token)
        self.port = int(self._server.server_port)
        return self

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/metrics"

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    # -- telemetry listener ------------------------------------------------------------------
    def frame_in(self, source: str) -> None:
        self.frames_in.labels(source).inc()

    def frame_out(self, latency: float, source: str) -> None:
        self.frames_out.labels(source).inc()
        self.latency.labels(source).observe(latency)

    def drop(self, stage: str, reason: str, source: str, count: int) -> None:
        self.dropped.labels(source, stage, reason).inc(count)

    def count(self, event: str, source: str, count: int) -> None:
        self.events.labels(source, event).inc(count)

    def record(self, stage: str, seconds: float) -> None:
        self.stage.labels(stage).observe(seconds)

    def analytics(self, source: str, analytics: dict[str, Any]) -> None:
        # Once per frame: keep the reference, read at the scrape (the dicts are not changed
        # after they are handed over; one assignment is atomic under the GIL).
        self._analytics[source] = analytics


def _stats_reader(source: Any) -> Callable[[], Any]:
    """Reads `source.stats` when called: the scrape sees the stats object current then."""
    return lambda: source.stats


class _ScrapeCollector:
    """Figures read when Prometheus scrapes: queue depths, source reconnects, GPU use."""

    def __init__(self, server: MetricsServer) -> None:
        self.server = server
        self._gpu = _Gpu()
        # Classes seen inside each (source, zone) at an earlier scrape: they read 0 once gone,
        # so a zone's series do not vanish from graphs and alerts when it empties.
        self._zone_classes: dict[tuple[str, str], set[str]] = {}
        self._lock = threading.Lock()  # two scrapes at once share those sets

    def describe(self) -> list[Any]:
        return []  # the families vary with the run: no fixed list to check at registration

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        queues = GaugeMetricFamily(
            "visionrt_queue_depth", "Frames waiting between stages", labels=["queue"]
        )
        for name, depth in self.server._gauges().items():
            if depth is not None:
                queues.add_metric([name], float(depth))
        yield queues
        families = {
            key: CounterMetricFamily(f"visionrt_source_{key}", doc, labels=["source"])
            for key, doc in (
                ("reconnects", "Reconnects of a live source"),
                ("restarts", "Worker processes of a source started again after they died"),
                ("missed", "Frames decoded but never given because the reader was behind"),
                ("corrupt", "Corrupt frames skipped"),
            )
        }
        for name, read in self.server._sources.items():
            stats = read()
            for key, family in families.items():
                family.add_metric([name], float(getattr(stats, key, 0)))
        yield from families.values()
        yield from self._audit()
        yield from self._zones_and_lines()
        yield from self._gpu.collect()

    def _audit(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        gauges = {
            key: GaugeMetricFamily(name, doc, labels=["source"])
            for key, (name, doc) in FIGURES.items()
        }
        for source, values in self.server._figures().items():
            for key, value in values.items():
                if key in gauges:
                    gauges[key].add_metric([source], float(value))
        yield from (gauge for gauge in gauges.values() if gauge.samples)

    def _zones_and_lines(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        zones = GaugeMetricFamily(
            "visionrt_zone_objects", "Tracked objects inside a zone now, by class",
            labels=["source", "zone", "class"],
        )  # fmt: skip
        lines = CounterMetricFamily(
            "visionrt_line_crossings", "Tracks that crossed a line, by direction (in/out)",
            labels=["source", "line", "direction"],
        )  # fmt: skip
        for source, analytics in dict(self.server._analytics).items():
            for zone, figures in analytics.get("zones", {}).items():
                count = figures.get("count", {})
                with self._lock:
                    seen = self._zone_classes.setdefault((source, zone), set())
                    seen.update(count)
                    names = sorted(seen)
                for name in names:
                    zones.add_metric([source, zone, name], float(count.get(name, 0)))
            for line, totals in analytics.get("lines", {}).items():
                for direction, total in totals.items():
                    lines.add_metric([source, line, direction], float(total))
        yield from (family for family in (zones, lines) if family.samples)


class _Gpu:
    """NVIDIA GPU figures through NVML (telemetry.gpu), when it and a GPU are there."""

    def __init__(self) -> None:
        self._nvml = open_nvml()

    def collect(self) -> Iterator[Any]:
        if self._nvml is not None:
            yield from prometheus_families(read_gpus(self._nvml))


def check_host(host: str, token: str, what: str = "output.metrics_host") -> None:
    """Beyond this machine only with a token (one line, before anything listens). The line
    names the settings `run` reads them from: there are no flags for them."""
    if host not in LOCAL_HOSTS and not token:
        raise ConfigError(
            f"{what} {host}: serving metrics beyond this machine needs a token"
            " (--set output.metrics_token=TOKEN, or the environment variable"
            " VISIONRT_METRICS_TOKEN, which keeps it off the command line)"
        )


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass  # a scrape every few seconds is not news


def serve_registry(registry: Any, host: str, port: int, token: str = "") -> tuple[Any, Any]:
    """A Prometheus `registry` at http://HOST:PORT/metrics on a daemon thread (the server and
    its thread; port 0 picks one); with `token`, a scrape without `Bearer TOKEN` is a 401.
    A SinkError when the port is taken or not allowed."""
    from prometheus_client.exposition import ThreadingWSGIServer, make_wsgi_app

    app = make_wsgi_app(registry)
    expected = f"Bearer {token}".encode()
    names = {*LOCAL_HOSTS, host.strip("[]").lower()}

    def guarded(environ: dict[str, Any], start: Callable[..., Any]) -> Iterable[bytes]:
        # Without a token the endpoint is this machine's alone: a page of another site that
        # rebinds its DNS name to 127.0.0.1 sends its own name in Host, and is refused.
        asked = str(environ.get("HTTP_HOST", ""))
        if not token and not _names_this(asked, names, str(environ.get("SERVER_PORT", ""))):
            start("421 Misdirected Request", [("Content-Type", "text/plain")])
            return [f"Host '{asked}' is not this endpoint\n".encode()]
        given = environ.get("HTTP_AUTHORIZATION", "").encode()
        if token and not hmac.compare_digest(given, expected):
            start("401 Unauthorized", [("WWW-Authenticate", "Bearer")])
            return [b"a token is required\n"]
        return app(environ, start)

    class Server(ThreadingWSGIServer):
        address_family = socket.AF_INET6 if ":" in host else socket.AF_INET

    try:
        server = make_server(host, port, guarded, Server, handler_class=_Quiet)
    except OSError as err:
        raise SinkError(
            f"--metrics-port {port}: cannot listen on {host}: {err.strerror or err}"
        ) from err
    thread = threading.Thread(target=server.serve_forever, daemon=True, name="metrics-http")
    thread.start()
    return server, thread


def _names_this(asked: str, names: set[str], port: str) -> bool:
    """Whether a Host header (`name:port`, `[::1]:port`; no port: HTTP's 80) names this
    endpoint: one of `names` at `port`."""
    if asked.startswith("["):
        name, _, rest = asked[1:].partition("]")
        given = rest[1:] if rest.startswith(":") else ""
    elif asked.count(":") == 1:
        name, _, given = asked.partition(":")
    else:
        name, given = asked, ""
    return name.lower() in names and (given or "80") == port


def scrape(url: str, timeout: float = 5.0, token: str = "") -> str:
    """The text at `url` (tests and the soak script read the endpoint with it), sending
    `token` as a bearer token when given."""
    import urllib.request

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    request = urllib.request.Request(url, headers=headers)
    with urllib.request.urlopen(request, timeout=timeout) as response:
        text: str = response.read().decode("utf-8")
    return text
