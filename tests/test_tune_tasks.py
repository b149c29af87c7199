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


def test_a_slower_live_twin_says_why_once() -> None:
    """The table's status for a live twin set aside read "live: live: p50 …"."""
    from visionrt.cli.tune_tables import status_text
    from visionrt.tune.search import SearchResult

    best = Trial(INT8, [_measured(33.4)], reached=2)
    trial = tune_live(best, lambda candidate, frames: _measured(40.0), Limits(), 300)
    assert trial is not None
    text = status_text(trial, SearchResult([best, trial], best, None, live=trial))
    assert text == "live: p50 40 ms, not below 33 ms"


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


def test_tune_depth_searches_the_sizes_and_run_takes_the_chosen_one(
    tiny_depth_model: Path, small_video: Path, tiny_model: Path, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """Issue #34: with no --depth-size, `tune --depth` measures each size against FP32 at the
    largest (a smaller size's loss is in its score), the plan keeps the fastest within the
    budget with its size, and `run --depth` runs at that size unless one is given; the audit's
    reference runs at the size the plan was scored against. A candidate out at one size is not
    tried at the next."""
    from visionrt.errors import ModelLoadError
    from visionrt.tune import depth as depth_tuning

    root = tmp_path / "plans"
    monkeypatch.setenv("VISIONRT_PLANS", str(root))
    space = [DepthCandidate("onnxruntime", "fp32", reference=True),
             DepthCandidate("openvino", "fp32"), DepthCandidate("nope", "fp32")]  # fmt: skip
    monkeypatch.setattr(depth_tuning, "depth_candidates", lambda *a: space)
    timed: list[tuple[str, tuple[int, int]]] = []

    def time_model(model: Path, candidate: DepthCandidate, hw: tuple[int, int]) -> list[float]:
        if candidate.backend == "nope":
            raise ModelLoadError("no such runtime")
        timed.append((candidate.backend, hw))
        return [hw[0] * hw[1] / 100] * 8  # the smaller, the faster

    monkeypatch.setattr(depth_tuning, "_time_model", time_model)
    plan, path, trials = tune_depth(
        small_video, tiny_depth_model, None, DepthLimits(max_abs_rel=0.5, min_delta1=0.5),
        frames=3, sizes=(28, 42, 14),
    )  # fmt: skip
    assert [t.candidate.label for t in trials] == [
        "onnxruntime fp32 @42", "openvino fp32 @42", "nope fp32 @42",
        "onnxruntime fp32 @28", "openvino fp32 @28",
        "onnxruntime fp32 @14", "openvino fp32 @14",
    ]  # fmt: skip
    assert trials[2].why_out == "no such runtime"
    by_label = {t.candidate.label: t for t in trials}
    # Scored against FP32 at 42: at 42 OpenVINO is ONNX Runtime's twin, at 14 the size shows.
    assert by_label["openvino fp32 @42"].abs_rel < 1e-4
    assert by_label["onnxruntime fp32 @14"].abs_rel > by_label["openvino fp32 @42"].abs_rel
    assert plan.tuned["short_side"] == 14
    assert plan.tuned["sizes_searched"] == [42, 28, 14]
    assert plan.tuned["input_hw"][0] == 14
    assert "against FP32 at 42 (sizes 42, 28, 14 searched)" in plan.summary_line()
    values = {"model": str(tiny_model), "depth": {"model": str(tiny_depth_model)}}
    config, note = configure_run(None, False, None, None, values)
    assert (config.depth.short_side, config.depth.audit_short_side) == (14, 42), note
    assert f"depth plan {path.name}:" in note
    given = {**values, "depth": {**values["depth"], "short_side": 42}}
    config, note = configure_run(None, False, None, None, given)
    assert config.depth.short_side == 42
    assert "tuned at short side 14" in note
    # A tight budget keeps the size the reference was scored at; a size below one where
    # nothing held is not tried, and says so.
    plan, _, trials = tune_depth(
        small_video, tiny_depth_model, None, DepthLimits(max_abs_rel=1e-3), frames=3,
        sizes=(42, 28, 14), plans_root=tmp_path,
    )  # fmt: skip
    assert plan.tuned["short_side"] == 42
    assert [t.why_out.split(" ")[0] for t in trials[3:5]] == ["AbsRel", "AbsRel"]
    assert [(t.candidate.label, t.why_out) for t in trials[5:]] == [
        ("onnxruntime fp32 @14", "not tried: nothing held the budget at 28")
    ]


def test_depth_candidates_on_a_gpu_are_torch_on_cuda() -> None:
    """Issue #34: `tune --depth` on a GPU machine measures torch there (fp32, fp16 with CUDA
    graphs) beside the CPU's runtimes, and its plan's inference section says so."""
    machine = Machine(frozenset({"onnxruntime"}), gpu=frozenset({("torch", "cuda")}))
    found = depth_candidates(machine)
    assert [c.label for c in found] == [
        "onnxruntime fp32", "torch cuda fp32", "torch cuda fp16 graphs",
    ]  # fmt: skip
    fp16 = found[2]
    assert fp16.options((266, 350)).settings == {"cuda_graphs": "true"}
    assert fp16.options().device == "cuda"
    assert fp16.inference() == {
        "precision": "fp16", "device": "cuda", "settings": {"cuda_graphs": "true"},
    }  # fmt: skip
    assert found[0].inference() == {"precision": "fp32"}


def test_a_cached_depth_plan_answers_a_tune_of_the_size_it_was_tuned_at(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`tune --depth --if-missing` (and the demo) tune again unless the cached plan answers:
    with no size asked, one that searched the sizes; with a size, one tuned at it."""
    from visionrt.cli.tune_depth import cached_depth_plan
    from visionrt.plans import Plan, machine_fingerprint, plan_path

    monkeypatch.setenv("VISIONRT_PLANS", str(tmp_path / "plans"))
    model = tmp_path / "depth.onnx"
    model.write_bytes(b"a depth model")

    def cache(**tuned: object) -> None:
        path = plan_path(model, machine_fingerprint())
        path.parent.mkdir(parents=True, exist_ok=True)
        Plan(run={"model": str(model), "backend": "openvino"}, tuned=tuned).save(path)

    cache(task="detect", short_side=518, sizes_searched=[518, 364])
    assert cached_depth_plan(model, None) is None  # not a depth plan
    cache(task="depth", short_side=364, sizes_searched=[364], every={"chosen": 1})
    assert cached_depth_plan(model, None) is None  # one size tuned: the sizes not searched
    assert cached_depth_plan(model, 364) is not None
    assert cached_depth_plan(model, 518) is None
    cache(task="depth", short_side=364, sizes_searched=[518, 364, 266])
    assert cached_depth_plan(model, None) is None  # how often depth must run: not measured
    assert cached_depth_plan(model, None, every=False) is not None  # not asked (no detector)
    cache(task="depth", short_side=364, sizes_searched=[518, 364, 266], every={"chosen": 1})
    assert cached_depth_plan(model, None) is not None


def test_tune_with_depth_keeps_the_detectors_plan_and_says_so(
    tiny_model: Path,
    tiny_depth_model: Path,
    small_video: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Issue #47: `tune --depth` seemed to replace the detector's plan it had just tuned (two
    'cached as' lines, the second for the depth plan). It does not: each plan is a file named
    by its own model's content, and both stay; the depth plan's last line now says so."""
    from conftest import run_cli

    from visionrt.tune import depth as depth_tuning
    from visionrt.tune import tuner

    reference = Candidate("onnxruntime", "fp32", reference=True)
    monkeypatch.setattr(tuner, "candidates", lambda *args: [reference])
    depth_reference = DepthCandidate("onnxruntime", "fp32", reference=True)
    monkeypatch.setattr(depth_tuning, "depth_candidates", lambda *args: [depth_reference])
    root = tmp_path / "plans"
    monkeypatch.setenv("VISIONRT_PLANS", str(root))
    args = ["tune", str(small_video), "-m", str(tiny_model), "--no-motion",
            "--depth", str(tiny_depth_model), "--depth-size", "42"]  # fmt: skip
    exit_code, error = run_cli(args, capsys)
    assert exit_code == 0, error
    detector, depth = cached_plan(tiny_model, root), cached_plan(tiny_depth_model, root)
    assert detector is not None
    assert depth is not None
    assert detector[1] != depth[1]
    assert "task" not in detector[0].tuned  # the detector's own plan, as tuned
    assert depth[0].tuned["task"] == "depth"
    assert f"cached as {detector[1]}: a plain `visionrt run` with this model" in error
    assert (
        f"cached as {depth[1]}, beside the detector's plan {detector[1].name}, which is kept"
        in (error)
    )
