"""Figures a hostile sweep found wrong (issue #16), one test each: the gap around a stall, a
telemetry file that fails mid-run, worker restarts as events, frames lost against what was
asked, and a finite video over HTTP that ends."""

from __future__ import annotations

import itertools
import json
import os
import signal
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from conftest import HANG_SECONDS, write_video

from visionrt import Pipeline, PipelineOptions, SourceOptions
from visionrt.cli.main import main
from visionrt.sources import open_source
from visionrt.sources.process import ProcessSource
from visionrt.sources.video import VideoSource
from visionrt.telemetry.metrics import MetricsServer, scrape
from visionrt.telemetry.stats import RunSummary

SERVED = 60  # frames of the served video: 2.4 s at 25 FPS


class _VideoServer:
    """http.server on 127.0.0.1 serving one video; each request takes the next step of `script`
    (the last one repeats): `full` (all of it), `cut` (its Content-Length, half the bytes, then
    the connection closes) or `stall` (most of it, then nothing until released)."""

    def __init__(self, data: bytes, script: list[str]) -> None:
        self.data, self.script, self.requests = data, list(script), 0
        self.release = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                step = server.script[min(server.requests, len(server.script) - 1)]
                server.requests += 1
                sent = {"full": len(server.data), "cut": len(server.data) // 2}
                self.send_response(200)
                self.send_header("Content-Type", "video/x-matroska")
                self.send_header("Content-Length", str(len(server.data)))
                self.end_headers()
                try:
                    self.wfile.write(server.data[: sent.get(step, len(server.data) * 9 // 10)])
                    self.wfile.flush()
                    if step == "stall":
                        server.release.wait(30)
                except OSError:  # the reader gave up on this connection
                    pass
                self.close_connection = True

            def log_message(self, *_args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/video.mkv"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Any]:
    data = write_video(tmp_path / "served.mkv", frames=SERVED).read_bytes()
    servers: list[_VideoServer] = []

    def start(script: list[str], video: bytes = data) -> _VideoServer:
        servers.append(_VideoServer(video, script))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def _run_in_thread(pipeline: Pipeline, seconds: float = HANG_SECONDS) -> RunSummary:
    """The run's summary; fails instead of hanging when the run does not end (`seconds` only
    guards against a hang)."""
    result: dict[str, RunSummary] = {}
    worker = threading.Thread(target=lambda: result.setdefault("s", pipeline.run()), daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        pipeline.stop()
        worker.join(5)
        pytest.fail(f"the run did not end (gave up after {seconds:.0f} s)")
    pipeline.close()
    return result["s"]


# -- 1. the gap after a stall includes the stall ---------------------------------------------


def test_the_gap_after_a_stall_runs_from_the_last_frame_to_the_next(served: Any) -> None:
    # Most of the video, then nothing: the read waits out its timeout, the source reconnects,
    # and the second connection gives the whole video.
    server = served(["stall", "full"])
    options = SourceOptions(
        mode="live", read_timeout=1.0, reconnect_backoff=0.01, max_frames=3 * SERVED
    )  # max_frames: an end that is taken for a disconnect would fetch the video forever
    source = VideoSource(server.url, 0, options, kind="stream")
    frames = list(source.frames())
    source.close()
    report = source.report()
    assert report["reconnects"] == 1
    # Live timestamps are capture times: the reconnect shows as the one large step.
    steps = [b.timestamp - a.timestamp for a, b in itertools.pairwise(frames)]
    stall = max(steps)
    assert stall > options.read_timeout
    assert report["gap_seconds"] == pytest.approx(stall, abs=0.01)


# -- 2. a telemetry file that fails stops the run --------------------------------------------


def test_a_failing_telemetry_file_stops_the_run_at_once(
    tiny_model: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full on this system")
    # Far more frames than a second holds: before the fix the run went on to its end.
    args = ["run", "synthetic:64x48:1000000", "-m", str(tiny_model), "--backend", "null", "-q"]
    args += ["--out", str(tmp_path), "--telemetry", "/dev/full", "--no-video"]
    fail, out_at_failure = Pipeline.fail, []

    def failed(self: Pipeline, err: BaseException) -> None:  # the telemetry writer's on_error
        out_at_failure.append(self.telemetry.frames_out)
        fail(self, err)

    monkeypatch.setattr(Pipeline, "fail", failed)
    try:
        main(args)
        code = 0
    except SystemExit as exit_:
        code = int(exit_.code or 0)
    stderr = capsys.readouterr().err
    errors = [line for line in stderr.splitlines() if line.startswith("visionrt: error:")]
    assert "Traceback" not in stderr
    assert errors == ["visionrt: error: cannot write telemetry /dev/full: No space left on device"]
    assert code == 6  # SinkError
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["error"] == "cannot write telemetry /dev/full: No space left on device"
    # The first line is written after 1 s; the run stops as that fails: a result already on
    # its way out may still come (the stages are aborted, not drained).
    assert len(out_at_failure) == 1
    assert out_at_failure[0] <= summary["frames_out"] <= out_at_failure[0] + 1
    assert summary["frames_out"] < 1_000_000
    (jsonl,) = tmp_path.glob("*.jsonl")  # finalized: no `.partial` name left
    assert ".partial" not in jsonl.name
    lines = jsonl.read_text().splitlines()
    assert len(lines) == summary["frames_out"]  # the JSONL finalized, every line in it


# -- 3. a restarted worker is an event -------------------------------------------------------


def test_a_worker_restart_is_an_event_in_summary_telemetry_and_prometheus(
    tiny_model: Path,
) -> None:
    options = SourceOptions(mode="file", workers="process", reconnect_backoff=0.01)
    pipeline = Pipeline(
        ["cam=synthetic:64x48:120"], tiny_model, "null", source_options=options,
        options=PipelineOptions(warmup=0),
    )  # fmt: skip
    source = pipeline.sources[0]
    assert isinstance(source, ProcessSource)
    metrics = MetricsServer(0)
    pipeline.telemetry.add_listener(metrics)
    metrics.start()
    killed: list[int] = []

    def kill_once(result: Any) -> None:
        if result.frame.index == 20 and not killed and source.pid is not None:
            killed.append(source.pid)
            os.kill(source.pid, signal.SIGKILL)

    try:
        summary = pipeline.run(on_result=kill_once)
        text = scrape(metrics.url)
    finally:
        metrics.close()
        pipeline.close()
    assert killed
    assert summary.frames_out == 120  # resumed after the last frame handed over
    report = summary.sources[0]
    assert report["restarts"] == 1
    assert report["gap_seconds"] > 0  # from the last frame before the death to the next one
    assert summary.events.get("source: worker restart") == 1
    assert report["events"].get("source: worker restart") == 1
    assert pipeline.telemetry.snapshot()["events"].get("source: worker restart") == 1
    line = 'visionrt_events_total{event="source: worker restart",source="cam"} 1.0'
    assert line in text.splitlines()


# -- 4. frames lost against what was asked ---------------------------------------------------


@pytest.mark.parametrize("workers", ["thread", "process"])
def test_a_truncated_file_loses_frames_against_max_frames_not_the_declared_count(
    workers: str, tmp_path: Path
) -> None:
    whole = write_video(tmp_path / "whole.avi", frames=200)
    data = whole.read_bytes()
    cut = tmp_path / "cut.avi"
    cut.write_bytes(data[: len(data) * 2 // 5])  # the header still declares 200 frames

    def read(path: Path, max_frames: int) -> dict[str, Any]:
        options = SourceOptions(mode="file", max_frames=max_frames, workers=workers)
        source = open_source(str(path), 0, options)
        frames = sum(1 for _ in source.frames())
        source.close()
        report = source.report()
        assert report["frames"] == frames
        return report

    everything = read(cut, 0)
    read_in_cut = everything["frames"]
    assert 0 < read_in_cut < 60
    assert (everything["declared"], everything["lost"]) == (200, 200 - read_in_cut)
    asked = read(cut, 60)
    assert (asked["declared"], asked["frames"]) == (200, read_in_cut)
    assert asked["lost"] == 60 - read_in_cut  # was 200 - read: against all that were declared
    assert asked["warnings"] == [
        f"{cut}: {read_in_cut} of 60 frames asked (200 declared) decoded,"
        f" {60 - read_in_cut} lost (truncated or corrupt file?)"
    ]
    # Stopping on purpose at max_frames is no loss.
    stopped = read(whole, 60)
    assert (stopped["frames"], stopped["lost"], stopped["warnings"]) == (60, 0, [])


# -- 5. a finite video over HTTP ends ------------------------------------------------------------


@pytest.mark.parametrize("suffix", [".mkv", ".avi"])  # a declared duration; a frame count
def test_a_finite_video_over_http_ends_in_live_mode(
    suffix: str, served: Any, tiny_model: Path, tmp_path: Path
) -> None:
    video = write_video(tmp_path / f"finite{suffix}", frames=SERVED).read_bytes()
    server = served(["full"], video)
    pipeline = Pipeline([f"web={server.url}"], tiny_model, "null")
    assert pipeline.live  # a stream: live in the default mode
    summary = _run_in_thread(pipeline)
    report = summary.sources[0]
    assert summary.frames_in == SERVED
    assert (report["reconnects"], report["ended_early"], summary.error) == (0, "", "")
    assert server.requests == 1  # not fetched again
    assert summary.accounted


def test_a_video_cut_half_way_over_http_reconnects(served: Any, tiny_model: Path) -> None:
    server = served(["cut", "full"])
    options = SourceOptions(reconnect_backoff=0.01)
    pipeline = Pipeline([f"web={server.url}"], tiny_model, "null", source_options=options)
    summary = _run_in_thread(pipeline)
    report = summary.sources[0]
    assert report["reconnects"] == 1
    assert summary.events.get("source: reconnect") == 1
    assert server.requests == 2
    # Part of the first connection, then all of the second, which ends the source.
    assert SERVED < summary.frames_in < 2 * SERVED
    assert (report["ended_early"], summary.error) == ("", "")
