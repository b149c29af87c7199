"""`tune` learns whether motion gating pays: the choice rule on given measurements, the repeats
and their order, the region model's failure recorded, the plan's `pipeline:` section and
`tuned.motion` record, and a run that takes the plan's gating unless the user chose the mode."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from visionrt.cli.run_config import configure_run
from visionrt.cli.tune_tables import motion_line
from visionrt.config import pipeline_options
from visionrt.errors import ModelLoadError
from visionrt.pipeline import PipelineOptions
from visionrt.plans import Plan, machine_fingerprint, plan_path, use_gating
from visionrt.plans.gating import plan_every, plan_motion
from visionrt.plans.store import file_sha256
from visionrt.tune import Candidate, Limits, Measurement
from visionrt.tune.motion import (
    GatingMode,
    ModeResult,
    MotionOutcome,
    choose,
    measure_modes,
    tune_motion,
)

REFERENCE = Candidate("onnxruntime", "fp32", reference=True)
INT8 = Candidate("openvino", "int8", (512, 640), fold=True, export="openvino-int8")


def _run(
    fps: float, fidelity: float = 0.97, p99: float = 40.0, error: str = "", **motion: float
) -> Measurement:
    return Measurement(fps, p99 / 2, p99, fidelity, 300, error=error, motion=motion)


def _results(**runs: list[Measurement]) -> list[ModeResult]:
    return [ModeResult(GatingMode(name, PipelineOptions()), list(r)) for name, r in runs.items()]


# Each row: per mode its FPS over three repeats, fidelity and p99 ms; the limits; the mode kept;
# and why each other gating mode was not.
CHOICES = [
    pytest.param(
        {"off": ([28, 29, 28], 0.98, 40), "skip": ([60, 58, 61], 0.97, 40),
         "regions": ([40, 41, 39], 0.96, 40)},
        Limits(), "skip", {"regions": "skip is faster"},
        id="the fastest within budget",
    ),
    pytest.param(
        {"off": ([28, 29, 28], 0.98, 40), "skip": ([29.0, 29.3, 28.8], 0.97, 40)},
        Limits(), "off", {"skip": "29.0 FPS: not ≥ 1.15× off's 28.0"},
        id="a gain under 5% is noise",
    ),
    pytest.param(
        {"off": ([28, 28, 28], 0.98, 40), "skip": ([30.5, 30.6, 30.4], 0.97, 40)},
        Limits(), "off", {"skip": "30.5 FPS: not ≥ 1.15× off's 28.0"},
        id="×1.09 (vtest's skip) does not pay for stale reused frames elsewhere",
    ),
    pytest.param(
        {"off": ([28, 28, 28], 0.98, 40), "skip": ([95, 95, 96], 0.90, 40)},
        Limits(min_fidelity=0.95), "off", {"skip": "fidelity 0.900 < 0.95"},
        id="fast but outside the fidelity budget",
    ),
    pytest.param(
        {"off": ([28, 28, 28], 0.98, 40), "skip": ([20, 90, 22], 0.97, 40)},
        Limits(), "off", {"skip": "22.0 FPS: not ≥ 1.15× off's 28.0"},
        id="one lucky run does not win: the median decides",
    ),
    pytest.param(
        {"off": ([28, 28, 28], 0.98, 25), "skip": ([40, 40, 40], 0.97, 50)},
        Limits(max_p99_ms=30), "off", {"skip": "p99 50 ms > 30 ms"},
        id="the p99 limit holds too",
    ),
    pytest.param(
        {"off": ([28, 28, 28], 0.98, 40), "skip": ([40, 40, 40], 0.97, 50)},
        Limits(objective="latency"), "off", {"skip": "p99 50 ms above off's 40 ms"},
        id="latency objective: no longer tail",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("modes", "limits", "chosen", "why"), CHOICES)
def test_choose_keeps_the_fastest_mode_that_holds_the_budget_and_pays(
    modes: dict[str, tuple[list[float], float, float]],
    limits: Limits,
    chosen: str,
    why: dict[str, str],
) -> None:
    results = _results(
        **{mode: [_run(f, fid, p99) for f in fps] for mode, (fps, fid, p99) in modes.items()}
    )
    assert choose(results, limits) == chosen
    outs = {r.mode.name: r.why_out for r in results if r.mode.name not in ("off", chosen)}
    assert outs == why


@pytest.mark.parametrize(
    ("motion", "kept"),
    [
        ({"share": 0.0, "pixel_share": 1.0}, False),  # every frame ran whole
        ({"share": 0.0, "pixel_share": 1.3}, False),  # windows costing more than the frame
        ({"share": 0.0, "pixel_share": 0.4}, True),  # regions: smaller inputs
        ({"share": 0.0}, False),  # skip, from a pipeline that counts no pixels
        ({"share": 0.3}, True),
        ({}, True),  # the run does not say: the figures decide
    ],
)
def test_a_mode_that_spared_no_work_is_not_kept_however_fast(motion: dict, kept: bool) -> None:
    results = _results(off=[_run(28)] * 3, skip=[_run(60, **motion)] * 3)
    assert choose(results, Limits()) == ("skip" if kept else "off")
    if not kept:
        assert results[1].why_out == "it spared the detector no work here: a gain would be noise"


def test_tune_help_names_the_gain_a_mode_must_reach() -> None:
    """`tune --help` said ≥ 5 % while a mode was kept only from 15 % (MIN_GAIN)."""
    import typer.main

    from visionrt.cli.main import app
    from visionrt.tune.motion import MIN_GAIN

    tune = typer.main.get_command(app).commands["tune"]  # type: ignore[attr-defined]
    (motion,) = [param for param in tune.params if param.name == "motion"]
    assert f"at least {MIN_GAIN:.0%} faster" in motion.help
    assert choose(_results(off=[_run(28)] * 3, skip=[_run(28 * 1.14)] * 3), Limits()) == "off"
    assert choose(_results(off=[_run(28)] * 3, skip=[_run(28 * 1.16)] * 3), Limits()) == "skip"


def test_worst_fidelity_of_the_repeats_is_held_to_the_budget() -> None:
    results = _results(off=[_run(28)] * 3, skip=[_run(60, 0.97), _run(60, 0.94), _run(60, 0.97)])
    assert choose(results, Limits(min_fidelity=0.95)) == "off"
    assert results[1].why_out == "fidelity 0.940 < 0.95"


def test_a_mode_that_failed_or_an_unmeasured_baseline_keeps_gating_off() -> None:
    failed = _results(off=[_run(28)], skip=[_run(60)])
    failed.append(ModeResult(GatingMode("regions", error="cannot build its region model: no")))
    assert choose(failed, Limits()) == "skip"
    assert failed[2].why_out == "cannot build its region model: no"
    no_base = _results(off=[_run(0, error="cannot load")], skip=[_run(60)])
    assert choose(no_base, Limits()) == "off"
    assert no_base[1].why_out == "no baseline: off cannot load"


def test_repeats_alternate_the_order_skip_failed_modes_and_stop_at_the_deadline() -> None:
    calls: list[str] = []
    now = [0.0]

    def measure(mode: GatingMode) -> Measurement:
        calls.append(mode.name)
        now[0] += 10
        return _run(0, error="boom") if mode.name == "regions" else _run(30)

    modes = [GatingMode(name, PipelineOptions()) for name in ("off", "skip", "regions")]
    modes.append(GatingMode("never", error="no model"))
    said: list[str] = []
    results = measure_modes(modes, measure, 3, deadline=1e9, clock=lambda: now[0], say=said.append)
    assert calls == ["off", "skip", "regions", "skip", "off", "off", "skip"]
    assert [len(r.runs) for r in results] == [3, 3, 1, 0]
    assert said[0] == "motion never: out: no model"
    assert "motion skip · 300 frames (1/3): 30.0 FPS, fidelity 0.970" in said
    assert "motion regions (1/3): out: boom" in said
    calls.clear()
    results = measure_modes(modes[:2], measure, 3, deadline=now[0] + 5, clock=lambda: now[0])
    assert calls == ["off", "skip"]  # the first repeat always runs; none starts past the deadline


class FakeEvaluator:
    """Known FPS per mode; the region model's export fails or gives a path."""

    def __init__(self, reference_frames: int, export_error: str = "") -> None:
        self.reference_frames, self.export_error = reference_frames, export_error
        self.gated_calls: list[tuple[Candidate, int, PipelineOptions]] = []
        self.exported: list[Candidate] = []
        # Detect-every-N's (FPS, fidelity) by N: under the gain a mode needs, unless a test says.
        self.every = {2: (30.0, 0.97), 3: (31.0, 0.96)}

    def every_frame_reference(self) -> list[object]:
        return [object()] * self.reference_frames

    def artifact(self, candidate: Candidate) -> Path:
        self.exported.append(candidate)
        if self.export_error:
            raise ModelLoadError(self.export_error)
        return Path("/cache/int8-320/model.xml")

    def gated(self, candidate: Candidate, frames: int, options: PipelineOptions) -> Measurement:
        self.gated_calls.append((candidate, frames, options))
        if options.tracking.detect_every > 1:
            assert options.tracking.predict_between
            assert not options.tracking.enabled
            fps, fidelity = self.every[options.tracking.detect_every]
            return Measurement(fps, 20.0, 40.0, fidelity, frames)
        fps = {"off": 28.0, "skip": 29.0, "regions": 70.0}[options.motion.mode]
        motion = {"share": 0.4} if options.motion.mode != "off" else {}
        return Measurement(fps, 20.0, 40.0, 0.97, frames, motion=motion)


def test_regions_runs_the_artifact_made_at_the_region_size_and_the_plan_records_it() -> None:
    evaluator = FakeEvaluator(reference_frames=250)
    outcome = tune_motion(INT8, evaluator, Limits(), frames=300, repeats=2)
    # The same export at 320×320, made through the evaluator (cached by content).
    assert evaluator.exported == [Candidate("openvino", "int8", (320, 320), fold=True,
                                            export="openvino-int8")]  # fmt: skip
    # Scored on as many frames as the reference ran on every frame, the plan's candidate each time.
    assert {(c, f) for c, f, _ in evaluator.gated_calls} == {(INT8, 250)}
    assert outcome.chosen == "regions"
    assert outcome.pipeline_section() == {
        "motion": {"mode": "regions", "region_model": "/cache/int8-320/model.xml"},
    }
    record = outcome.record()
    assert (record["chosen"], record["frames"], record["repeats"]) == ("regions", 250, 2)
    assert record["region_model"] == "/cache/int8-320/model.xml"
    assert record["modes"]["regions"] == {
        "chosen": True, "fps": 70.0, "fps_runs": [70.0, 70.0], "speedup": 2.5, "p50_ms": 20.0,
        "p99_ms": 40.0, "fidelity": 0.97, "frames": 250, "reused_share": 0.4,
    }  # fmt: skip
    assert record["modes"]["skip"]["why_not"] == "29.0 FPS: not ≥ 1.15× off's 28.0"


def test_detection_on_every_second_frame_is_kept_where_it_holds_the_budget() -> None:
    """vtest's figures (issue #49): every 2nd 1.8× at 0.961, every 3rd 2.3× at 0.941."""
    evaluator = FakeEvaluator(reference_frames=300, export_error="no region model here")
    evaluator.every = {2: (50.4, 0.961), 3: (64.4, 0.941)}
    said: list[str] = []
    outcome = tune_motion(INT8, evaluator, Limits(), frames=300, say=said.append, repeats=1)
    assert outcome.chosen == "every 2"
    assert outcome.pipeline_section() == {
        "tracking": {"detect_every": 2, "predict_between": True},
    }
    modes = outcome.record()["modes"]
    assert modes["every 2"]["speedup"] == 1.8
    assert modes["every 3"]["why_not"] == "fidelity 0.941 < 0.95"
    assert "motion every 2 · 300 frames (1/1): 50.4 FPS, fidelity 0.961" in said
    assert motion_line(outcome) == (
        "gating: detection on 1 frame in 2, 50.4 FPS at fidelity 0.961: a plain `visionrt run`"
        " detects so, the tracker's boxes between (`--detect-every 1` does not)"
    )


def test_a_region_model_that_cannot_be_built_is_recorded_and_the_others_go_on() -> None:
    evaluator = FakeEvaluator(reference_frames=300, export_error="nncf: calibration failed")
    said: list[str] = []
    outcome = tune_motion(INT8, evaluator, Limits(), frames=300, say=said.append, repeats=1)
    assert {o.motion.mode for _, _, o in evaluator.gated_calls} == {"off", "skip"}
    assert outcome.chosen == "off"  # skip's 29 FPS is under 1.15 × 28
    assert outcome.pipeline_section() == {}
    why = "cannot build its region model: nncf: calibration failed"
    assert outcome.record()["modes"]["regions"] == {"chosen": False, "error": why}
    assert f"motion regions: out: {why}" in said


def test_an_onnx_run_resizes_its_own_model_and_nothing_to_score_against_skips() -> None:
    evaluator = FakeEvaluator(reference_frames=300)
    outcome = tune_motion(REFERENCE, evaluator, Limits(), frames=300, repeats=1)
    assert evaluator.exported == []  # the run's model is resized: nothing to export
    regions = next(o for _, _, o in evaluator.gated_calls if o.motion.mode == "regions")
    assert regions.motion.region_model == ""
    assert outcome.pipeline_section() == {"motion": {"mode": "regions"}}
    skipped = tune_motion(REFERENCE, FakeEvaluator(reference_frames=0), Limits(), frames=300)
    assert skipped.record() == {
        "chosen": "off",
        "skipped": "no every-frame reference to score gated runs against",
    }


def test_the_evaluator_scores_gated_runs_on_every_frame(
    small_video: Path, tiny_model: Path
) -> None:
    from visionrt.tune.evaluate import VideoEvaluator

    evaluator = VideoEvaluator(small_video, tiny_model, fidelity_frames=4)
    assert evaluator(REFERENCE, 12).fidelity == 1.0
    assert len(evaluator.every_frame_reference()) == 12  # the reference's every frame kept
    assert len(evaluator.reference or []) == 4  # the search still scores its first 4
    off = evaluator.gated(REFERENCE, 12, PipelineOptions())
    assert (off.error, off.frames, off.fidelity, off.motion) == ("", 12, 1.0, {})
    skip = evaluator.gated(REFERENCE, 12, pipeline_options(motion="skip"))
    assert (skip.error, skip.frames, skip.fidelity) == ("", 12, 1.0)
    assert "share" in skip.motion
    longer = evaluator.gated(REFERENCE, 20, PipelineOptions())
    assert "the reference ran 12 frames, not 20" in longer.error


# The run side: a plan with a `pipeline:` section.


def _gated_plan(model: Path, artifact: Path, section: dict, region_model: str = "") -> Plan:
    return Plan(
        run={
            "model": str(artifact),
            "backend": "null",
            "inference": {"precision": "fp32", "settings": {"delay_ms": "1"}},
            **({"pipeline": section} if section else {}),
        },
        tuned={
            "at": "2026-11-25T10:00:00+00:00",
            "video": "/data/vtest.avi",
            "measured": {"fps": 99.0, "fidelity": 1.0},
            # No source model: nothing to check the plan against on the test video's size, so it
            # runs as it is (accuracy.check.prove) with no audit.
            "source_sha256": file_sha256(model),
            "fingerprint": machine_fingerprint(),
            "motion": {
                "chosen": (
                    f"every {plan_every(section)}"
                    if plan_every(section) > 1
                    else plan_motion(section).get("mode", "off")
                ),
                **({"region_model": region_model} if region_model else {}),
                "modes": {
                    "skip": {"fps": 61.0, "speedup": 2.1, "fidelity": 0.968},
                    "every 2": {"fps": 47.9, "speedup": 1.81, "fidelity": 0.961},
                },
            },
        },
    )


def test_a_plan_with_a_pipeline_section_round_trips(tmp_path: Path, tiny_model: Path) -> None:
    plan = _gated_plan(tiny_model, tiny_model, {"motion": "skip"})
    loaded = Plan.load(plan.save(tmp_path / "plan.yaml"))
    assert loaded.run["pipeline"] == {"motion": "skip"}
    assert loaded.tuned["motion"]["chosen"] == "skip"


SKIP = {"motion": {"mode": "skip"}}
EVERY2 = {"tracking": {"detect_every": 2, "predict_between": True}}
GATING = [
    (SKIP, {}, SKIP, "motion gating from the plan: skip (2.10× the plan alone, fidelity 0.968 on"
     " vtest.avi); --motion off turns it off"),
    # A plan tuned before the pipeline's policies had sections holds its gating flat.
    ({"motion": "skip", "motion_min_area": 0.005}, {}, {"motion": {"mode": "skip",
     "min_area": 0.005}}, "motion gating from the plan: skip (2.10× the plan alone, fidelity"
     " 0.968 on vtest.avi); --motion off turns it off"),
    (SKIP, {"motion": {"mode": "off"}}, {}, "plan's motion gating (skip) set aside:"
     " pipeline.motion.mode (--motion) off given"),
    (SKIP, {"motion": {"mode": "skip"}}, SKIP, "motion gating skip: given, and the plan's too"),
    # The user's threshold alone chooses no mode: the plan's runs, under the user's threshold.
    (SKIP, {"motion": {"threshold": 40}}, SKIP, "motion gating from the plan: skip (2.10× the"
     " plan alone, fidelity 0.968 on vtest.avi); --motion off turns it off"),
    ({"motion": "regions", "motion_region_model": "/gone/model.xml"}, {}, {},
     "plan's motion gating (regions) set aside: its region model /gone/model.xml is missing"
     " (`visionrt tune` makes it again)"),
    ({}, {"motion": {"mode": "skip"}}, {}, ""),
    ({}, {}, {}, ""),
    # Detection on 1 frame in N: no track ids unless the user tracks, and set aside where the
    # user chose detect_every or a motion mode (the plan measured neither with it).
    (EVERY2, {}, EVERY2, "detection on 1 frame in 2 from the plan, the tracker's boxes between,"
     " no track ids (1.81× the plan alone, fidelity 0.961 on vtest.avi); --detect-every 1 turns"
     " it off"),
    (EVERY2, {"tracking": {"enabled": True}}, EVERY2, "detection on 1 frame in 2 from the plan,"
     " the tracks' boxes between (1.81× the plan alone, fidelity 0.961 on vtest.avi);"
     " --detect-every 1 turns it off"),
    (EVERY2, {"motion": {"mode": "off"}}, EVERY2, "detection on 1 frame in 2 from the plan, the"
     " tracker's boxes between, no track ids (1.81× the plan alone, fidelity 0.961 on"
     " vtest.avi); --detect-every 1 turns it off"),
    (EVERY2, {"tracking": {"detect_every": 1}}, {}, "plan's detection on 1 frame in 2 set aside:"
     " pipeline.tracking.detect_every (--detect-every) 1 given"),
    (EVERY2, {"motion": {"mode": "skip"}}, {}, "plan's detection on 1 frame in 2 set aside:"
     " pipeline.motion.mode (--motion) skip given"),
]  # fmt: skip


@pytest.mark.parametrize(("section", "given", "expected", "note"), GATING)
def test_the_users_motion_choice_wins_over_the_plans(
    tiny_model: Path, section: dict, given: dict, expected: dict, note: str
) -> None:
    use = use_gating(_gated_plan(tiny_model, tiny_model, section), given)
    assert (use.section, use.note) == (expected, note)


@pytest.fixture
def gated(tmp_path: Path, tiny_model: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """A model and a cached plan (null backend, so a run is quick) whose gating is `skip`."""
    model = tmp_path / "detector.onnx"
    shutil.copy(tiny_model, model)
    root = tmp_path / "plans"
    monkeypatch.setenv("VISIONRT_PLANS", str(root))
    _gated_plan(model, model, {"motion": "skip"}).save(
        plan_path(model, machine_fingerprint(), root)
    )
    return {"model": model, "root": root}


def test_configure_layers_the_plans_gating_under_the_users(
    gated: dict[str, Path], small_video: Path
) -> None:
    base = {"model": str(gated["model"]), "sources": [str(small_video)]}
    cfg, note = configure_run(None, False, None, None, base)
    assert cfg.pipeline.motion.mode == "skip"
    assert "motion gating from the plan: skip" in note
    cfg, note = configure_run(None, False, None, ["pipeline.motion_min_area=0.01"], base)
    assert (cfg.pipeline.motion.mode, cfg.pipeline.motion.min_area) == ("skip", 0.01)
    cfg, note = configure_run(None, False, None, None, {**base, "pipeline": {"motion": "off"}})
    assert cfg.pipeline.motion.mode == "off"
    assert "plan's motion gating (skip) set aside" in note
    cfg, note = configure_run(None, True, None, None, base)  # --no-plan: the reference, no gating
    assert cfg.pipeline.motion.mode == "off"
    assert "motion" not in note


def test_a_plain_run_gates_as_the_plan_says_and_motion_off_wins(
    gated: dict[str, Path], small_video: Path, tmp_path: Path
) -> None:
    base = [sys.executable, "-m", "visionrt.cli.main", "run", str(small_video), "-m",
            str(gated["model"]), "--no-video", "-q"]  # fmt: skip
    env = {**os.environ, "VISIONRT_PLANS": str(gated["root"])}
    for extra, mode in (([], "skip"), (["--motion", "off"], "")):
        out = tmp_path / (mode or "off")
        proc = subprocess.run([*base, *extra, "-o", str(out)], capture_output=True, text=True,
                              timeout=120, env=env)  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        summary = json.loads((out / "summary.json").read_text())
        assert summary["backend"]["runtime"] == "null"  # the plan ran
        assert summary.get("motion", {}).get("mode", "") == mode
        said = "motion gating from the plan: skip" if mode else "gating (skip) set aside"
        assert said in proc.stderr
        assert any(said in note for note in summary["notes"])
        rows = [json.loads(line) for line in (out / "small.jsonl").read_text().splitlines()]
        assert len(rows) == 40  # frames in = frames out, gated or not
        assert {row.get("processed", "") for row in rows} <= ({"full", "reused"} if mode else {""})


def test_motion_outcome_without_results_records_why() -> None:
    outcome = MotionOutcome((), skipped="not measured (tune --no-motion)")
    assert outcome.pipeline_section() == {}
    assert outcome.record() == {"chosen": "off", "skipped": "not measured (tune --no-motion)"}


def test_tune_records_the_gating_in_the_plan(
    small_video: Path, tiny_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The whole step through the real pipeline, on a search of the reference alone."""
    from visionrt.tune import tuner

    monkeypatch.setattr(tuner, "candidates", lambda *args: [REFERENCE])
    said: list[str] = []
    outcome = tuner.tune(small_video, tiny_model, Limits(), rounds=(6, 10),
                         plans_root=tmp_path, on_motion=said.append)  # fmt: skip
    assert outcome.plan is not None
    assert outcome.path is not None
    assert outcome.motion is not None
    record = Plan.load(outcome.path).tuned["motion"]
    assert set(record["modes"]) == {"off", "skip", "regions", "every 2", "every 3"}
    assert record["frames"] == 10  # the reference's every frame in the final round
    off = record["modes"]["off"]
    assert (off["fidelity"], off["frames"], len(off["fps_runs"])) == (1.0, 10, 3)
    assert record["modes"]["skip"]["fidelity"] == 1.0  # the tiny detector's box never moves
    # The square moves on every frame: skip reuses none, so whatever its FPS it is not kept.
    assert record["modes"]["skip"]["reused_share"] == 0.0
    assert record["modes"]["skip"]["why_not"]
    # The tiny detector's box never moves: the tracker's boxes between detections are on it.
    every = record["modes"]["every 2"]
    assert (every["fidelity"], every["frames"], len(every["fps_runs"])) == (1.0, 10, 3)
    # Whether every 2 pays here is the machine's to say; the plan holds what was chosen.
    assert record["chosen"] == outcome.motion.chosen
    if outcome.motion.chosen == "off":
        assert "pipeline" not in outcome.plan.run
    else:
        assert outcome.motion.chosen in ("every 2", "every 3")
        every_n = int(outcome.motion.chosen.split()[1])
        assert outcome.plan.run["pipeline"] == {
            "tracking": {"detect_every": every_n, "predict_between": True}
        }
    assert any(line.startswith("motion skip · 10 frames (3/3): ") for line in said)
    skipped = tuner.tune(small_video, tiny_model, Limits(), rounds=(6, 10), plans_root=tmp_path,
                         motion=False)  # fmt: skip
    assert skipped.plan is not None
    assert skipped.plan.tuned["motion"] == {
        "chosen": "off",
        "skipped": "not measured (tune --no-motion)",
    }
    assert "pipeline" not in skipped.plan.run


def test_a_plan_gating_that_does_not_compose_is_set_aside_not_an_error(
    tmp_path: Path, tiny_model: Path, small_video: Path
) -> None:
    model = tmp_path / "detector.onnx"
    shutil.copy(tiny_model, model)
    plan = _gated_plan(model, model, {"motion": "sometimes"})
    plan_file = plan.save(tmp_path / "plan.yaml")
    values = {"model": str(model), "sources": [str(small_video)]}
    cfg, note = configure_run(plan_file, False, None, None, values)
    assert cfg.pipeline.motion.mode == "off"
    assert cfg.backend == "null"  # the rest of the plan still runs
    assert "plan's motion gating set aside: pipeline.motion.mode (--motion): expected off" in note


def test_the_fastest_skip_area_within_the_budget_is_kept_with_its_area() -> None:
    # vtest's figures (docs/benchmarks.md): 0.005 holds the budget, 0.01 does not.
    areas = {"skip": (0.002, 29.9, 0.969), "skip 0.005": (0.005, 33.9, 0.963),
             "skip 0.01": (0.01, 45.4, 0.944)}  # fmt: skip
    results = [ModeResult(GatingMode("off", PipelineOptions()), [_run(28.0, 0.974)] * 3)]
    for name, (area, fps, fid) in areas.items():
        options = pipeline_options(motion="skip", motion_min_area=area)
        results.append(ModeResult(GatingMode(name, options), [_run(fps, fid, share=0.2)] * 3))
    chosen = choose(results, Limits(min_fidelity=0.95))
    assert chosen == "skip 0.005"
    outcome = MotionOutcome(tuple(results), chosen, 300)
    assert outcome.pipeline_section() == {"motion": {"mode": "skip", "min_area": 0.005}}
    assert outcome.record()["modes"]["skip 0.01"]["why_not"] == "fidelity 0.944 < 0.95"


def test_the_python_api_takes_the_plans_gating_unless_given_options(
    gated: dict[str, Path], small_video: Path
) -> None:
    from visionrt import Pipeline

    planned = Pipeline([str(small_video)], gated["model"])
    given = Pipeline([str(small_video)], gated["model"], options=PipelineOptions())
    try:
        assert planned.plan is not None  # the cached plan runs in both
        assert given.plan is not None
        assert planned.options.motion.mode == "skip"
        assert any("motion gating from the plan: skip" in note for note in planned.notes)
        assert given.options.motion.mode == "off"  # the caller's options, as given
    finally:
        planned.close()
        given.close()


def test_a_plain_run_detects_every_second_frame_as_the_plan_says(
    tmp_path: Path, tiny_model: Path, small_video: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = tmp_path / "detector.onnx"
    shutil.copy(tiny_model, model)
    root = tmp_path / "plans"
    monkeypatch.setenv("VISIONRT_PLANS", str(root))
    _gated_plan(model, model, EVERY2).save(plan_path(model, machine_fingerprint(), root))
    base = {"model": str(model), "sources": [str(small_video)]}
    cfg, note = configure_run(None, False, None, None, base)
    assert (cfg.pipeline.tracking.detect_every, cfg.pipeline.tracking.enabled) == (2, False)
    assert cfg.pipeline.tracking.tracker_runs
    assert "detection on 1 frame in 2 from the plan" in note
    cfg, _ = configure_run(None, False, None, None, {**base, "pipeline": {"track": True}})
    assert (cfg.pipeline.tracking.detect_every, cfg.pipeline.tracking.enabled) == (2, True)
    cfg, note = configure_run(None, False, None, None, {**base, "pipeline": {"detect_every": 1}})
    assert not cfg.pipeline.tracking.tracker_runs
    assert "set aside" in note
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "visionrt.cli.main", "run", str(small_video), "-m", str(model),
         "--no-video", "-q", "-o", str(out)],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, "VISIONRT_PLANS": str(root)},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "detection on 1 frame in 2 from the plan" in proc.stderr
    # (The plan's null backend finds no boxes; the boxes between detections, without track
    # ids, are test_graph's detect-every test with a real detector.)
    rows = [json.loads(line) for line in (out / "small.jsonl").read_text().splitlines()]
    assert [row["frame"] for row in rows] == list(range(40))
    summary = json.loads((out / "summary.json").read_text())
    assert summary["accounted"]
    assert any("detection on 1 frame in 2 from the plan" in note for note in summary["notes"])
