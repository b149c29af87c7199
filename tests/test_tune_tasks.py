"""`tune` plans every task of a run: the detector's throughput winner and its live (lowest
latency) twin, and with `--depth` the depth model within a depth fidelity budget; `run` takes
each where it applies."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from visionrt.cli.run_config import configure_run
from visionrt.plans import cached_plan, use_depth_plan
from visionrt.tune import Candidate, Limits, Machine, Measurement
from visionrt.tune.depth import DepthCandidate, DepthLimits, depth_candidates, tune_depth
from visionrt.tune.search import Trial
from visionrt.tune.tuner import _differences, live_twin, tune_live

INT8 = Candidate(
    "openvino", "int8", (512, 640), fold=True, settings=(("hint", "throughput"),),
    export="openvino-int8",
)  # fmt: skip


def test_the_live_twin_is_the_latency_form_of_the_winner() -> None:
    twin = live_twin(INT8)
    assert twin is not None
    assert dict(twin.settings) == {"hint": "latency"}
    assert (twin.backend, twin.precision, twin.input_size, twin.export) == (
        "openvino", "int8", (512, 640), "openvino-int8",
    )  # fmt: skip
    assert _differences(INT8, twin) == {"settings": {"hint": "latency"}}
    batched = Candidate("torch", "fp16", device="cuda", batch=8)
    assert _differences(batched, live_twin(batched)) == {"batch": 1}  # type: ignore[arg-type]
    assert live_twin(Candidate("openvino", "int8", settings=(("hint", "latency"),))) is None


def _measured(p50: float, fidelity: float = 0.98) -> Measurement:
    return Measurement(fps=20, p50_ms=p50, p99_ms=p50 * 2, fidelity=fidelity, frames=300)


@pytest.mark.parametrize(
    ("twin_p50", "twin_fidelity", "chosen"),
    [(21.0, 0.98, True), (40.0, 0.98, False), (21.0, 0.90, False)],
    ids=["faster", "slower", "less-accurate"],
)
def test_the_live_twin_is_kept_only_when_faster_and_accurate(
    twin_p50: float, twin_fidelity: float, chosen: bool
) -> None:
    best = Trial(INT8, [_measured(33.4)], reached=2)
    seen: list[str] = []
    trial = tune_live(
        best,
        lambda candidate, frames: _measured(twin_p50, twin_fidelity),
        Limits(min_fidelity=0.95),
        300,
        on_trial=lambda t, f: seen.append(t.candidate.label),
    )
    assert trial is not None
    assert seen == [trial.candidate.label]
    assert (not trial.why_out) == chosen, trial.why_out


def test_depth_candidates_follow_the_hardware() -> None:
    both = frozenset({"onnxruntime", "openvino"})
    labels = [
        c.label
        for c in depth_candidates(Machine(both, frozenset({"avx512_bf16", "avx512_vnni"}), True))
    ]
    assert labels[0] == "onnxruntime fp32"
    assert "openvino bf16" in labels
    assert "openvino int8 (openvino-int8)" in labels
    no_bf16 = [c.label for c in depth_candidates(Machine(both, frozenset({"avx512_vnni"}), True))]
    assert "openvino bf16" not in no_bf16
    assert "onnxruntime int8 (onnx-int8)" in no_bf16
    assert [c.label for c in depth_candidates(Machine(frozenset({"onnxruntime"})))] == [
        "onnxruntime fp32"
    ]


@pytest.fixture
def tiny_depth_model(tmp_path: Path) -> Path:
    from conftest import write_tiny_depth_model

    return write_tiny_depth_model(tmp_path / "tiny_depth.onnx")


def test_tune_depth_caches_the_fastest_accurate_plan_and_run_takes_it(
    tiny_depth_model: Path, small_video: Path, tiny_model: Path, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    from visionrt.tune import depth as depth_tuning

    root = tmp_path / "plans"
    monkeypatch.setenv("VISIONRT_PLANS", str(root))
    space = [DepthCandidate("onnxruntime", "fp32", reference=True),
             DepthCandidate("openvino", "fp32")]  # fmt: skip
    monkeypatch.setattr(depth_tuning, "depth_candidates", lambda *a: space)
    # The reference measures slow, OpenVINO fast: the choice is by speed within the budget.
    timings = {"onnxruntime": [9.0] * 8, "openvino": [3.0] * 8}
    monkeypatch.setattr(
        depth_tuning, "_time_model", lambda model, candidate, hw: timings[candidate.backend]
    )
    plan, path, trials = tune_depth(small_video, tiny_depth_model, 42, DepthLimits(), frames=3)
    assert [t.why_out for t in trials] == ["", ""]
    assert plan.tuned["task"] == "depth"
    assert plan.run["backend"] == "openvino"
    assert plan.tuned["measured"]["ms"] == 3.0
    assert cached_plan(tiny_depth_model, root) == (plan, path)
    # `run --depth` takes it; a detector lookup of the same file does not.
    values = {"model": str(tiny_model), "depth": {"model": str(tiny_depth_model),
              "short_side": 42}}  # fmt: skip
    config, note = configure_run(None, False, None, None, values)
    assert config.depth.backend == "openvino", note
    assert f"depth plan {path.name}: openvino fp32" in note
    # The user's own depth runtime wins; another size of an ONNX plan runs, saying so.
    chosen = {**values, "depth": {**values["depth"], "backend": "onnxruntime"}}
    config, note = configure_run(None, False, None, None, chosen)
    assert config.depth.backend == "onnxruntime"
    assert "not used: depth.backend given" in note
    other_size = use_depth_plan(tiny_depth_model, (), 56, root)
    assert other_size.sections is not None
    assert "tuned at short side 42" in other_size.note
    config, note = configure_run(None, True, None, None, values)  # --no-plan: FP32 reference
    assert config.depth.backend == ""
    assert note == ""


def test_a_depth_candidate_outside_the_budget_is_not_chosen(
    tiny_depth_model: Path, small_video: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from visionrt.export.depth import DepthFidelityReport
    from visionrt.tune import depth as depth_tuning

    space = [DepthCandidate("onnxruntime", "fp32", reference=True),
             DepthCandidate("openvino", "fp32")]  # fmt: skip
    monkeypatch.setattr(depth_tuning, "depth_candidates", lambda *a: space)
    monkeypatch.setattr(depth_tuning, "_time_model", lambda *a: [1.0] * 8)
    bad = DepthFidelityReport(0.3, 0.5, 0.4, 0.4, 3, (42, 56), 0, False)
    monkeypatch.setattr(depth_tuning, "compare_depth_to_reference", lambda *a: bad)
    plan, _, trials = tune_depth(
        small_video, tiny_depth_model, 42, DepthLimits(), frames=3, plans_root=tmp_path
    )
    assert trials[1].why_out == "AbsRel 0.300 > 0.02"
    assert plan.run["backend"] == "onnxruntime"  # the reference, when nothing else qualifies


def test_a_fixed_size_depth_artifact_is_set_aside_for_another_size(
    tiny_depth_model: Path, tmp_path: Path
) -> None:
    from visionrt.plans import Plan, machine_fingerprint, plan_path

    artifact = tmp_path / "depth.xml"
    artifact.write_text("<net/>")
    plan = Plan(
        run={"model": str(artifact), "backend": "openvino", "inference": {"precision": "int8"}},
        tuned={
            "task": "depth",
            "short_side": 266,
            "input_hw": [266, 350],
            "artifact": {"batch": 1, "fixed_hw": [266, 350]},
            "fingerprint": machine_fingerprint(),
        },
    )
    plan.save(plan_path(tiny_depth_model, machine_fingerprint(), tmp_path))
    use = use_depth_plan(tiny_depth_model, (), 518, tmp_path)
    assert use.sections is None
    assert "set aside: its artifact is fixed at 266×350" in use.note
    assert use_depth_plan(tiny_depth_model, (), 266, tmp_path).sections is not None
    copy = tmp_path / "renamed.onnx"
    shutil.copy(tiny_depth_model, copy)
    assert use_depth_plan(copy, (), 266, tmp_path).sections is not None  # by content
