"""The stage graph's parts: per-source inboxes (round-robin batches, live eviction that stays
within a source), source names, and several sources through one pipeline with per-source
accounting and batches that mix cameras."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from conftest import HANG_SECONDS, until, write_video

from visionrt import BackendOptions, Pipeline, PipelineOptions, SourceOptions
from visionrt.config import pipeline_options
from visionrt.errors import ConfigError
from visionrt.fuse.track_options import TrackingOptions
from visionrt.pipeline import inbox
from visionrt.pipeline.inbox import Inboxes
from visionrt.sources.naming import default_name, split_name, unique_names


def _inboxes(capacity: int = 4) -> Inboxes[str]:
    return Inboxes(capacity, threading.Event())


def test_take_is_round_robin_across_sources() -> None:
    box = _inboxes()
    for i in range(3):
        box.put(0, f"a{i}", live=False)
    box.put(1, "b0", live=False)
    box.put(2, "c0", live=False)
    assert box.take(4) == ["a0", "b0", "c0", "a1"]
    # The next batch starts after the last source served: a1 came from source 0, so source 1
    # is first again, but it is empty now.
    box.put(1, "b1", live=False)
    assert box.take(2) == ["b1", "a2"]


def test_live_eviction_never_touches_another_source() -> None:
    box = _inboxes(capacity=1)
    evicted: list[str] = []
    box.put(0, "slow0", live=True, on_evict=evicted.append)
    for i in range(5):  # a fast camera floods its own inbox
        box.put(1, f"fast{i}", live=True, on_evict=evicted.append)
    assert evicted == ["fast0", "fast1", "fast2", "fast3"]
    assert sorted(box.take(8)) == ["fast4", "slow0"]


def _conditions(
    monkeypatch: pytest.MonkeyPatch, make: Callable[[Any], threading.Condition]
) -> None:
    """The inbox makes its conditions with `make(lock)` (its consumers' and each source's)."""
    fake = SimpleNamespace(Condition=make, RLock=threading.RLock, Event=threading.Event)
    monkeypatch.setattr(inbox, "threading", fake)


def _counted_conditions(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The inbox's conditions, in the order it makes them, each counting its wake-ups
    (`notified`: one per notify, 100 per notify_all)."""
    made: list[Any] = []

    class Counted(threading.Condition):
        def __init__(self, lock: Any) -> None:
            super().__init__(lock)
            self.notified = 0
            made.append(self)

        def notify(self, n: int = 1) -> None:
            self.notified += 1
            super().notify(n)

        def notify_all(self) -> None:
            self.notified += 100
            super().notify_all()

    _conditions(monkeypatch, Counted)
    return made


class _WatchedCondition(threading.Condition):
    """An inbox condition telling the test when a thread waits on it."""

    waiting = threading.Event()  # any of them

    def wait(self, timeout: float | None = None) -> bool:
        self.waiting.set()
        return super().wait(timeout)


class _FakeClock:
    """The inbox's conditions on a fake clock: a wait takes no real time, advances the clock
    by its timeout (or to the next scripted arrival, which it then makes) and returns."""

    def __init__(self, arrivals: dict[float, Callable[[], object]]) -> None:
        self.now = 0.0
        self.arrivals = dict(arrivals)

    def monotonic(self) -> float:
        return self.now

    def condition(self, lock: Any) -> threading.Condition:
        clock = self

        class Waits(threading.Condition):
            def wait(self, timeout: float | None = None) -> bool:
                assert timeout is not None, "an inbox wait without a timeout would hang the test"
                due = min((t for t in clock.arrivals if t <= clock.now + timeout), default=None)
                if due is None:
                    clock.now += timeout
                    return False
                clock.now = due
                clock.arrivals.pop(due)()  # the lock is re-entrant: the put takes it too
                return True

        return Waits(lock)


def test_file_mode_put_waits_for_room_and_nothing_is_lost(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _conditions(monkeypatch, _WatchedCondition)
    watched = _WatchedCondition
    watched.waiting = threading.Event()
    box = _inboxes(capacity=2)
    put: list[int] = []

    def produce() -> None:
        for i in range(6):
            box.put(0, str(i), live=False)
            put.append(i)
        box.close()

    producer = threading.Thread(target=produce)
    producer.start()
    # The first wait is the producer's, on the third item: nothing has been taken yet.
    assert watched.waiting.wait(timeout=HANG_SECONDS), "the producer never waited for room"
    assert put == [0, 1]  # blocked on the full inbox
    taken: list[str] = []
    while batch := box.take(3):
        taken += batch
    producer.join(30)
    assert not producer.is_alive()
    assert taken == [str(i) for i in range(6)]


def test_a_take_wakes_only_the_producers_it_made_room_for(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    made = _counted_conditions(monkeypatch)
    box = _inboxes(capacity=2)
    for source in range(8):  # 8 cameras' inboxes full
        box.put(source, f"{source}a", live=False)
        box.put(source, f"{source}b", live=False)
    ready, any_room, rooms = made[0], made[1], made[2:]
    assert ready.notified == 0  # no consumer was waiting: nobody to wake
    assert len(rooms) == 8
    assert box.take(3) == ["0a", "1a", "2a"]
    assert [room.notified for room in rooms] == [1, 1, 1, 0, 0, 0, 0, 0]
    assert box.take(3) == ["3a", "4a", "5a"]
    assert box.take(3) == ["6a", "7a", "0b"]  # 0 had room already: its producer is not woken
    assert [room.notified for room in rooms] == [1] * 8
    assert any_room.notified == 0  # no producer of several sources waited


def test_a_put_wakes_a_waiting_consumer_and_only_then(monkeypatch: pytest.MonkeyPatch) -> None:
    made = _counted_conditions(monkeypatch)
    box = _inboxes(capacity=4)
    taken: list[list[str]] = []
    consumer = threading.Thread(target=lambda: taken.append(box.take(1)))
    consumer.start()
    until(lambda: len(box._needs) == 1, "the consumer waiting")
    box.put(0, "a", live=False)
    consumer.join(HANG_SECONDS)
    assert taken == [["a"]]
    assert made[0].notified == 1
    box.put(0, "b", live=False)  # nobody waits now
    assert made[0].notified == 1


def test_a_batcher_is_woken_once_its_batch_could_be_there(monkeypatch: pytest.MonkeyPatch) -> None:
    made = _counted_conditions(monkeypatch)
    box = _inboxes(capacity=8)
    box.put(0, "a", live=False)
    taken: list[list[str]] = []
    consumer = threading.Thread(target=lambda: taken.append(box.take(3, wait=HANG_SECONDS)))
    consumer.start()
    until(lambda: box._needs == [2], "the batcher waiting for two more")
    box.put(1, "b", live=False)
    assert made[0].notified == 0  # one of the two: not woken for it
    box.put(2, "c", live=False)
    consumer.join(HANG_SECONDS)
    assert taken == [["a", "b", "c"]]
    assert made[0].notified == 1


def test_take_waits_up_to_the_batch_wait_then_goes_with_what_is_there(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = _FakeClock({0.05: lambda: box.put(1, "b", live=False)})
    _conditions(monkeypatch, clock.condition)
    box = _inboxes()
    monkeypatch.setattr(inbox, "time", SimpleNamespace(monotonic=clock.monotonic))
    box.put(0, "a", live=False)
    assert box.take(3, wait=0.3) == ["a", "b"]  # b arrived in time; c never comes
    assert clock.now == pytest.approx(0.3)  # waited the whole batch wait for a third, no longer
    box.put(0, "c", live=False)
    assert box.take(3, wait=0.0) == ["c"]  # no wait: a stalled camera holds nobody up
    assert clock.now == pytest.approx(0.3)


def test_take_ends_on_close_and_on_abort() -> None:
    aborting = threading.Event()
    box: Inboxes[str] = Inboxes(2, aborting)
    box.put(0, "x", live=False)
    box.close()
    assert box.take(4) == ["x"]
    assert box.take(4) == []
    other: Inboxes[str] = Inboxes(1, aborting)
    other.put(0, "y", live=False)
    aborting.set()
    assert other.put(0, "z", live=False) is False  # full, and the run is aborting
    assert other.take(1) == []


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("rgb=cam0.mp4", ("rgb", "cam0.mp4")),
        ("slam_1=/dev/video2", ("slam_1", "/dev/video2")),
        ("rtsp://host/stream?user=a", ("", "rtsp://host/stream?user=a")),
        ("videos/a.mp4", ("", "videos/a.mp4")),
        ("=x.mp4", ("", "=x.mp4")),
    ],
)
def test_split_name(spec: str, expected: tuple[str, str]) -> None:
    assert split_name(spec) == expected


def test_a_file_whose_name_has_an_equals_sign_stays_a_path(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    Path("a=b.mp4").touch()
    assert split_name("a=b.mp4") == ("", "a=b.mp4")


def test_names_default_to_stems_and_must_be_unique() -> None:
    assert default_name("/data/vtest.avi", 0) == "vtest"
    assert default_name("/dev/video2", 1) == "video2"
    assert unique_names(["vtest", "vtest"], [False, False]) == ["vtest", "vtest-1"]
    assert unique_names(["rgb", "rgb"], [True, False]) == ["rgb", "rgb-1"]
    with pytest.raises(ConfigError, match="source name 'rgb' given twice"):
        unique_names(["rgb", "rgb"], [True, True])


def test_named_sources_are_accounted_per_source(tmp_path: Path, tiny_model: Path) -> None:
    a = write_video(tmp_path / "a.mp4", frames=12)
    b = write_video(tmp_path / "b.mp4", frames=7, width=96, height=96)
    pipeline = Pipeline([f"rgb={a}", str(b)], tiny_model, "onnxruntime")
    results = list(pipeline)
    pipeline.close()
    assert {r.frame.source_name for r in results if r.frame.source_id == 0} == {"rgb"}
    assert [r.to_json()["source"] for r in results if r.frame.source_id == 0][:1] == ["rgb"]
    summary = pipeline.summary()
    rows = {row["name"]: row for row in summary.sources}
    assert set(rows) == {"rgb", "b"}
    assert (rows["rgb"]["frames_in"], rows["rgb"]["frames_out"]) == (12, 12)
    assert (rows["b"]["frames_in"], rows["b"]["frames_out"]) == (7, 7)
    assert rows["rgb"]["spec"] == str(a)
    assert rows["rgb"]["latency_ms"]["p50"] > 0


def _results_and_detector_rows(pipeline: Pipeline) -> tuple[list[Any], list[int]]:
    """A run's results, and the rows of each batch its detector ran (the frames it detected)."""
    calls: list[int] = []
    infer = pipeline.task.infer

    def counting(rows):  # type: ignore[no-untyped-def]
        calls.append(len(rows))
        return infer(rows)

    pipeline.task.infer = counting  # type: ignore[method-assign]
    try:
        return list(pipeline), calls
    finally:
        pipeline.close()


def test_batches_mix_sources_and_every_frame_comes_out_in_order(tiny_model: Path) -> None:
    pipeline = Pipeline(
        ["synthetic:64x48:20", "synthetic:64x48:20", "synthetic:64x48:20"],
        tiny_model,
        "null",
        BackendOptions(batch=3, settings={"delay_ms": "15"}),
        options=PipelineOptions(warmup=0),
    )
    results, sizes = _results_and_detector_rows(pipeline)
    seen: dict[int, list[int]] = {0: [], 1: [], 2: []}
    for result in results:
        seen[result.frame.source_id].append(result.frame.index)
    assert all(indices == list(range(20)) for indices in seen.values())
    assert sum(sizes) == 60
    # Inference is the slow stage, so its inbox holds a frame of every camera: full batches.
    assert sizes.count(3) >= 15, sizes


def test_batch_wait_must_be_sane() -> None:
    with pytest.raises(ConfigError, match=r"pipeline\.batch_wait_ms"):
        PipelineOptions(batch_wait_ms=-1)


def test_live_sources_each_keep_getting_frames_through(tiny_model: Path) -> None:
    # Two 30 FPS cameras into a detector that manages ~40 FPS: frames are dropped, but each
    # camera's own and never all of one camera's.
    pipeline = Pipeline(
        ["synthetic:64x48:45", "synthetic:64x48:45"],
        tiny_model,
        "null",
        BackendOptions(settings={"delay_ms": "25"}),
        source_options=SourceOptions(mode="live"),
        options=PipelineOptions(warmup=0),
    )
    results = list(pipeline)
    pipeline.close()
    summary = pipeline.summary()
    assert summary.accounted
    for row in summary.sources:
        assert row["frames_in"] == row["frames_out"] + sum(row["dropped"].values())
        assert row["frames_out"] >= 10, row
    assert len(results) == summary.frames_out


def test_depth_runs_only_where_asked_and_gives_each_detection_a_distance(
    tmp_path: Path, tiny_model: Path
) -> None:
    from visionrt.models import depth_model_target
    from visionrt.pipeline import DepthOptions

    depth_model = depth_model_target()
    if not depth_model.is_file():
        pytest.skip(f"architecture-only depth model not built at {depth_model} (make setup)")
    a = write_video(tmp_path / "a.mp4", frames=4)
    b = write_video(tmp_path / "b.mp4", frames=3)
    pipeline = Pipeline(
        [f"rgb={a}", f"slam={b}"],
        tiny_model,
        "onnxruntime",
        depth=DepthOptions(depth_model, on=("rgb",), short_side=266),
    )
    results = list(pipeline)
    pipeline.close()
    assert pipeline.depth_sources() == [0]
    rgb = [r for r in results if r.frame.source_name == "rgb"]
    slam = [r for r in results if r.frame.source_name == "slam"]
    assert (len(rgb), len(slam)) == (4, 3)
    for result in rgb:
        assert result.depth is not None
        assert result.depth.values.shape == (96, 128)
        assert result.distance is not None
        assert result.distance.shape == (len(result.detections),)
        assert np.isfinite(result.distance).all()
    assert all(r.depth is None and r.distance is None for r in slam)
    assert pipeline.summary().backend["depth"]["architecture_only"] is True
    with pytest.raises(ConfigError, match="no source named 'nope'"):
        Pipeline([str(a)], tiny_model, "onnxruntime", depth=DepthOptions(depth_model, on=("nope",)))


def test_tracking_with_detect_every_n_boxes_every_frame(
    small_video: Path, tiny_model: Path
) -> None:
    pipeline = Pipeline(
        [str(small_video)],
        tiny_model,
        "onnxruntime",
        options=pipeline_options(track=True, detect_every=3),
    )
    results, calls = _results_and_detector_rows(pipeline)
    assert [r.frame.index for r in results] == list(range(40))
    assert sum(calls) == 14  # frames 0, 3, …, 39
    for result in results:
        assert result.tracks is not None
        assert result.tracks.track_id.tolist() == [1]
        assert result.tracks.predicted.tolist() == [result.frame.index % 3 != 0]
        # The tiny detector's box does not move: predictions stay on it.
        np.testing.assert_allclose(result.detections.xyxy, [[44, 38, 84, 58]], atol=0.5)
        row = result.to_json()["detections"][0]
        assert (row["track_id"], row["predicted"]) == (1, result.frame.index % 3 != 0)
    assert pipeline.summary().accounted


def test_detect_every_without_track_ids_still_boxes_every_frame(
    small_video: Path, tiny_model: Path
) -> None:
    """A plan's detect-every-N where the user asked for no tracking: the tracker's boxes on the
    frames between, and no box gets a track id."""
    tracking = TrackingOptions(detect_every=2, predict_between=True)
    options = PipelineOptions(tracking=tracking)
    pipeline = Pipeline([str(small_video)], tiny_model, "onnxruntime", options=options)
    results, calls = _results_and_detector_rows(pipeline)
    assert [r.frame.index for r in results] == list(range(40))
    assert sum(calls) == 20  # frames 0, 2, …, 38
    for result in results:
        assert result.tracks is None
        np.testing.assert_allclose(result.detections.xyxy, [[44, 38, 84, 58]], atol=0.5)
        assert "track_id" not in result.to_json()["detections"][0]
    assert pipeline.summary().accounted
    # At 1 in 1 no tracker runs: the detector's own boxes, as without the option.
    assert not TrackingOptions(predict_between=True).tracker_runs


def test_detect_every_needs_tracking() -> None:
    with pytest.raises(ConfigError, match="need tracking"):
        pipeline_options(detect_every=2)
    with pytest.raises(ConfigError, match=r"pipeline\.tracking\.detect_every: expected >= 1"):
        pipeline_options(track=True, detect_every=0)


def test_a_source_added_while_the_readers_start_is_read_once() -> None:
    """A service's camera added by the API while the service's readers start (issue #32's
    busy-machine run caught it): `start` went over the live list of threads, so it started the
    added source's reader a second time ('threads can only be started once'), the service's
    run raised and every later request failed. The add is made at that moment exactly: inside
    the first reader's start."""
    import threading

    from visionrt.pipeline.flow import Flow
    from visionrt.pipeline.inbox import Inboxes
    from visionrt.pipeline.readers import Readers
    from visionrt.sources import SourceOptions, open_source
    from visionrt.telemetry import Telemetry

    flow = Flow()
    first = open_source("synthetic:16x16:3", 0, SourceOptions())
    added = open_source("synthetic:16x16:3", 1, SourceOptions())
    ran: list[int] = []
    done = threading.Event()

    def guard(read: object, source_id: int, source: object) -> None:
        ran.append(source_id)
        if len(ran) == 2:
            done.set()

    class AddsOnStart(Readers):
        def _thread(self, source_id: int, source: object) -> threading.Thread:
            thread = super()._thread(source_id, source)  # type: ignore[arg-type]
            if source_id == 0:
                start = thread.start

                def start_and_add() -> None:  # the API's add, right as the readers start
                    readers.add(added, "b", True)
                    start()

                thread.start = start_and_add  # type: ignore[method-assign]
            return thread

    decoded: Inboxes[object] = Inboxes(4, flow.aborting)
    readers = AddsOnStart([first], ["a"], [True], decoded, Telemetry(), flow, guard, True)  # type: ignore[arg-type]
    readers.start()
    assert done.wait(30)
    assert sorted(ran) == [0, 1]  # each source's reader ran, once
    assert [t.name for t in readers.threads] == ["source-0", "source-1"]


def test_a_take_passes_over_a_source_that_is_not_ready_and_a_nudge_wakes_it() -> None:
    box = _inboxes()
    for i in range(2):
        box.put(0, f"a{i}", live=False)
        box.put(1, f"b{i}", live=False)
    blocked = {0}
    ready = lambda source: source not in blocked  # noqa: E731
    assert box.take(1, ready=ready) == ["b0"]
    assert box.take(1, ready=ready) == ["b1"]
    box.close()  # a's items still wait: a closed inbox ends only once drained
    taken: list[list[str]] = []
    consumer = threading.Thread(target=lambda: taken.append(box.take(1, ready=ready)))
    consumer.start()
    until(lambda: len(box._needs) == 1, "the consumer waiting for a ready source")
    blocked.clear()
    box.nudge()
    consumer.join(HANG_SECONDS)
    assert taken == [["a0"]]
    assert box.take(1, ready=ready) == ["a1"]
    assert box.take(1, ready=ready) == []


def test_a_take_that_makes_room_in_a_full_inbox_says_so() -> None:
    rooms: list[int] = []
    box: Inboxes[str] = Inboxes(2, threading.Event(), on_room=lambda: rooms.append(1))
    box.put(0, "a", live=False)
    assert box.take(1) == ["a"]
    assert rooms == []  # it had room before
    box.put(0, "b", live=False)
    box.put(0, "c", live=False)  # full now
    assert box.take(1) == ["b"]
    assert rooms == [1]


class _Lane:
    """A task for a graph of its own: rows of one byte; `infer` waits for `gate` (when given)
    before it answers, so the test holds the lane up as long as it likes."""

    batch = 1

    def __init__(self, name: str, gate: threading.Event | None = None) -> None:
        self.name, self.gate = name, gate
        self.backend = SimpleNamespace(concurrency=1)
        self.calls = 0

    def new_buffer(self) -> np.ndarray:
        return np.zeros((1, 1), np.uint8)

    def prepare(self, image: Any, buffer: Any, last: Any) -> None:
        return None

    def infer(self, rows: list[Any]) -> list[Any]:
        if self.gate is not None:
            assert self.gate.wait(HANG_SECONDS), "the test never opened the lane"
        self.calls += len(rows)
        return [None] * len(rows)

    def decode(self, output: Any, geometry: Any) -> Any:
        from visionrt.types import Detections

        return Detections.empty() if self.gate is None else "depth"

    def drain_events(self) -> dict[str, int]:
        return {}


def test_a_source_held_up_by_its_own_slow_lane_holds_up_no_other_source() -> None:
    """The seed scenario in file mode: the rgb camera's frames also go to depth, the slam
    camera's only to the detector. With depth held up, the slam camera's frames all come out;
    before, the one preprocess thread waited for room in depth's inbox for rgb, and every
    camera went at depth's pace."""
    from visionrt.pipeline.flow import Flow
    from visionrt.pipeline.graph import Graph
    from visionrt.pipeline.schedule import Scheduler
    from visionrt.pipeline.work import Inputs, Work
    from visionrt.sources import open_source
    from visionrt.telemetry import Telemetry

    frames = 12  # three times what depth's inbox holds
    sources = [open_source(f"synthetic:16x16:{frames}", i, SourceOptions()) for i in range(2)]
    options = PipelineOptions(warmup=0, queue_size=4)
    gate = threading.Event()
    detector, depth = _Lane("detect"), _Lane("depth", gate)
    errors: list[BaseException] = []
    flow = Flow()
    work = Work(
        [detector, depth],  # type: ignore[list-item]
        Scheduler([(0, 1), (0,)], options, [False, False]),
        [[], []],
        ["person"],
    )
    inputs = Inputs(sources, ["rgb", "slam"], [True, True])
    graph = Graph(inputs, work, options, Telemetry(), flow, errors.append)
    out: list[str] = []
    consumer = threading.Thread(target=lambda: out.extend(r.frame.source_name for r in graph.run()))
    consumer.start()
    try:
        until(lambda: out.count("slam") == frames, "the slam camera's frames all out", 120)
        assert out.count("rgb") == 0  # each waits for its depth map
        assert depth.calls == 0
    finally:
        gate.set()
        consumer.join(HANG_SECONDS)
        graph.finish()
        for source in sources:
            source.close()
    assert not errors
    assert (out.count("rgb"), out.count("slam")) == (frames, frames)


def test_a_service_that_starts_with_no_source_runs_the_first_one_added(demo_model: Path) -> None:
    # The preprocess thread takes a frame of each source at once: with none yet, still one.
    pipeline = Pipeline(
        [], demo_model, "null", options=pipeline_options(warmup=0), plan=False, service=True
    )
    results: list[Any] = []
    consumer = threading.Thread(target=lambda: results.extend(pipeline), daemon=True)
    consumer.start()
    try:
        until(lambda: pipeline.graph is not None, "the service running")
        assert pipeline.roster is not None
        pipeline.roster.add("first", "synthetic:64x48:12")
        until(lambda: len(results) == 12, "the added source's frames out")
    finally:
        pipeline.stop()
        consumer.join(HANG_SECONDS)
        pipeline.close()
    assert [r.frame.source_name for r in results] == ["first"] * 12
