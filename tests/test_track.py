"""The tracker on synthetic moving boxes with known ids (crossings, detect-every-N, timestamp gaps,
eviction, a long run), and the MOTChallenge sink on hand-built results."""

from __future__ import annotations

import math
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import numpy.typing as npt
import pytest

from visionrt.config import pipeline_options
from visionrt.errors import ConfigError, SinkError
from visionrt.fuse import tracks as track
from visionrt.fuse.bytetrack import Tracker
from visionrt.fuse.ocsort import OcSortTracker
from visionrt.fuse.track_options import TrackOptions
from visionrt.fuse.tracks import match_boxes
from visionrt.postprocess.nms import box_iou
from visionrt.sinks.base import partial_path
from visionrt.sinks.mot import MotSink
from visionrt.types import Detections, Frame, FrameResult, TrackedDetections

FPS = 30.0
# Both trackers must pass the behaviour tests here; OC-SORT's own are in test_ocsort.py.
KINDS: dict[str, type[Tracker]] = {"bytetrack": Tracker, "ocsort": OcSortTracker}


@pytest.fixture(params=sorted(KINDS))
def tracker_class(request: pytest.FixtureRequest) -> type[Tracker]:
    return KINDS[str(request.param)]


def _dets(
    boxes: list[list[float]] | npt.NDArray[np.float64],
    conf: float | list[float] = 0.9,
    cls: int | list[int] = 0,
) -> Detections:
    xyxy = np.asarray(boxes, np.float32).reshape(-1, 4)
    count = xyxy.shape[0]
    return Detections(
        xyxy,
        np.broadcast_to(np.asarray(conf, np.float32), (count,)).copy(),
        np.broadcast_to(np.asarray(cls, np.int32), (count,)).copy(),
    )


def _box(cx: float, cy: float, w: float, h: float) -> list[float]:
    return [cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2]


@pytest.fixture(params=["hungarian", "greedy"])
def solver(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Runs a test with scipy's assignment and with the greedy fallback used without scipy."""
    if request.param == "hungarian" and track.linear_sum_assignment is None:
        pytest.skip("scipy is not installed: only the greedy matcher is in use")
    if request.param == "greedy":
        monkeypatch.setattr(track, "linear_sum_assignment", None)
    return str(request.param)


@pytest.mark.parametrize("detect_every", [1, 3])
def test_two_objects_crossing_at_different_speeds_keep_their_ids(
    solver: str, detect_every: int, tracker_class: type[Tracker]
) -> None:
    """A (fast, rightwards, in front) passes B (slow, leftwards); while they overlap the detector
    sees only A, so B must be carried through the occlusion by its motion."""
    rng = np.random.default_rng(7)
    tracker = tracker_class()
    ids_seen: set[int] = set()
    hidden = 0
    for i in range(90):
        t = i / FPS
        a_x, b_x = 50 + 240 * t, 500 - 90 * t
        if i % detect_every:
            out = tracker.predict(t)
        else:
            boxes = [_box(a_x, 200, 60, 120), _box(b_x, 210, 60, 120)]
            occluded = abs(a_x - b_x) < 50
            hidden += occluded
            noise = rng.uniform(-1.0, 1.0, (2, 4))
            detections = _dets((np.array(boxes) + noise)[: 1 if occluded else 2])
            out = tracker.update(detections, t)
        ids_seen.update(out.track_id.tolist())
        centre_x = (out.detections.xyxy[:, 0] + out.detections.xyxy[:, 2]) / 2
        expected = {1: a_x, 2: b_x}
        known = i > detect_every  # a predicted box moves once a second sighting gave a velocity
        for track_id, x in zip(out.track_id.tolist(), centre_x.tolist(), strict=True):
            if known or not out.predicted.any():
                assert x == pytest.approx(expected[track_id], abs=3.0), f"frame {i}: ids swapped"
        if i >= 48:  # both seen again at an update after the crossing (occluded till ~1.5 s)
            assert out.track_id.tolist() == [1, 2], f"frame {i}"
    assert hidden >= 3  # the occlusion did happen
    assert ids_seen == {1, 2}
    assert len(tracker) == 2


def test_detect_every_third_frame_predicts_the_motion_between(tracker_class: type[Tracker]) -> None:
    """Irregular timestamps (live jitter): prediction by seconds, not by frame count, is exact
    for constant motion once the second sighting gives the velocity."""
    rng = np.random.default_rng(3)
    stamps = np.cumsum(rng.uniform(0.02, 0.05, 60))
    tracker = tracker_class()

    def truth(t: float) -> list[float]:
        return _box(100 + 150 * t, 300 - 60 * t, 40 + 10 * t, 80 + 20 * t)

    worst = 0.0
    for i, t in enumerate(stamps.tolist()):
        if i % 3 == 0:
            out = tracker.update(_dets([truth(t)]), t)
            assert out.predicted.tolist() == [False]
        else:
            out = tracker.predict(t)
            assert out.predicted.tolist() == [True]
            assert out.detections.confidence.tolist() == pytest.approx([0.9])
            if i > 3:  # from the second update on the velocity is known
                worst = max(worst, float(np.abs(out.detections.xyxy[0] - truth(t)).max()))
        assert out.track_id.tolist() == [1]
    assert worst < 0.01  # pixels


def test_predicted_boxes_follow_noisy_motion_within_tolerance(tracker_class: type[Tracker]) -> None:
    rng = np.random.default_rng(11)
    tracker = tracker_class()
    errors = []
    for i in range(150):
        t = i / FPS
        truth = np.array(_box(80 + 200 * t, 240 + 50 * t, 50, 100))
        if i % 3 == 0:
            tracker.update(_dets(truth + rng.normal(0.0, 1.0, 4)), t)
        else:
            out = tracker.predict(t)
            assert out.track_id.tolist() == [1]
            if i > 30:
                errors.append(float(np.abs(out.detections.xyxy[0] - truth).max()))
    # σ = 1 px detector jitter; two frames of extrapolation at 200 px/s stay within a few px.
    assert max(errors) < 4.0
    assert float(np.mean(errors)) < 1.5


def test_a_dropped_half_second_keeps_ids_when_the_motion_continues(
    tracker_class: type[Tracker],
) -> None:
    tracker = tracker_class()

    def boxes(t: float) -> list[list[float]]:
        # 50 px wide boxes moving 200 px/s: 100 px in the gap, no overlap without prediction.
        return [_box(100 + 200 * t, 100, 50, 50), _box(900 - 200 * t, 400, 50, 50)]

    stamps = [i / FPS for i in range(30)] + [1.5 + i / FPS for i in range(30)]
    for t in stamps:
        out = tracker.update(_dets(boxes(t)), t)
        assert out.track_id.tolist() == [1, 2], f"t={t:.3f}"
    assert len(tracker) == 2


@pytest.mark.parametrize(
    ("absent_seconds", "expected_ids"),
    [(0.9, [1]), (1.1, [2])],
    ids=["recovered-within-lost_seconds", "evicted-after-lost_seconds"],
)
def test_a_track_unseen_longer_than_lost_seconds_is_evicted(
    absent_seconds: float, expected_ids: list[int], tracker_class: type[Tracker]
) -> None:
    tracker = tracker_class(TrackOptions(lost_seconds=1.0))
    still = _dets([_box(200, 200, 60, 60)])
    for i in range(10):
        tracker.update(still, i / FPS)
    last_seen = 9 / FPS
    t = last_seen
    while t + 1 / FPS < last_seen + absent_seconds:
        t += 1 / FPS
        assert len(tracker.update(Detections.empty(), t)) == 0
    assert len(tracker) == (1 if absent_seconds < 1.0 else 0)
    out = tracker.update(still, last_seen + absent_seconds)
    assert out.track_id.tolist() == expected_ids


def test_memory_stays_flat_over_ten_thousand_frames(tracker_class: type[Tracker]) -> None:
    rng = np.random.default_rng(5)
    tracker = tracker_class(TrackOptions(lost_seconds=0.5))
    objects: list[tuple[int, int, float, float, float, float]] = []  # start, end, x, y, vx, vy
    most = 0
    ids: set[int] = set()
    for i in range(10_000):
        if i % 8 == 0:  # a new object every 8 frames, living 20–80 frames
            position = rng.uniform(100, 3900, 2)
            velocity = rng.uniform(-150, 150, 2)
            objects.append((i, i + int(rng.integers(20, 80)), *position, *velocity))
        objects = [o for o in objects if o[1] > i]
        t = i / FPS
        boxes = [
            _box(x + vx * (t - start / FPS), y + vy * (t - start / FPS), 40, 40)
            for start, _, x, y, vx, vy in objects
        ]
        out = tracker.update(_dets(boxes), t) if i % 2 == 0 else tracker.predict(t)
        ids.update(out.track_id.tolist())
        most = max(most, len(tracker))
    # ≤ 10 objects alive at once plus ≤ 0.5 s (15 frames, ≤ 2 objects) of lost ones.
    assert most <= 13
    assert len(ids) >= 1200  # each of the 1,250 objects got its own id, none reused
    tracker.update(Detections.empty(), 10_000 / FPS + 1.0)
    assert len(tracker) == 0


def test_low_confidence_detections_extend_tracks_but_never_create_them(
    tracker_class: type[Tracker],
) -> None:
    tracker = tracker_class(TrackOptions(high=0.5, low=0.1, lost_seconds=0.5))
    box = _box(300, 300, 80, 80)
    assert len(tracker.update(_dets([box], conf=0.3), 0.0)) == 0
    assert len(tracker) == 0
    tracker.update(_dets([box], conf=0.8), 0.1)
    for i in range(2, 20):  # 1.8 s on low-confidence sightings alone, > lost_seconds
        out = tracker.update(_dets([box], conf=0.3), i / 10)
        assert out.track_id.tolist() == [1]
        assert out.detections.confidence.tolist() == pytest.approx([0.3])
    out = tracker.update(_dets([box], conf=0.05), 2.0)  # below `low`: ignored
    assert len(out) == 0
    assert len(tracker) == 1  # lost, not yet evicted


def test_empty_detections_and_a_fresh_tracker(tracker_class: type[Tracker]) -> None:
    tracker = tracker_class()
    for out in (tracker.predict(0.0), tracker.update(Detections.empty(), 0.1)):
        assert len(out) == 0
        assert out.track_id.dtype == np.int64
        assert out.predicted.dtype == np.bool_
        assert out.detections.xyxy.shape == (0, 4)


def test_a_class_change_keeps_the_track_unless_per_class(tracker_class: type[Tracker]) -> None:
    box, moved = _box(100, 100, 50, 50), _box(104, 100, 50, 50)
    tracker = tracker_class()  # a person going from Normal (0) to Fall (1) stays one track
    assert tracker.update(_dets([box], cls=0), 0.0).track_id.tolist() == [1]
    out = tracker.update(_dets([moved], cls=1), 1 / FPS)
    assert out.track_id.tolist() == [1]
    assert out.detections.class_id.tolist() == [1]
    assert tracker.predict(1.5 / FPS).detections.class_id.tolist() == [1]  # the latest class
    assert len(tracker) == 1

    tracker = tracker_class(TrackOptions(per_class=True))
    assert tracker.update(_dets([box], cls=0), 0.0).track_id.tolist() == [1]
    out = tracker.update(_dets([moved], cls=2), 1 / FPS)
    assert out.track_id.tolist() == [2]
    assert out.detections.class_id.tolist() == [2]
    assert len(tracker) == 2  # the class-0 track is lost, not taken over


def test_min_hits_holds_back_tracks_and_drops_one_frame_blips(tracker_class: type[Tracker]) -> None:
    tracker = tracker_class(min_hits=2)
    box = _box(100, 100, 50, 50)
    blip = _box(600, 600, 50, 50)
    assert len(tracker.update(_dets([box, blip]), 0.0)) == 0
    assert len(tracker.predict(0.5 / FPS)) == 0
    assert tracker.update(_dets([box]), 1 / FPS).track_id.tolist() == [1]
    assert len(tracker) == 1  # the blip missed its second sighting and is gone


def test_time_going_backwards_starts_a_new_timeline_with_new_ids(
    tracker_class: type[Tracker],
) -> None:
    tracker = tracker_class()
    box = _dets([_box(100, 100, 50, 50)])
    tracker.update(box, 5.0)
    assert tracker.update(box, 0.0).track_id.tolist() == [2]
    assert len(tracker) == 1


def _crossing_path(frames: int) -> list[Detections]:
    """Two boxes passing each other, and a third that appears later: tracks that end and
    tracks that start."""
    path = []
    for i in range(frames):
        boxes = [_box(100 + 6 * i, 100, 40, 40), _box(400 - 4 * i, 110, 40, 40)]
        if i >= 20:
            boxes.append(_box(250, 300, 40, 40))
        path.append(_dets(boxes))
    return path


def test_a_tracker_resumed_from_its_checkpoint_goes_on_as_if_it_had_not_stopped(
    tracker_class: type[Tracker],
) -> None:
    """Issue #32, item 1: a cluster's retried source started a fresh tracker, ids from 1
    again. A tracker resumed from another's checkpoint gives the same ids and boxes after it
    as the one that never stopped, and a track it starts takes the next id."""
    path = _crossing_path(40)
    whole = tracker_class()
    expected = [whole.update(dets, i / FPS) for i, dets in enumerate(path)]
    first = tracker_class()
    for i, dets in enumerate(path[:25]):
        first.update(dets, i / FPS)
    saved = first.checkpoint()
    first.update(path[25], 25 / FPS)  # the one it was taken from goes on: the state is a copy
    resumed = tracker_class()
    resumed.resume(saved)
    for i, dets in enumerate(path[25:], start=25):
        got = resumed.update(dets, i / FPS)
        assert got.track_id.tolist() == expected[i].track_id.tolist()
        np.testing.assert_array_equal(got.detections.xyxy, expected[i].detections.xyxy)
    assert resumed.update(_dets([_box(600, 600, 40, 40)]), 2.0).track_id.tolist() == [4]


def test_a_resumed_stream_whose_clock_starts_again_ends_its_tracks_and_never_reuses_ids(
    tracker_class: type[Tracker],
) -> None:
    """A live stream's retry opens it again, its timestamps from 0: the checkpoint's tracks
    end there (a gap no one read), and the ids go on."""
    tracker = tracker_class()
    for i, dets in enumerate(_crossing_path(30)):
        tracker.update(dets, 10.0 + i / FPS)
    resumed = tracker_class()
    resumed.resume(tracker.checkpoint())
    assert resumed.update(_dets([_box(100, 100, 40, 40)]), 0.0).track_id.tolist() == [4]
    assert len(resumed) == 1


@pytest.mark.parametrize(
    "options",
    [
        {"high": 0.3, "low": 0.5},
        {"low": -0.1},
        {"match_iou": 0.0},
        {"low_match_iou": 1.5},
        {"lost_seconds": -1.0},
        {"lost_seconds": math.inf},
        {"min_hits": 0},
    ],
)
def test_invalid_options_are_config_errors(
    options: dict[str, float], tracker_class: type[Tracker]
) -> None:
    """The tracker's own options (`TrackOptions`) and each tracker's tuning, checked alike."""
    own = {k: v for k, v in options.items() if k in ("min_hits", "low_match_iou")}
    shared = {k: v for k, v in options.items() if k not in own}
    with pytest.raises(ConfigError, match="tracker: expected"):
        tracker_class(TrackOptions(**shared), **own)  # type: ignore[arg-type]


def test_a_non_finite_timestamp_is_a_config_error(tracker_class: type[Tracker]) -> None:
    with pytest.raises(ConfigError, match="finite timestamp"):
        tracker_class().update(Detections.empty(), math.nan)


def test_box_iou_on_hand_cases() -> None:
    a = np.array([[0, 0, 10, 10], [0, 0, 0, 0]], np.float32)
    b = np.array([[0, 0, 10, 10], [5, 0, 15, 10], [20, 20, 30, 30]], np.float32)
    expected = [[1.0, 50 / 150, 0.0], [0.0, 0.0, 0.0]]
    np.testing.assert_allclose(box_iou(a, b), expected, rtol=1e-12)


def test_optimal_and_greedy_matching_differ_where_greedy_is_short_sighted() -> None:
    iou = np.array([[0.9, 0.8], [0.85, 0.0]])
    rows, cols = match_boxes(iou, 0.3, optimal=False)
    assert list(zip(rows.tolist(), cols.tolist(), strict=True)) == [(0, 0)]
    if track.linear_sum_assignment is None:
        pytest.skip("scipy is not installed: the optimal matcher is not in use")
    rows, cols = match_boxes(iou, 0.3)
    assert sorted(zip(rows.tolist(), cols.tolist(), strict=True)) == [(0, 1), (1, 0)]
    rows, cols = match_boxes(np.array([[0.2, 0.29]]), 0.3)
    assert rows.size == cols.size == 0


def test_tracked_detections_validates_its_arrays() -> None:
    with pytest.raises(ConfigError, match=r"track_id: expected a \(1,\) int64 array"):
        TrackedDetections(_dets([[0, 0, 1, 1]]), np.zeros(1, np.int32), np.zeros(1, bool))
    with pytest.raises(ConfigError, match=r"predicted: expected a \(1,\) bool array"):
        TrackedDetections(_dets([[0, 0, 1, 1]]), np.zeros(1, np.int64), np.zeros(2, bool))


def _tracked_result(index: int, source_id: int = 0, tracked: bool = True) -> SimpleNamespace:
    tracks = TrackedDetections(
        _dets([[10, 20, 40, 60], [0.5, 1.25, 100.5, 51.25]], conf=[0.9, 0.123456]),
        np.array([3, 7], np.int64),
        np.array([False, True]),
    )
    frame = SimpleNamespace(index=index, source_id=source_id)
    return SimpleNamespace(frame=frame, tracks=tracks if tracked else None)


def test_mot_sink_writes_motchallenge_lines(tmp_path: Path) -> None:
    path = tmp_path / "out" / "seq.txt"
    sink = MotSink(path)
    plain = FrameResult(Frame(0, 0, np.zeros((4, 4, 3), np.uint8), 0.0, 0.0), _dets([]), {})
    sink.write(plain)  # no `tracks` field: skipped
    sink.write(_tracked_result(0, tracked=False))  # tracks None: skipped
    assert not partial_path(path).exists()
    sink.write(_tracked_result(0))  # type: ignore[arg-type]
    sink.write(_tracked_result(4))  # type: ignore[arg-type]
    assert partial_path(path).exists()
    assert not path.exists()
    assert sink.close() == [path]
    assert path.read_text(encoding="utf-8").splitlines() == [
        "1,3,10.00,20.00,30.00,40.00,0.9000,-1,-1,-1",
        "1,7,0.50,1.25,100.00,50.00,0.1235,-1,-1,-1",
        "5,3,10.00,20.00,30.00,40.00,0.9000,-1,-1,-1",
        "5,7,0.50,1.25,100.00,50.00,0.1235,-1,-1,-1",
    ]
    assert sink.close() == []


def test_mot_sink_keeps_one_source(tmp_path: Path) -> None:
    only_one = MotSink(tmp_path / "one.txt", source_id=1)
    only_one.write(_tracked_result(0, source_id=0))  # type: ignore[arg-type]
    only_one.write(_tracked_result(0, source_id=1))  # type: ignore[arg-type]
    assert only_one.close(complete=False) == [partial_path(tmp_path / "one.txt")]
    assert partial_path(tmp_path / "one.txt").read_text(encoding="utf-8").count("\n") == 2

    mixed = MotSink(tmp_path / "mixed.txt")
    mixed.write(_tracked_result(0, source_id=0))  # type: ignore[arg-type]
    with pytest.raises(SinkError, match="holds one source, got source 1 after source 0"):
        mixed.write(_tracked_result(0, source_id=1))  # type: ignore[arg-type]
    mixed.close()
    with pytest.raises(SinkError, match="write after close"):
        mixed.write(_tracked_result(1))  # type: ignore[arg-type]


def test_mot_sink_without_tracked_results_leaves_nothing(tmp_path: Path) -> None:
    sink = MotSink(tmp_path / "none.txt")
    sink.write(_tracked_result(0, tracked=False))  # type: ignore[arg-type]
    assert sink.close() == []
    assert list(tmp_path.iterdir()) == []


def test_pipeline_tracker_options_reach_the_trackers(tiny_model: Path) -> None:
    from visionrt import Pipeline
    from visionrt.fuse import TrackFuser
    from visionrt.pipeline.build import build_fusers

    options = pipeline_options(track=True, track_match_iou=0.15, track_lost_seconds=2.5)
    pipeline = Pipeline(["a=synthetic:32x32:2", "b=synthetic:32x32:2"], tiny_model, "null",
                        options=replace(options, warmup=0))  # fmt: skip
    fusers = build_fusers(pipeline.parts, pipeline.options)
    pipeline.close()
    trackers = [step.tracker for steps in fusers for step in steps if isinstance(step, TrackFuser)]
    assert [(t.match_iou, t.lost_seconds) for t in trackers] == [(0.15, 2.5)] * 2
    with pytest.raises(ConfigError, match=r"tracking\.match_iou: expected 0 < IoU <= 1"):
        pipeline_options(track=True, track_match_iou=0)


def test_scipy_is_imported_only_when_tracking_matches() -> None:
    """scipy.optimize takes a quarter of a second to import: every run, worker and command
    that loads the pipeline paid it, tracking or not."""
    code = "import sys, visionrt.pipeline; print('scipy' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
