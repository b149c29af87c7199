"""Zones and lines on tracks (issue #20's analytics): counts per class inside a zone, time in it
per track, crossings per direction once each, a track that jitters on a line, the config's
checks, and a run that writes them to the JSONL and counts them as events."""

from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np
import pytest

from visionrt import Pipeline, PipelineOptions
from visionrt.errors import ConfigError
from visionrt.fuse import AnalyticsFuser, Fused, parse_analytics
from visionrt.types import Detections, Frame, TrackedDetections

NAMES = ("person", "car")


def fused_at(t: float, boxes: dict[int, tuple[float, float, int]]) -> Fused:
    """A frame at video time `t` whose tracks stand with their feet at (x, y): 20×40 boxes."""
    ids = sorted(boxes)
    xyxy = np.array([[x - 10, y - 40, x + 10, y] for x, y, _ in (boxes[i] for i in ids)])
    detections = Detections(
        xyxy.astype(np.float32).reshape(-1, 4),
        np.full(len(ids), 0.9, np.float32),
        np.array([boxes[i][2] for i in ids], np.int32),
    )
    frame = Frame(0, round(t * 10), np.zeros((10, 10, 3), np.uint8), t, 0.0)
    tracks = TrackedDetections(detections, np.array(ids, np.int64), np.zeros(len(ids), np.bool_))
    return Fused(frame, {}, detections, tracks=tracks)


def run(fuser: AnalyticsFuser, path: list[dict[int, tuple[float, float, int]]]) -> list[Fused]:
    frames = [fused_at(i / 10, boxes) for i, boxes in enumerate(path)]
    for fused in frames:
        fuser.fuse(fused)
    return frames


def line_fuser() -> AnalyticsFuser:
    # A horizontal line from (100, 200) to (300, 200): "in" is downwards (right of a→b, y down).
    config = parse_analytics({"cam": {"lines": {"gate": [[100, 200], [300, 200]]}}})
    return AnalyticsFuser(config["cam"], NAMES)


def test_a_track_that_crosses_twice_counts_once_each_way() -> None:
    ys = [150, 180, 195, 210, 240, 260, 230, 190, 150]  # down across, then back up
    frames = run(line_fuser(), [{7: (200, y, 0)} for y in ys])
    assert frames[-1].analytics["lines"]["gate"] == {"in": 1, "out": 1}
    events = [e.label for f in frames for e in f.events]
    assert events == ["line gate: in", "line gate: out"]
    # The frame it was first past the line, with the track and its class.
    assert [(e.label, e.track_id, e.class_name) for e in frames[3].events] == [
        ("line gate: in", 7, NAMES[0])
    ]


def test_a_track_jittering_on_the_line_does_not_count() -> None:
    ys = [150, 198, 202, 197, 203, 199, 201, 150]  # within the dead band, then back where it was
    frames = run(line_fuser(), [{3: (200, y, 0)} for y in ys])
    assert frames[-1].analytics["lines"]["gate"] == {"in": 0, "out": 0}
    assert not [e for f in frames for e in f.events]


def test_passing_beside_the_segment_is_not_a_crossing_and_tracks_count_apart() -> None:
    path = [{1: (50, y, 0), 2: (200, y, 0)} for y in (150, 250)]  # track 1 passes left of it
    frames = run(line_fuser(), path)
    assert frames[-1].analytics["lines"]["gate"] == {"in": 1, "out": 0}


def test_a_zone_counts_per_class_and_times_each_stay() -> None:
    config = parse_analytics({"cam": {"zones": {"door": [[0, 0], [100, 0], [100, 100], [0, 100]]}}})
    fuser = AnalyticsFuser(config["cam"], NAMES)
    inside, outside = (50, 50), (200, 50)
    path = [
        {1: (*inside, 0), 2: (*inside, 1), 3: (*outside, 0)},  # 1 starts inside: it entered
        {1: (*inside, 0), 2: (*inside, 1), 3: (*outside, 0)},
        {1: (*outside, 0), 2: (*inside, 1), 3: (*inside, 0)},  # 1 leaves, 3 enters
        {1: (*inside, 0), 2: (*inside, 1), 3: (*inside, 0)},  # 1 is back
    ]
    frames = run(fuser, path)
    assert frames[0].analytics["zones"]["door"]["count"] == {"person": 1, "car": 1}
    assert sorted(e.label for e in frames[0].events) == ["zone door: enter"] * 2
    assert sorted(e.label for e in frames[2].events) == ["zone door: enter", "zone door: leave"]
    last = frames[-1].analytics["zones"]["door"]
    assert last["count"] == {"person": 2, "car": 1}
    # Track 1: 0.2 s inside (0.0-0.2), out at 0.2, back at 0.3: 0.2 s so far. Track 2: 0.3 s.
    assert last["seconds"] == {
        "1": pytest.approx(0.2),
        "2": pytest.approx(0.3),
        "3": pytest.approx(0.1),
    }


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (
            {"cam": {"zones": {"z": [[0, 0], [1, 1]]}}},
            r"analytics.cam.zones.z: expected at least 3",
        ),
        (
            {"cam": {"lines": {"l": [[5, 5], [5, 5]]}}},
            r"analytics.cam.lines.l: expected two different",
        ),
        (
            {"cam": {"lines": {"l": [[0, 0], [1, 1], [2, 2]]}}},
            r"analytics.cam.lines.l: expected 2 \[x",
        ),
        ({"cam": {"zones": {"z": [[0, 0], [-1, 5], [4, 4]]}}}, r"finite pixel coordinates >= 0"),
        ({"cam": {"areas": {}}}, r"analytics.cam: expected `zones` and/or `lines`"),
        ({"cam": {"zones": [[0, 0]]}}, r"analytics.cam.zones: expected names mapped to points"),
    ],
)
def test_bad_zones_and_lines_are_one_line_each(config: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_analytics(config)


def test_a_run_writes_zone_counts_and_counts_the_events(tmp_path: Path, tiny_model: Path) -> None:
    for i in range(4):
        cv2.imwrite(str(tmp_path / f"img{i}.png"), np.full((480, 640, 3), 60 + i * 20, np.uint8))
    # The tiny detector's box stands at (320, 290) in a 640×480 frame (its feet).
    zones = {"cam": {"zones": {"middle": [[200, 200], [440, 200], [440, 400], [200, 400]]},
                     "lines": {"far": [[0, 10], [600, 10]]}}}  # fmt: skip
    options = PipelineOptions(warmup=0, track=True)
    with pytest.raises(ConfigError, match="analytics: no source named 'cam'"):
        Pipeline([str(tmp_path)], tiny_model, "onnxruntime", options=options, analytics=zones)
    with pytest.raises(ConfigError, match="add --track"):
        Pipeline([f"cam={tmp_path}"], tiny_model, "onnxruntime", analytics=zones)
    pipeline = Pipeline(
        [f"cam={tmp_path}"], tiny_model, "onnxruntime", options=options, analytics=zones
    )
    results = list(pipeline)
    pipeline.close()
    line = json.loads(json.dumps(results[-1].to_json()))
    assert line["analytics"]["zones"]["middle"]["count"] == {"person": 1}
    assert line["analytics"]["lines"]["far"] == {"in": 0, "out": 0}
    summary = pipeline.summary()
    assert summary.events["zone middle: enter"] == 1
    assert "zone middle: leave" not in summary.events


def test_the_run_config_reads_zones_and_lines_and_checks_them(tmp_path: Path) -> None:
    from visionrt.config import load_config

    path = tmp_path / "run.yaml"
    path.write_text(
        "analytics:\n  cam:\n    zones:\n      door: [[0, 0], [10, 0], [10, 10]]\n",
        encoding="utf-8",
    )
    cfg = load_config(path, ["analytics.cam.lines.gate=[[0, 5], [10, 5]]"])
    assert cfg.analytics == {
        "cam": {
            "zones": {"door": [[0, 0], [10, 0], [10, 10]]},
            "lines": {"gate": [[0, 5], [10, 5]]},
        }
    }
    with pytest.raises(ConfigError, match=r"analytics.cam.lines.gate: expected 2 \[x, y\] points"):
        load_config(path, ["analytics.cam.lines.gate=[[0, 5]]"])
