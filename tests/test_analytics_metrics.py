"""Zone and line figures beyond the JSONL (issue #20): the latest per source kept by telemetry,
exported as Prometheus metrics (objects in a zone by class, 0 once a class left; crossings by
direction) and written to summary.json; then a real run whose box walks across a line into a
zone, scraped and summarized."""

from __future__ import annotations

import json
import re
from pathlib import Path

import cv2
import numpy as np
import pytest
from conftest import scraped

from visionrt import Pipeline
from visionrt.cli.main import main
from visionrt.config import pipeline_options
from visionrt.telemetry import Telemetry
from visionrt.telemetry.metrics import MetricsServer, scrape


def _samples(text: str, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    """Every sample of `name` in a Prometheus text exposition, by its sorted labels."""
    found = {}
    for labels, value in re.findall(rf"^{name}\{{(.*)\}} (\S+)$", text, re.MULTILINE):
        found[tuple(sorted(re.findall(r'(\w+)="([^"]*)"', labels)))] = float(value)
    return found


def _zone(source: str, zone: str, cls: str) -> tuple[tuple[str, str], ...]:
    return (("class", cls), ("source", source), ("zone", zone))


def _line(source: str, line: str, direction: str) -> tuple[tuple[str, str], ...]:
    return (("direction", direction), ("line", line), ("source", source))


def _figures(count: dict[str, int], crossed: dict[str, int]) -> dict:
    """A frame's `analytics` as fuse.analytics makes it: zone `door`, line `gate`."""
    seconds = {str(i): 1.5 for i in range(sum(count.values()))}
    return {"zones": {"door": {"count": count, "seconds": seconds}}, "lines": {"gate": crossed}}


def test_the_latest_figures_per_source_reach_the_summary() -> None:
    telemetry = Telemetry()
    assert telemetry.summary().analytics == {}  # no zones or lines: nothing
    first, last = _figures({"person": 1}, {"in": 0, "out": 0}), _figures({}, {"in": 1, "out": 0})
    telemetry.set_analytics("cam", first)
    telemetry.set_analytics("cam", last)
    telemetry.set_analytics("cam", {})  # a frame without tracks keeps the last figures
    telemetry.set_analytics("aux", first)
    summary = telemetry.summary()
    assert summary.analytics == {"cam": last, "aux": first}
    assert json.loads(json.dumps(summary.to_json()))["analytics"]["cam"] == last


def test_zone_objects_and_line_crossings_are_read_at_each_scrape() -> None:
    telemetry = Telemetry()
    server = MetricsServer(0)
    telemetry.add_listener(server)
    server.start()
    try:
        before = scrape(server.url)
        telemetry.set_analytics("cam", _figures({"person": 2, "car": 1}, {"in": 3, "out": 1}))
        telemetry.set_analytics("aux", _figures({"car": 1}, {"in": 0, "out": 0}))
        during = scrape(server.url)
        telemetry.set_analytics("cam", _figures({"car": 2}, {"in": 4, "out": 1}))
        after = scrape(server.url)
    finally:
        server.close()
    assert "visionrt_zone_objects" not in before
    assert "visionrt_line_crossings_total" not in before
    assert _samples(during, "visionrt_zone_objects") == {
        _zone("cam", "door", "person"): 2,
        _zone("cam", "door", "car"): 1,
        _zone("aux", "door", "car"): 1,
    }
    assert _samples(during, "visionrt_line_crossings_total") == {
        _line("cam", "gate", "in"): 3,
        _line("cam", "gate", "out"): 1,
        _line("aux", "gate", "in"): 0,
        _line("aux", "gate", "out"): 0,
    }
    # The people left the zone: their series read 0 instead of vanishing.
    zones = _samples(after, "visionrt_zone_objects")
    assert zones[_zone("cam", "door", "person")] == 0
    assert zones[_zone("cam", "door", "car")] == 2
    assert _samples(after, "visionrt_line_crossings_total")[_line("cam", "gate", "in")] == 4
    assert "# TYPE visionrt_line_crossings_total counter" in after
    assert "# TYPE visionrt_zone_objects gauge" in after


# The tiny detector's one box is fixed in input pixels, so on 640-wide images of growing height
# it stands lower in each (letterbox): feet at y = H/2 + 50, 290 → 370 over these five images.
HEIGHTS = (480, 520, 560, 600, 640)
ZONES = {
    "cam": {
        "zones": {"bottom": [[0, 340], [640, 340], [640, 640], [0, 640]]},
        "lines": {"mid": [[0, 320], [640, 320]]},  # "in" is downwards (right of a→b, y down)
    }
}


@pytest.fixture
def walking(tmp_path: Path) -> Path:
    """Images in which the tiny detector's person walks down across `mid` into `bottom`."""
    folder = tmp_path / "walk"
    folder.mkdir()
    for i, height in enumerate(HEIGHTS):
        cv2.imwrite(str(folder / f"img{i}.png"), np.full((height, 640, 3), 60 + i * 20, np.uint8))
    return folder


def test_a_run_exports_its_zones_and_lines(walking: Path, tiny_model: Path) -> None:
    pipeline = Pipeline(
        [f"cam={walking}"],
        tiny_model,
        "onnxruntime",
        options=pipeline_options(warmup=0, track=True),
        analytics=ZONES,
    )
    summary, text = scraped(pipeline)
    assert summary.frames_out == len(HEIGHTS)
    assert _samples(text, "visionrt_line_crossings_total") == {
        _line("cam", "mid", "in"): 1,
        _line("cam", "mid", "out"): 0,
    }
    assert _samples(text, "visionrt_zone_objects") == {_zone("cam", "bottom", "person"): 1}
    assert summary.analytics["cam"]["lines"] == {"mid": {"in": 1, "out": 0}}
    assert summary.analytics["cam"]["zones"]["bottom"]["count"] == {"person": 1}


def test_summary_json_holds_the_last_zone_and_line_figures(
    walking: Path, tiny_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "run.yaml"
    config.write_text(json.dumps({"analytics": ZONES}), encoding="utf-8")  # JSON is YAML
    out = tmp_path / "out"
    try:
        main(["run", f"cam={walking}", "-m", str(tiny_model), "--no-plan", "--track", "-c",
              str(config), "--no-video", "-o", str(out), "-q"])  # fmt: skip
    except SystemExit as exit_info:
        pytest.fail(f"exit {exit_info.code}: {capsys.readouterr().err}")
    analytics = json.loads((out / "summary.json").read_text(encoding="utf-8"))["analytics"]
    assert analytics["cam"]["lines"] == {"mid": {"in": 1, "out": 0}}
    assert analytics["cam"]["zones"]["bottom"]["count"] == {"person": 1}
