"""The scheduler: which lanes run on each frame, or why the frame is dropped."""

from __future__ import annotations

from visionrt.config import pipeline_options
from visionrt.config.pipeline import PipelineOptions
from visionrt.pipeline.degrade import Degrader, Rung
from visionrt.pipeline.schedule import Decision, Scheduler


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_every_frame_runs_its_sources_lanes() -> None:
    scheduler = Scheduler([[0, 1], [0]], PipelineOptions(), [False, False])
    assert scheduler.decide(0, age=100.0) == Decision((0, 1), full=True)  # file mode: no age
    assert scheduler.decide(1, age=0.0) == Decision((0,), full=True)


def test_a_stale_live_frame_is_dropped() -> None:
    scheduler = Scheduler([[0]], PipelineOptions(stale_after=0.5), [True])
    assert scheduler.decide(0, age=0.4) == Decision((0,), full=True)
    assert scheduler.decide(0, age=0.6) == Decision(dropped="older than 0.5s")


def test_detect_every_n_with_tracking_runs_the_detector_on_every_nth_frame() -> None:
    options = pipeline_options(track=True, detect_every=3)
    scheduler = Scheduler([[0, 1], [0]], options, [False, False])
    first = [scheduler.decide(0, 0.0).lanes for _ in range(7)]
    # The detector (lane 0) on frames 0, 3, 6; depth (lane 1) on every frame.
    assert first == [(0, 1), (1,), (1,), (0, 1), (1,), (1,), (0, 1)]
    # Each source keeps its own count.
    assert [scheduler.decide(1, 0.0).lanes for _ in range(4)] == [(0,), (), (), (0,)]


def test_depth_every_n_runs_depth_on_every_nth_frame_of_each_source() -> None:
    scheduler = Scheduler([[0, 1], [0], [0, 1]], PipelineOptions(), [False] * 3, depth_every=3)
    assert [scheduler.decide(0, 0.0).lanes for _ in range(7)] == [
        (0, 1), (0,), (0,), (0, 1), (0,), (0,), (0, 1),
    ]  # fmt: skip
    assert [scheduler.decide(1, 0.0).lanes for _ in range(2)] == [(0,), (0,)]  # no depth
    assert scheduler.decide(2, 0.0).lanes == (0, 1)  # its own count
    scheduler.add_source([0, 1], live=False)  # a camera added: depth on its first frame
    assert [scheduler.decide(3, 0.0).lanes for _ in range(4)] == [(0, 1), (0,), (0,), (0, 1)]
    # With tracking between detections, each keeps its own count.
    tracked = Scheduler([[0, 1]], pipeline_options(track=True, detect_every=2), [False],
                        depth_every=3)  # fmt: skip
    assert [tracked.decide(0, 0.0).lanes for _ in range(6)] == [
        (0, 1), (), (0,), (1,), (0,), (),
    ]  # fmt: skip


def test_the_ladder_thins_frames_without_tracking_and_swaps_in_a_variant() -> None:
    clock = Clock()
    rungs = [Rung(1, 0, "as configured"), Rung(2, 0, "every 2"), Rung(2, 1, "input 512")]
    degrader = Degrader(0.1, rungs, window=1.0, clock=clock)
    scheduler = Scheduler([[0, 1]], PipelineOptions(), [True], degrader, variants=[2])
    assert scheduler.decide(0, 0.0) == Decision((0, 1), full=True)
    for _ in range(5):  # observed latencies reach the ladder: five late frames step down
        scheduler.observe(1.0)
    assert degrader.rung.label == "every 2"
    degrader.level = 2
    decisions = [scheduler.decide(0, 0.0) for _ in range(4)]
    kept = [d for d in decisions if not d.dropped]
    assert [d.dropped for d in decisions].count("slo: 1 frame in 2") == 2
    assert all(d.lanes == (2, 1) for d in kept)  # variant lane 2 in place of the detector


def test_the_ladders_first_step_turns_motion_gating_on() -> None:
    clock = Clock()
    rungs = [Rung(1, 0, "as configured"), Rung(1, 0, "motion skip", "skip")]
    degrader = Degrader(0.1, rungs, window=1.0, clock=clock)
    scheduler = Scheduler([[0]], pipeline_options(motion_refresh=2.0), [True], degrader)
    assert scheduler.decide(0, 0.0, 0.0, moved=False).full
    assert scheduler.decide(0, 0.0, 0.5, moved=False).full  # gating is off on this rung
    degrader.level = 1
    assert scheduler.decide(0, 0.0, 1.0, moved=False).reused
    assert scheduler.decide(0, 0.0, 1.5, moved=True).full
    assert scheduler.decide(0, 0.0, 3.4, moved=False).reused
    assert scheduler.decide(0, 0.0, 3.5, moved=False).full  # the refresh still holds
