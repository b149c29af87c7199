"""Prometheus metrics: the endpoint's content during and after a run (counters that match the
run summary, drops by reason, per-source labels, histograms), localhost binding, bad ports; and
the per-source figures of the per-second telemetry file."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import urllib.error
from pathlib import Path

import pytest
from conftest import scraped

from visionrt import BackendOptions, Pipeline, PipelineOptions, SourceOptions
from visionrt.errors import ConfigError, SinkError
from visionrt.telemetry.metrics import MetricsServer, scrape
from visionrt.types import FrameResult


def _value(text: str, name: str, **labels: str) -> float:
    """The sample `name{labels}` in Prometheus text format (labels matched as a subset)."""
    for line in text.splitlines():
        if line.startswith("#") or not line.startswith(name):
            continue
        match = re.match(r"([a-z_]+)(\{(.*)\})? (\S+)$", line)
        if match is None or match.group(1) != name:
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', match.group(3) or ""))
        if all(found.get(k) == v for k, v in labels.items()):
            return float(match.group(4))
    raise AssertionError(f"{name}{labels} not in the scrape")


def _pipeline(tiny_model: Path, *sources: str, live: bool = False, delay_ms: int = 20) -> Pipeline:
    return Pipeline(
        list(sources),
        tiny_model,
        "null",
        BackendOptions(settings={"delay_ms": str(delay_ms)}),
        source_options=SourceOptions(mode="live" if live else "file"),
        options=PipelineOptions(warmup=0),
    )


def test_metrics_during_and_after_a_run_match_the_summary(tiny_model: Path) -> None:
    pipeline = _pipeline(tiny_model, "cam=synthetic:64x48:12", "aux=synthetic:64x48:8")
    server = MetricsServer(0, info={"runtime": "null"})
    named = zip(pipeline.names, pipeline.sources, strict=True)
    read: list[dict[str, int]] = []  # the pipeline's queue depths as each scrape read them

    def depths() -> dict[str, int]:
        read.append(pipeline.queue_depths())
        return read[-1]

    server.watch({n: (lambda s=s: s.stats) for n, s in named}, depths)
    pipeline.telemetry.add_listener(server)
    server.start()
    during: list[str] = []
    first: list[str] = []  # the source of the result the mid-run scrape was taken at

    def scrape_once(result: FrameResult) -> None:
        if not during:
            first.append(result.frame.source_name)
            during.append(scrape(server.url))

    try:
        assert server.url.startswith("http://127.0.0.1:")
        summary = pipeline.run(on_result=scrape_once)
        after = scrape(server.url)
    finally:
        server.close()
        pipeline.close()
    # Mid-run the endpoint already answers, with fewer frames out than in the end.
    # (whichever camera's frame came out first: the two are batched together)
    assert _value(during[0], "visionrt_frames_out_total", source=first[0]) >= 1
    # Each scrape shows the depths the pipeline had when it was read: every queue, as it was.
    assert "decoded" in read[0]
    assert _queues(during[0]) == read[0]
    assert _queues(after) == read[-1]
    assert len(read) == 2
    assert _value(after, "visionrt_frames_in_total", source="cam") == 12
    assert _value(after, "visionrt_frames_out_total", source="aux") == 8
    out = sum(_value(after, "visionrt_frames_out_total", source=s) for s in ("cam", "aux"))
    assert out == summary.frames_out == 20
    assert _value(after, "visionrt_latency_seconds_count", source="cam") == 12
    assert _value(after, "visionrt_stage_seconds_count", stage="infer") == 20
    # The null backend sleeps 20 ms per call: the infer histogram's sum says so.
    assert _value(after, "visionrt_stage_seconds_sum", stage="infer") >= 20 * 0.019
    assert _value(after, "visionrt_source_reconnects_total", source="aux") == 0
    assert _value(after, "visionrt_build_info", runtime="null") == 1
    assert _value(after, "visionrt_process_resident_memory_bytes") > 0


def _queues(text: str) -> dict[str, float]:
    """Every visionrt_queue_depth sample in a scrape, by queue."""
    found = re.findall(r'^visionrt_queue_depth\{queue="([^"]*)"\} (\S+)$', text, re.MULTILINE)
    return {name: float(value) for name, value in found}


def test_queue_depths_are_read_at_each_scrape() -> None:
    depths: dict[str, int | None] = {"decoded": 3, "inferred": 0, "sink": None}
    server = MetricsServer(0)
    server.watch({}, lambda: dict(depths))
    server.start()
    try:
        first = scrape(server.url)
        depths["decoded"], depths["sink"] = 1, 7
        second = scrape(server.url)
    finally:
        server.close()
    # A queue that reads None (not built in this run) is left out, not shown as 0.
    assert _queues(first) == {"decoded": 3, "inferred": 0}
    assert _queues(second) == {"decoded": 1, "inferred": 0, "sink": 7}


def test_drops_are_exported_by_stage_and_reason(tiny_model: Path) -> None:
    # Synthetic frames come at 30 FPS in live mode: a 80 ms model keeps up with one in three.
    pipeline = _pipeline(tiny_model, "synthetic:64x48:40", live=True, delay_ms=80)
    summary, text = scraped(pipeline)
    assert summary.dropped, "a model slower than the camera must drop frames"
    exported = 0.0
    for key, count in summary.dropped.items():
        stage, reason = key.split(": ", 1)
        value = _value(text, "visionrt_frames_dropped_total", stage=stage, reason=reason)
        assert value == count
        exported += value
    assert exported + summary.frames_out == summary.frames_in


def test_a_taken_port_is_one_line_error() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(SinkError, match=f"--metrics-port {port}: cannot listen"):
            MetricsServer(port).start()
    with pytest.raises(ConfigError, match="expected 0 to 65535"):
        MetricsServer(70000)


def test_metrics_beyond_this_machine_need_a_token_and_every_scrape_sends_it() -> None:
    with pytest.raises(ConfigError, match=r"0\.0\.0\.0: serving metrics beyond this machine needs"):
        MetricsServer(0, "0.0.0.0")
    server = MetricsServer(0, "0.0.0.0", token="s3cret").start()
    try:
        url = f"http://127.0.0.1:{server.port}/metrics"
        for wrong in ("", "s3cre", "s3cret2"):
            with pytest.raises(urllib.error.HTTPError, match="401"):
                scrape(url, token=wrong)
        assert "visionrt_build_info" in scrape(url, token="s3cret")
    finally:
        server.close()


def test_a_local_endpoint_serves_only_requests_that_name_this_machine() -> None:
    """Without a token the endpoint is this machine's alone: a page of another site whose DNS
    name was rebound to 127.0.0.1 sends its own name in Host, and gets a 421, not the
    metrics; a scrape by 127.0.0.1, localhost or ::1 at the endpoint's port is served."""
    import http.client

    server = MetricsServer(0).start()
    try:

        def get(host: str) -> int:
            connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
            try:
                connection.request("GET", "/metrics", headers={"Host": host})
                return connection.getresponse().status
            finally:
                connection.close()

        port = server.port
        assert get(f"127.0.0.1:{port}") == 200
        assert get(f"localhost:{port}") == 200
        assert get(f"rebound.example:{port}") == 421
        assert get(f"127.0.0.1:{port + 1}") == 421
        assert "visionrt_build_info" in scrape(server.url)  # what Prometheus and tests send
    finally:
        server.close()


def test_cli_rejects_a_bad_metrics_port(tmp_path: Path, tiny_model: Path) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "visionrt.cli.main", "run", "synthetic:64x48:3", "-m",
         str(tiny_model), "--backend", "null", "--metrics-port", "-5", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert run.returncode != 0
    assert "metrics_port: expected 0 (off) or 1 to 65535, got -5" in run.stderr
    assert "Traceback" not in run.stderr


def test_telemetry_lines_carry_per_source_figures(tmp_path: Path, tiny_model: Path) -> None:
    from visionrt.telemetry.report import TelemetryWriter

    pipeline = _pipeline(tiny_model, "a=synthetic:64x48:30", "b=synthetic:64x48:10")
    path = tmp_path / "telemetry.jsonl"
    with TelemetryWriter(pipeline.telemetry, path, interval=0.2):
        pipeline.run()
    pipeline.close()
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    last = lines[-1]["sources"]
    assert (last["a"]["frames_out"], last["b"]["frames_out"]) == (30, 10)
    assert {"fps", "latency_ms", "dropped", "frames_in"} <= set(last["a"])
    assert last["a"]["latency_ms"]["p95"] >= last["a"]["latency_ms"]["p50"]
