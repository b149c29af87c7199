"""The cluster's Prometheus side on the driver: a file-based service-discovery JSON naming each
worker's endpoint (labelled by node and worker; Prometheus' `file_sd_configs` re-reads it as
workers come and go) and the cluster's totals, served while the run lasts."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from visionrt.distributed.report import ClusterReport
from visionrt.errors import SinkError
from visionrt.telemetry.metrics import check_host, serve_registry


class ClusterMetrics:
    """Writes `targets` (the service-discovery file) whenever the set of worker endpoints
    changes, and serves the totals of the latest report at http://HOST:PORT/metrics (`port`
    0: a free one; None: no endpoint, the file only). Beyond this machine only with a
    `token`."""

    def __init__(
        self, targets: Path, port: int | None = None, host: str = "127.0.0.1", token: str = ""
    ) -> None:
        import prometheus_client as prom

        self.targets, self.host, self.port = Path(targets), host, port
        self._written: list[dict[str, Any]] | None = None
        self._report = ClusterReport()
        self._workers = 0
        self._lock = threading.Lock()
        self.registry = prom.CollectorRegistry()
        self.registry.register(_Totals(self))
        self._server: Any = None
        if port is not None:
            check_host(host, token)
            self._server, _ = serve_registry(self.registry, host, port, token)
            self.port = int(self._server.server_port)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/metrics"

    def update(self, report: ClusterReport, workers: Mapping[str, Mapping[str, Any]]) -> None:
        """The latest report, and the workers alive now (`info`: each one's `metrics`
        endpoint and `node`)."""
        with self._lock:
            self._report, self._workers = report, len(workers)
        groups = [
            {
                "targets": [info["metrics"]],
                "labels": {"job": "visionrt", "worker": name, "node": str(info.get("node", ""))},
            }
            for name, info in sorted(workers.items())
            if info.get("metrics")
        ]
        if groups != self._written:
            self._write(groups)
            self._written = groups

    def _write(self, groups: list[dict[str, Any]]) -> None:
        # Whole or not at all: Prometheus may read it at any moment.
        partial = self.targets.with_name(f".{self.targets.name}.tmp")
        try:
            partial.write_text(json.dumps(groups, indent=1), encoding="utf-8")
            os.replace(partial, self.targets)
        except OSError as err:
            raise SinkError(f"cannot write {self.targets}: {err.strerror or err}") from err

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def snapshot(self) -> tuple[ClusterReport, int]:
        with self._lock:
            return self._report, self._workers


class _Totals:
    """The report's figures at each scrape."""

    def __init__(self, owner: ClusterMetrics) -> None:
        self.owner = owner

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        report, workers = self.owner.snapshot()
        yield GaugeMetricFamily("visionrt_cluster_workers", "Workers alive now", value=workers)
        for name, doc, value in (
            ("attempts", "Work units started, retries included", report.attempts),
            ("reassignments", "Units queued again: their worker died", report.reassignments),
            ("lost_workers", "Workers that died (their process or node)", report.lost_workers),
            ("regroups", "Workers of streams restarted to take in a lost one", report.regroups),
            ("stale_batches", "Batches of given-up attempts, not written", report.stale_batches),
        ):
            yield CounterMetricFamily(f"visionrt_cluster_{name}", doc, value=value)
        frames = CounterMetricFamily(
            "visionrt_cluster_frames_out", "Frames committed, per source", labels=["source"]
        )
        lost = CounterMetricFamily(
            "visionrt_cluster_frames_lost",
            "Frames of live streams no worker read while one was replaced",
            labels=["source"],
        )
        for source, state in sorted(report.sources.items()):
            frames.add_metric([source], state.written)
            lost.add_metric([source], state.lost)
        by_worker = CounterMetricFamily(
            "visionrt_cluster_worker_frames", "Frames committed, per worker", labels=["worker"]
        )
        for worker, count in sorted(report.frames_by_worker.items()):
            by_worker.add_metric([worker], count)
        yield from (frames, lost, by_worker)
