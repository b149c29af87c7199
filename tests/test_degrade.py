"""The SLO degrade path: the ladder's rungs, the controller's steps and hysteresis on a fake
clock, and a live run whose model slows down and recovers (null backend, delay changed mid-run)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import write_toy_head

from visionrt import BackendOptions, Pipeline, SourceOptions
from visionrt.config import pipeline_options
from visionrt.errors import ConfigError
from visionrt.pipeline import parts as parts_module
from visionrt.pipeline.degrade import HEADROOM, Change, Degrader, build_ladder


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _feed(degrader: Degrader, clock: FakeClock, latency: float, seconds: float) -> list[int]:
    """30 frames a second of `latency` for `seconds`; the levels after each step taken."""
    levels = []
    for _ in range(round(seconds * 30)):
        clock.now += 1 / 30
        if degrader.observe(latency) is not None:
            levels.append(degrader.level)
    return levels


def test_ladder_order_every_then_sizes_then_model() -> None:
    rungs = build_ladder(1, 3, True, ["input 512×512", "input 384×384", "model n.onnx"])
    assert [(r.every, r.variant) for r in rungs] == [(1, 0), (2, 0), (3, 0), (3, 1), (3, 2), (3, 3)]
    assert rungs[1].label == "detect every 2"
    assert build_ladder(1, 2, False, [])[1].label == "1 frame in 2"
    with pytest.raises(ConfigError, match=r"slo\.max_every: expected >= detect_every"):
        build_ladder(4, 3, True, [])


def test_motion_gating_is_the_first_step_and_stays_on_below() -> None:
    rungs = build_ladder(1, 2, True, ["input 512×512"], motion=True)
    assert [(r.every, r.variant, r.motion) for r in rungs] == [
        (1, 0, ""), (1, 0, "skip"), (2, 0, "skip"), (2, 1, "skip")
    ]  # fmt: skip
    assert [r.label for r in rungs[1:]] == [
        "motion skip", "detect every 2 + motion skip", "input 512×512 + motion skip"
    ]  # fmt: skip


def test_steps_down_one_rung_per_window_until_the_bottom() -> None:
    clock = FakeClock()
    degrader = Degrader(0.1, build_ladder(1, 3, True, ["input 512×512"]), 1.0, clock)
    # 0.2 s latency throughout: one step per window (it holds a window after each), then stops.
    assert _feed(degrader, clock, 0.2, 10.0) == [1, 2, 3]
    assert degrader.rung.label == "input 512×512"
    first = degrader.changes[0]
    assert first.reason == "p95 200 ms > SLO 100 ms"
    assert first.at >= 5 / 30  # not before the window holds enough frames to judge
    report = degrader.report()
    assert (report["steps_down"], report["steps_up"], report["level"]) == (3, 0, 3)


def test_steps_up_only_after_sustained_headroom() -> None:
    clock = FakeClock()
    degrader = Degrader(0.1, build_ladder(1, 3, True, []), 1.0, clock)
    _feed(degrader, clock, 0.2, 5.0)
    assert degrader.level == 2
    # Just under the target but above the headroom line: no step either way.
    assert _feed(degrader, clock, 0.1 * (HEADROOM + 0.1), 6.0) == []
    # Clear headroom: one step up per 2 windows of good p95, never two at once.
    steps_up = _feed(degrader, clock, 0.02, 7.0)
    assert steps_up == [1, 0]
    assert degrader.changes[-1].reason.startswith("p95 20 ms < 70% of SLO 100 ms")


def test_one_slow_frame_in_twenty_does_not_step() -> None:
    clock = FakeClock()
    degrader = Degrader(0.1, build_ladder(1, 3, True, []), 2.0, clock)
    for i in range(300):
        clock.now += 1 / 30
        degrader.observe(0.5 if i % 40 == 0 else 0.03)
    assert degrader.level == 0  # 2.5 % of frames slow: p95 stays under the target


def test_slo_needs_live_sources(tiny_model: Path) -> None:
    with pytest.raises(ConfigError, match="--slo-ms: a latency target needs live sources"):
        Pipeline(["synthetic:64x48:5"], tiny_model, "null", options=pipeline_options(slo_ms=50))


class ScriptedDegrader(Degrader):
    """The run's controller on a clock of 30 frames a second that moves as each result is
    delivered, told the latency of the script's phase instead of the one measured: 5 ms, then
    120 ms from the 30th result, then 5 ms again from the 90th. The measured one depends on the
    machine (beside CPU hogs a 5 ms model's frames took over 60 ms, and the run never stepped
    back up); the steps the run takes, and what it runs then, are the test."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.delivered = 0
        super().__init__(*args, clock=lambda: self.delivered / 30, **kwargs)

    def observe(self, latency: float) -> Change | None:
        assert latency > 0  # measured glass to result, then replaced
        self.delivered += 1
        return super().observe(0.12 if 30 <= self.delivered < 90 else 0.005)


def test_live_run_degrades_under_load_and_recovers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model whose frames take 120 ms mid-run, then 5 ms again (ScriptedDegrader): the run
    steps down (detect every N, then the smaller-input variant), logs why, and steps back up;
    every frame is accounted for."""
    monkeypatch.setattr(parts_module, "Degrader", ScriptedDegrader)
    detector = write_toy_head(tmp_path / "toy.onnx", 64, 64, classes=2)  # resizable to 32×32
    pipeline = Pipeline(
        ["cam=synthetic:96x96:330"],
        detector,
        "null",
        BackendOptions(input_size=(64, 64), cache_dir=tmp_path, settings={"delay_ms": "5"}),
        source_options=SourceOptions(mode="live"),
        options=pipeline_options(
            warmup=0,
            track=True,
            slo_ms=60,
            slo_window=0.5,
            slo_max_every=2,
            slo_sizes=(32,),
            slo_motion=False,  # the motion rung has its own tests
        ),
    )
    assert isinstance(pipeline.parts.degrader, ScriptedDegrader)
    assert [r.label for r in pipeline.parts.degrader.rungs] == [
        "as configured",
        "detect every 2",
        "input 32×32",
    ]
    seen: list[int] = []

    def load(result: object) -> None:
        seen.append(pipeline.parts.degrader.level if pipeline.parts.degrader else -1)

    changes = []
    pipeline.hooks.on_degrade = changes.append
    summary = pipeline.run(on_result=load)
    pipeline.close()
    downs = [c for c in changes if c.level_to > c.level_from]
    ups = [c for c in changes if c.level_to < c.level_from]
    assert downs, "p95 of 120 ms against a 60 ms target must step down"
    assert all("> SLO 60 ms" in c.reason for c in downs)
    assert ups, "back at 5 ms the run must step back up"
    assert max(seen) == 2  # down to the smaller input's variant, results delivered there
    assert summary.slo["steps_down"] == len(downs)
    assert summary.events.get("slo: step down") == len(downs)
    assert summary.events.get("slo: step up") == len(ups)
    assert "variant1_infer" in summary.stages  # the 32×32 variant ran on the bottom rung
    assert summary.slo["level"] == 0  # and the run ended back where it started
    assert summary.accounted
