"""Telemetry: any stage name, gauges and per-window latency in the per-second snapshot, and the
file written by --telemetry."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
from conftest import HANG_SECONDS

from visionrt.errors import SinkError
from visionrt.telemetry import STAGES, Telemetry
from visionrt.telemetry.report import TelemetryWriter


def test_a_new_stage_name_gets_its_own_series() -> None:
    telemetry = Telemetry()
    telemetry.start()
    telemetry.record("depth", 0.010)
    telemetry.record("infer", 0.020)
    stages = telemetry.summary().stages
    assert list(stages)[: len(STAGES)] == list(STAGES)  # the known stages first, in order
    assert stages["depth"]["p50"] == pytest.approx(10.0)


def test_a_source_s_fps_is_over_its_own_seconds(monkeypatch: pytest.MonkeyPatch) -> None:
    """A camera that finished early (no depth, beside one with it) shows its own pace, not the
    slow camera's: its results over the seconds from its first frame in to its last result."""
    from types import SimpleNamespace

    from visionrt.telemetry import stats

    now = [100.0]  # a fake clock the test moves: nothing here reads the real one
    monkeypatch.setattr(stats, "time", SimpleNamespace(perf_counter=lambda: now[0]))
    telemetry = Telemetry()
    telemetry.start()
    for source in ("rgb", "slam"):
        telemetry.frame_in(source)
    for t in (101.0, 102.0):  # slam: 2 results in its first 2 s
        now[0] = t
        telemetry.frame_in("slam")
        telemetry.frame_out(0.1, "slam")
    now[0] = 104.0
    telemetry.frame_out(0.1, "rgb")
    running = telemetry.per_source()
    assert running["slam"]["seconds"] == pytest.approx(4.0)  # until now while the run goes on
    now[0] = 110.0
    telemetry.frame_out(0.1, "rgb")
    telemetry.stop()
    now[0] = 200.0  # read later: the run's end counts, not the reading's
    rows = telemetry.per_source()
    assert (rows["slam"]["seconds"], rows["slam"]["fps"]) == (2.0, 1.0)
    assert (rows["rgb"]["seconds"], rows["rgb"]["fps"]) == (10.0, 0.2)
    assert telemetry.summary().fps == pytest.approx(4 / 10)  # the run's: over its seconds


def test_snapshot_has_window_latency_and_gauges() -> None:
    telemetry = Telemetry()
    telemetry.start()
    depth = {"value": 3}
    telemetry.register_gauge("decoded", lambda: depth["value"])
    for latency in (0.010, 0.020, 0.030):
        telemetry.frame_out(latency)
    first = telemetry.snapshot()
    assert first["latency_ms"]["p50"] == pytest.approx(20.0)
    assert first["queues"] == {"decoded": 3}
    telemetry.frame_out(0.100)
    depth["value"] = 0
    second = telemetry.snapshot()  # only what came since the last snapshot
    assert second["latency_ms"]["p50"] == pytest.approx(100.0)
    assert second["queues"] == {"decoded": 0}


def test_writer_fails_early_on_a_folder(tmp_path: Path) -> None:
    with (
        pytest.raises(SinkError, match="cannot write telemetry"),
        TelemetryWriter(Telemetry(), tmp_path),
    ):
        pass


def test_writer_writes_a_line_per_interval(tmp_path: Path) -> None:
    telemetry = Telemetry()
    telemetry.start()
    telemetry.frame_out(0.01)
    snapshot, taken = telemetry.snapshot, threading.Semaphore(0)
    snapshots: list[dict[str, Any]] = []

    def counted() -> dict[str, Any]:
        snapshots.append(snapshot())
        taken.release()
        return snapshots[-1]

    telemetry.snapshot = counted  # type: ignore[method-assign]
    path = tmp_path / "t.jsonl"
    with TelemetryWriter(telemetry, path, interval=0.01):
        for _ in range(3):  # three interval lines while open, however loaded the machine
            assert taken.acquire(timeout=HANG_SECONDS), "the writer wrote no line in its interval"
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    # One line per snapshot: those of the intervals, and the last one written on close.
    assert len(lines) == len(snapshots) >= 4
    assert [line["t"] for line in lines] == [s["t"] for s in snapshots]
    assert {"frames_out", "latency_ms", "queues", "fps"} <= set(lines[-1])
    # The one frame counts once: in the first line's rate, in none after.
    assert all(line["frames_out"] == 1 for line in lines)
    assert lines[0]["fps"] > 0
    assert all(line["fps"] == 0.0 for line in lines[1:])


def test_samples_ring_keeps_the_most_recent_within_its_cap() -> None:
    from visionrt.telemetry.stats import Samples

    ring = Samples(cap=5000)
    for i in range(12_000):
        ring.append(float(i))
    assert len(ring) == 5000
    values = ring.values()
    assert sorted(values.tolist()) == [float(i) for i in range(7000, 12_000)]
    assert values.nbytes == 5000 * 8  # 8 bytes a sample: a 24/7 run stays small
    window = Samples()
    window.append(0.1)
    window.append(0.3)
    assert sorted(window.take().tolist()) == [0.1, 0.3]
    assert len(window) == 0
    assert len(window.take()) == 0
