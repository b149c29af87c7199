"""The tuner's search on a fake evaluator with known costs and fidelity, its candidates, and plans
(round trip, cache, fingerprint)."""

from __future__ import annotations

from pathlib import Path

import pytest

from visionrt.tune import (
    Candidate,
    Limits,
    Machine,
    Measurement,
    Plan,
    aligned_sizes,
    candidates,
    successive_halving,
)
from visionrt.tune import plan as plans

REFERENCE = Candidate("onnxruntime", "fp32", reference=True)
# name → (fps, p99 ms, fidelity): the fastest is inaccurate, the next has a slow tail.
KNOWN = {
    "fast-but-wrong": (90.0, 20.0, 0.80),
    "fast-slow-tail": (70.0, 400.0, 0.99),
    "best": (60.0, 40.0, 0.97),
    "runner-up": (40.0, 50.0, 0.99),
    "slow": (20.0, 80.0, 1.00),
    "broken": (0.0, 0.0, 0.0),
}


def _candidate(name: str) -> Candidate:
    return Candidate("openvino", "int8", settings=(("name", name),))


class FakeEvaluator:
    """Known figures per candidate, with a fake clock that advances by the frames 'run'."""

    def __init__(self, seconds_per_frame: float = 0.01) -> None:
        self.now = 0.0
        self.calls: list[tuple[str, int]] = []
        self.seconds_per_frame = seconds_per_frame

    def clock(self) -> float:
        return self.now

    def __call__(self, candidate: Candidate, frames: int) -> Measurement:
        name = "reference" if candidate.reference else dict(candidate.settings)["name"]
        self.calls.append((name, frames))
        self.now += frames * self.seconds_per_frame
        if name == "broken":
            return Measurement(0, 0, 0, 0, 0, error="cannot load")
        fps, p99, fid = (10.0, 120.0, 1.0) if name == "reference" else KNOWN[name]
        return Measurement(fps, p99 / 2, p99, fid, frames)


def _search(limits: Limits, evaluator: FakeEvaluator | None = None):
    evaluator = evaluator or FakeEvaluator()
    space = [REFERENCE, *(_candidate(n) for n in KNOWN)]
    return evaluator, successive_halving(space, evaluator, limits, clock=evaluator.clock)


def test_search_finds_the_known_optimum_within_budgets() -> None:
    evaluator, result = _search(Limits(min_fidelity=0.95, max_p99_ms=100))
    assert result.best is not None
    assert dict(result.best.candidate.settings)["name"] == "best"
    outs = {dict(t.candidate.settings).get("name"): t.why_out for t in result.trials}
    assert outs["fast-but-wrong"] == "fidelity 0.800 < 0.95"
    assert outs["fast-slow-tail"] == "p99 400 ms > 100 ms"
    assert outs["broken"] == "cannot load"
    # Successive halving: everything ran the short round, only finalists the long one.
    long_runs = {name for name, frames in evaluator.calls if frames == 300}
    assert long_runs == {"best", "runner-up", "reference"}
    assert result.reference is not None
    assert [run.frames for run in result.reference.runs] == [60, 300]  # first and last round


def test_without_a_latency_limit_the_fastest_accurate_one_wins() -> None:
    _, result = _search(Limits(min_fidelity=0.95))
    assert result.best is not None
    assert dict(result.best.candidate.settings)["name"] == "fast-slow-tail"


def test_latency_objective_picks_the_lowest_tail() -> None:
    _, result = _search(Limits(min_fidelity=0.95, objective="latency"))
    assert result.best is not None
    assert dict(result.best.candidate.settings)["name"] == "best"


def test_search_stops_within_its_budget() -> None:
    # 0.1 s per frame: the first round alone costs 7 × 6 s; the budget allows ~25 s.
    evaluator, result = _search(Limits(budget_s=25), FakeEvaluator(seconds_per_frame=0.1))
    assert result.out_of_time
    assert evaluator.now <= 25 + 60 * 0.1  # at most the one run that was under way
    assert result.best is not None  # the best measured so far


def test_the_reference_wins_when_nothing_beats_it() -> None:
    evaluator = FakeEvaluator()

    def evaluate(candidate: Candidate, frames: int) -> Measurement:
        if candidate.reference:  # here the reference is the fastest (50 FPS against 20)
            return Measurement(50.0, 10, 20, 1.0, frames)
        return evaluator(candidate, frames)

    space = [REFERENCE, _candidate("slow")]
    result = successive_halving(space, evaluate, Limits(), clock=evaluator.clock)
    assert result.best is not None
    assert result.best.candidate.reference


def test_nothing_within_the_budget_gives_no_plan() -> None:
    _, result = _search(Limits(min_fidelity=1.01))
    assert result.best is None


@pytest.mark.parametrize(
    ("source_hw", "expected"),
    [
        ((576, 768), [(512, 640)]),  # MEASUREMENTS.md: 80 px pad at 640 → 16 px pads at 512
        ((720, 1280), [(384, 640)]),  # 140 px pad (12 mod 32) → 12 px pads at 384
        ((640, 480), [(640, 512)]),  # portrait: the width shrinks
        ((640, 640), []),  # nothing padded, nothing to remove
    ],
)
def test_aligned_sizes_keep_the_grid_phase(source_hw, expected) -> None:
    assert aligned_sizes(source_hw, (640, 640)) == expected


def test_candidates_follow_the_hardware() -> None:
    both = frozenset({"onnxruntime", "openvino"})
    no_bf16 = Machine(both, frozenset({"avx512_vnni"}), int8_export=True)
    labels = [c.label for c in candidates(no_bf16, (640, 640), (576, 768))]
    assert labels[0] == "onnxruntime fp32 native"
    assert not any("bf16" in label for label in labels)
    assert "openvino int8 512×640 hint=throughput fold" in labels
    bf16 = Machine(both, frozenset({"avx512_vnni", "avx512_bf16"}), int8_export=True)
    assert any("bf16" in c.label for c in candidates(bf16, (640, 640), (576, 768)))
    no_vnni = Machine(both, frozenset({"avx2"}), int8_export=True)
    assert not any(c.precision == "int8" for c in candidates(no_vnni, (640, 640), (576, 768)))
    ort_only = Machine(frozenset({"onnxruntime"}), frozenset({"avx512_vnni"}))
    assert candidates(ort_only, (640, 640), (576, 768)) == [REFERENCE]


def _plan(model: Path) -> Plan:
    return Plan(
        run={
            "model": str(model),
            "backend": "openvino",
            "inference": {
                "precision": "int8",
                "input_size": None,
                "fold_preprocess": True,
                "settings": {"hint": "throughput"},
            },
        },
        tuned={
            "at": "2026-11-22T15:00:00+00:00",
            "measured": {"fps": 23.5, "fidelity": 0.983},
            "input_hw": [512, 640],
            "fingerprint": plans.machine_fingerprint(),
        },
    )


def test_plan_round_trip(tmp_path: Path) -> None:
    model = tmp_path / "model.xml"
    model.write_text("<net/>")
    plan = _plan(model)
    path = plan.save(tmp_path / "plan.yaml")
    again = Plan.load(path)
    assert again.run == plan.run
    assert again.tuned == plan.tuned
    assert again.summary_line() == (
        "openvino int8 512×640, tuned 2026-11-22, 23.5 FPS, fidelity 0.983"
    )
    assert plans.fingerprint_differences(again) == []


def test_plan_cache_is_per_model_and_machine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = tmp_path / "detector.onnx"
    source.write_bytes(b"model bytes")
    artifact = tmp_path / "model.xml"
    artifact.write_text("<net/>")
    root = tmp_path / "plans"
    assert plans.cached_plan(source, root) is None
    _plan(artifact).save(plans.plan_path(source, plans.machine_fingerprint(), root))
    found = plans.cached_plan(source, root)
    assert found is not None
    assert found[0].run["model"] == str(artifact)
    # Another machine (here: another CPU) has its own plan, and this one's is not used there.
    real = plans.machine_fingerprint()
    monkeypatch.setattr(plans, "machine_fingerprint", lambda: {**real, "cpu": "Other CPU"})
    assert plans.cached_plan(source, root) is None
    assert plans.fingerprint_differences(found[0]) == [
        f"cpu: tuned on {real['cpu']!r}, this machine 'Other CPU'"
    ]


def test_a_plan_whose_artifact_is_gone_is_not_used(tmp_path: Path) -> None:
    source = tmp_path / "detector.onnx"
    source.write_bytes(b"model bytes")
    root = tmp_path / "plans"
    _plan(tmp_path / "deleted.xml").save(plans.plan_path(source, plans.machine_fingerprint(), root))
    assert plans.cached_plan(source, root) is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[1, 2]", "expected a visionrt plan"),
        ("model: a.onnx\nbackend: openvino\nextra: 1\n", "unknown section 'extra'"),
        ("model: [", "not valid YAML"),
    ],
)
def test_bad_plan_files_are_one_line_errors(tmp_path: Path, text: str, message: str) -> None:
    from visionrt.errors import ConfigError

    path = tmp_path / "plan.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        Plan.load(path)


def _cli(*args: str, env: dict[str, str] | None = None):
    import os
    import subprocess
    import sys

    return subprocess.run(
        [sys.executable, "-m", "visionrt.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )


def _tiny_plan(model: Path, fingerprint: dict) -> Plan:
    """A plan `run` can execute here: the null backend on the tiny model."""
    plan = _plan(model)
    plan.run.update(backend="null", inference={"precision": "fp32", "settings": {"delay_ms": "1"}})
    plan.tuned.update(measured={"fps": 99.0, "fidelity": 1.0}, fingerprint=fingerprint)
    del plan.tuned["input_hw"]
    return plan


def test_run_plan_reproduces_every_setting(
    tmp_path: Path, small_video: Path, tiny_model: Path
) -> None:
    import json

    plan_file = _tiny_plan(tiny_model, plans.machine_fingerprint()).save(tmp_path / "plan.yaml")
    proc = _cli("run", str(small_video), "--plan", str(plan_file), "-o", str(tmp_path), "-q")
    assert proc.returncode == 0, proc.stderr
    assert f"plan {plan_file}: null fp32, tuned 2026-11-22, 99.0 FPS" in proc.stderr
    assert "warning" not in proc.stderr
    backend = json.loads((tmp_path / "summary.json").read_text())["backend"]
    assert (backend["runtime"], backend["precision"], backend["input_hw"]) == ("null", "none",
                                                                            [64, 64])  # fmt: skip


def test_a_plan_from_another_machine_warns(
    tmp_path: Path, small_video: Path, tiny_model: Path
) -> None:
    other = {**plans.machine_fingerprint(), "cpu": "Some Other CPU"}
    plan_file = _tiny_plan(tiny_model, other).save(tmp_path / "plan.yaml")
    proc = _cli("run", str(small_video), "--plan", str(plan_file), "-o", str(tmp_path), "-q")
    assert proc.returncode == 0, proc.stderr
    assert "warning: this machine differs from the plan's: cpu: tuned on 'Some Other CPU'" in (
        proc.stderr.replace("\n", " ")
    )


def test_plain_run_uses_the_cached_plan_and_flags_override_it(
    tmp_path: Path, small_video: Path, tiny_model: Path
) -> None:
    import json

    root = tmp_path / "plans"
    _tiny_plan(tiny_model, plans.machine_fingerprint()).save(
        plans.plan_path(tiny_model, plans.machine_fingerprint(), root)
    )
    env = {"VISIONRT_PLANS": str(root)}
    base = ["run", str(small_video), "-m", str(tiny_model), "-q", "--no-video"]
    for extra, runtime in (([], "null"), (["--no-plan"], "onnxruntime"),
                           (["--backend", "openvino"], "openvino")):  # fmt: skip
        out = tmp_path / (runtime + "-out")
        proc = _cli(*base, *extra, "-o", str(out), env=env)
        assert proc.returncode == 0, proc.stderr
        summary = json.loads((out / "summary.json").read_text())
        assert summary["backend"]["runtime"] == runtime, extra
        assert ("plan " in proc.stderr) == (not extra), proc.stderr
