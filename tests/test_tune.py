"""The tuner's search on a fake evaluator with known costs and fidelity, its candidates, and plans
(round trip, cache, fingerprint)."""

from __future__ import annotations

from pathlib import Path

import pytest

from visionrt.plans import store as plans
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
from visionrt.tune.search import SearchResult, Trial
from visionrt.tune.tuner import tune_gpu_batch

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
    gpu = Plan(
        run={**plan.run, "inference": {**plan.run["inference"], "device": "cuda", "batch": 8}},
        tuned=plan.tuned,
    )
    assert gpu.summary_line().startswith("openvino on cuda int8 512×640 batch 8, tuned")


def test_a_time_boxed_plan_says_so_in_its_line(tmp_path: Path) -> None:
    """A search the budget cut short kept the best measured by then: the plan's line (what a
    run prints and keeps in summary.json notes) says so; a search that ran out does not."""
    model = tmp_path / "model.xml"
    model.write_text("<net/>")
    boxed = _plan(model)
    boxed.tuned["budget"] = {"minutes": 1.5, "reached": True}
    again = Plan.load(boxed.save(tmp_path / "plan.yaml"))
    assert again.time_boxed
    assert again.summary_line() == (
        "openvino int8 512×640, tuned 2026-11-22, 23.5 FPS, fidelity 0.983, time-boxed: the"
        " search stopped at its 1.5-min budget"
    )
    boxed.tuned["budget"] = {"minutes": 10, "reached": False}
    assert not boxed.time_boxed
    assert "time-boxed" not in boxed.summary_line()
    assert not _plan(model).time_boxed  # plans tuned before the budget was recorded


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
    for extra, runtime, said in (
        ([], "null", "null fp32, tuned 2026-11-22"),
        (["--no-plan"], "onnxruntime", ""),
        (["--backend", "openvino"], "openvino", "not used: --backend chose the configuration"),
    ):
        out = tmp_path / (runtime + "-out")
        proc = _cli(*base, *extra, "-o", str(out), env=env)
        assert proc.returncode == 0, proc.stderr
        summary = json.loads((out / "summary.json").read_text())
        assert summary["backend"]["runtime"] == runtime, extra
        if said:
            assert said in proc.stderr
            assert said in summary["notes"][0]
        else:
            assert "plan" not in proc.stderr, proc.stderr


GPU = Machine(
    frozenset({"onnxruntime", "openvino"}),
    frozenset({"avx512_vnni"}),
    int8_export=True,
    gpu=frozenset({("torch", "cuda"), ("tensorrt", "cuda"), ("onnxruntime", "cuda")}),
)


def test_gpu_candidates_follow_the_runtimes_present() -> None:
    found = candidates(GPU, (640, 640), (576, 768))
    on_gpu = [c for c in found if c.on_gpu]
    assert {(c.backend, c.device, c.precision) for c in on_gpu} == {
        ("tensorrt", "cuda", "fp16"),
        ("tensorrt", "cuda", "int8"),
        ("torch", "cuda", "fp16"),
        ("torch", "cuda", "bf16"),
        ("onnxruntime", "cuda", "fp32"),
        ("onnxruntime", "cuda", "fp16"),
    }
    assert {c.input_size for c in on_gpu} == {None, (512, 640)}  # native and grid-aligned
    assert all(c.batch == 1 for c in on_gpu)  # the batch is searched later
    # torch folds the host path's preprocessing into the device (uint8 up, scaled there)
    assert all(c.fold == (c.backend == "torch") for c in on_gpu)
    trt_int8 = next(c for c in on_gpu if c.precision == "int8")
    assert trt_int8.export == "onnx-int8-sym"  # the QDQ form TensorRT takes, calibrated
    torch_fp16 = next(c for c in on_gpu if c.backend == "torch")
    assert torch_fp16.options()["device"] == "cuda"
    assert torch_fp16.options()["settings"] == {"cuda_graphs": "true"}
    assert "@cuda" in torch_fp16.label
    torch_settings = {(c.precision, c.settings) for c in on_gpu if c.backend == "torch"}
    graphs = (("cuda_graphs", "true"),)
    assert torch_settings == {("fp16", graphs), ("bf16", graphs), ("fp16", ())}
    cpu_only = Machine(GPU.runtimes, GPU.cpu_features, int8_export=True)
    assert not any(c.on_gpu for c in candidates(cpu_only, (640, 640), (576, 768)))


class OutOfMemory(RuntimeError):
    pass


def _gpu_search(limits: Limits, batched: Measurement):
    """A finished search whose winner runs on the GPU at 120 FPS; `batched` is what the
    end-to-end run of the batch the model-only search picks measures."""
    chosen = Candidate("tensorrt", "fp16", device="cuda")
    evaluator = FakeEvaluator()
    trials = [Trial(REFERENCE, [Measurement(10, 60, 120, 1.0, 300)]),
              Trial(chosen, [Measurement(120, 8, 12, 0.99, 300)], reached=2)]  # fmt: skip
    search = SearchResult(trials, trials[1], trials[0])
    evaluated: list[Candidate] = []

    def evaluate(candidate: Candidate, frames: int) -> Measurement:
        evaluated.append(candidate)
        return batched if candidate.batch > 1 else trials[1].last

    tried: list[int] = []

    def measure(batch: int) -> float:  # doubling pays up to 8, 16 barely, 32 does not fit
        tried.append(batch)
        if batch >= 24:
            raise OutOfMemory("CUDA out of memory. Tried to allocate 2.00 GiB")
        return {1: 150.0, 2: 290.0, 4: 560.0, 8: 800.0, 16: 820.0}.get(batch, 810.0)

    found = tune_gpu_batch(search, evaluate, limits, 300, lambda c: measure)
    return search, found, evaluated, tried, evaluator


def test_gpu_batch_is_searched_and_confirmed_end_to_end() -> None:
    search, found, evaluated, tried, _ = _gpu_search(
        Limits(max_p99_ms=100), Measurement(310, 20, 40, 0.99, 300)
    )
    assert found is not None
    assert tried == [1, 2, 4, 8, 16]  # 16 gains < 1.05× over 8: doubling stops there
    assert found.best == 8  # the smallest batch within 5 % of the top
    assert [c.batch for c in evaluated] == [1, 8, 1, 8, 1, 8]  # alternating with batch 1
    assert "batch 8 310.0 FPS, batch 1 120.0 FPS" in found.confirmed
    assert search.best is not None
    assert search.best.candidate.batch == 8
    assert "batch 8" in search.best.candidate.label
    assert search.best.candidate.options()["batch"] == 8


def test_a_batch_over_the_latency_limit_is_not_chosen() -> None:
    search, found, _, _, _ = _gpu_search(Limits(max_p99_ms=30), Measurement(310, 20, 45, 0.99, 300))
    assert found is not None
    assert found.best == 8
    assert search.best is not None
    assert search.best.candidate.batch == 1
    batched = search.trials[-1]
    assert batched.candidate.batch == 8
    assert batched.why_out == "p99 45 ms > 30 ms"


def test_a_batch_no_faster_than_batch_1_end_to_end_is_not_kept() -> None:
    # Model-only, batch 8 pays; end to end (host-bound), it does not: the H200's 453 vs 472 FPS.
    # One run each in the machine's drift would have kept it (the first batched run is the
    # fastest of all); the medians of runs taken in turn do not.
    chosen = Trial(Candidate("torch", "fp16", device="cuda"), [Measurement(470, 2, 4, 1, 300)])
    search = SearchResult([chosen], chosen, None)
    single = iter([440.0, 472.0, 475.0])
    batched = iter([480.0, 453.0, 450.0])

    def evaluate(candidate: Candidate, frames: int) -> Measurement:
        fps = next(batched) if candidate.batch > 1 else next(single)
        return Measurement(fps, 3, 6, 1, frames)

    found = tune_gpu_batch(
        search, evaluate, Limits(), 300, lambda c: lambda b: {1: 500.0}.get(b, 900.0 + b)
    )
    assert found is not None
    assert found.best > 1
    assert search.best is chosen
    assert search.trials[-1].why_out.startswith("no faster than batch 1 end to end")
    assert "batch 1 472.0 FPS" in found.confirmed


def test_out_of_memory_bisects_and_cpu_plans_skip_the_batch_search() -> None:
    measure_calls: list[int] = []

    def measure(batch: int) -> float:
        measure_calls.append(batch)
        if batch > 20:
            raise OutOfMemory("CUDA out of memory")
        return 100.0 * batch

    chosen = Trial(Candidate("torch", "fp16", device="cuda"), [Measurement(90, 9, 12, 1, 300)])
    search = SearchResult([chosen], chosen, None)

    def evaluate(candidate: Candidate, frames: int) -> Measurement:
        return Measurement(900 if candidate.batch > 1 else 90, 30, 40, 1, frames)

    result = tune_gpu_batch(search, evaluate, Limits(), 300, lambda c: measure)
    assert result is not None
    assert result.largest_fit == 20
    assert result.best == 20
    assert search.best is not None
    assert search.best.candidate.batch == 20

    cpu = Trial(Candidate("openvino", "int8"), [Measurement(50, 9, 12, 0.98, 300)])
    never = tune_gpu_batch(
        SearchResult([cpu], cpu, None), lambda c, f: cpu.last, Limits(), 300, lambda c: measure
    )
    assert never is None
    assert measure_calls.count(1) == 1


@pytest.mark.openvino
def test_the_evaluator_runs_candidates_on_the_real_model(
    demo_model: Path, demo_video: Path
) -> None:
    pytest.importorskip("openvino")
    from visionrt.tune.batch import batch_throughput
    from visionrt.tune.evaluate import VideoEvaluator, backend_options

    evaluator = VideoEvaluator(demo_video, demo_model, fidelity_frames=8)
    reference = evaluator(REFERENCE, 8)
    assert (reference.error, reference.frames, reference.fidelity) == ("", 8, 1.0)
    smaller = Candidate("openvino", "fp32", (512, 640), fold=True, settings=(("hint", "latency"),))
    measured = evaluator(smaller, 8)
    assert measured.error == ""
    assert measured.frames == 8
    assert measured.fidelity > 0.9  # grid-aligned 512×640 FP32: 0.994 over 150 frames
    assert measured.fps > 0
    assert measured.p99_ms >= measured.p50_ms > 0
    # What tune hands the batch search: the candidate's run config as backend options.
    config = evaluator.run_config(smaller)
    options = backend_options(config["inference"])
    assert (options.device, options.batch, options.input_size) == ("cpu", 1, (512, 640))
    assert options.fold_preprocess
    measure = batch_throughput(config["model"], smaller.backend, options, str(demo_video), calls=2)
    assert measure(1) > 0
    assert measure(2) > 0  # the batch-2 rewrite of the batch-1 model runs
    # The batch search's confirming run: the same candidate at batch 2, end to end.
    batched = evaluator(Candidate("onnxruntime", "fp32", batch=2), 8)
    assert (batched.error, batched.frames) == ("", 8)
    assert batched.fidelity > 0.99  # the reference's own model and runtime, two frames a call
    broken = evaluator(Candidate("openvino", "int8"), 8)  # int8 on the float model
    assert "not quantized" in broken.error  # one line; the search marks it out


def test_gpu_runtimes_need_a_gpu_the_driver_sees(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import onnxruntime as ort

    from visionrt.backends import gpus as tuner

    monkeypatch.setattr(tuner, "NVIDIA_GPUS", tmp_path / "absent")
    assert tuner.gpu_runtimes() == frozenset()  # no driver: nothing imported, nothing offered
    (tmp_path / "gpus" / "0000:01:00.0").mkdir(parents=True)
    monkeypatch.setattr(tuner, "NVIDIA_GPUS", tmp_path / "gpus")
    providers = ["TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"]
    monkeypatch.setattr(ort, "get_available_providers", lambda: providers)
    found = tuner.gpu_runtimes()
    assert {("onnxruntime", "cuda"), ("onnxruntime", "tensorrt")} <= found
    torch = pytest.importorskip("torch")
    assert (("torch", "cuda") in found) == torch.cuda.is_available()


# -- issue #47: what `tune` says and how long it takes, on the real pipeline -------------------
SPIN_OFF = Candidate("onnxruntime", "fp32", settings=(("spin", "false"),))
PLAIN = Candidate("onnxruntime", "fp32", settings=(("plain", "true"),))


class TickingClock:
    """A fake clock on which each frame a tune's pipeline reads takes one second (the frames in
    flight when it is stopped were read before: they add none)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def pipelines(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from visionrt.pipeline import Pipeline as real
        from visionrt.tune import evaluate

        clock = self

        class Ticking:
            def __init__(self, *args: object, **kwargs: object) -> None:
                self.inner = real(*args, **kwargs)  # type: ignore[arg-type]
                self.stopped = False

            def __iter__(self):  # type: ignore[no-untyped-def]
                for result in self.inner:
                    clock.now += 0.0 if self.stopped else 1.0
                    yield result

            def stop(self) -> None:
                self.stopped = True
                self.inner.stop()

            def close(self) -> None:
                self.inner.close()

            def summary(self):  # type: ignore[no-untyped-def]
                return self.inner.summary()

        monkeypatch.setattr(evaluate, "Pipeline", Ticking)


@pytest.mark.parametrize(
    ("budget_s", "cut_in"),
    [
        (30.0, "search"),  # 3 × 10 frames, then the second round starts at the budget
        (100.0, "motion"),  # the search's 90 frames fit; gating off's first run crosses it
    ],
)
def test_the_budget_bounds_every_phase_of_a_tune(
    small_video: Path,
    tiny_model: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    budget_s: float,
    cut_in: str,
) -> None:
    """Issue #47: `--budget-minutes 1` ran over 300 s: the budget was looked at only between
    the search's runs, so a final round started just before it ran to its end, and the live
    twin and motion gating ran after it. Now nothing starts past it and the run under way is
    stopped (its frames in flight finished, none read after): the tune reads no frame past its
    budget but the one on which it ran out, keeps the best measured by then, and its plan says
    it was time-boxed."""
    from visionrt.tune import ladder, tuner

    monkeypatch.setattr(tuner, "candidates", lambda *args: [REFERENCE, SPIN_OFF, PLAIN])
    monkeypatch.setattr(ladder, "SHARES", ())  # no smaller size: the ladder's own test
    clock = TickingClock()
    clock.pipelines(monkeypatch)
    said: list[str] = []
    outcome = tuner.tune(small_video, tiny_model, Limits(budget_s=budget_s), rounds=(10, 20),
                         plans_root=tmp_path, on_motion=said.append, clock=clock)  # fmt: skip
    assert clock.now <= budget_s + 1  # the frame on which the budget ran out
    assert outcome.plan is not None
    assert outcome.path is not None
    assert outcome.search.out_of_time
    assert outcome.plan.time_boxed
    budget = {"minutes": round(budget_s / 60, 2), "reached": True}
    assert Plan.load(outcome.path).tuned["budget"] == budget
    trials = {t.candidate.label: t for t in outcome.search.trials}
    if cut_in == "search":
        # The first round's runs are kept, the one the budget cut is not.
        assert [len(t.runs) for t in trials.values()] == [1, 1, 1]
        assert outcome.plan.tuned["motion"]["skipped"] == "the search's budget was spent"
    else:
        assert all(t.last.frames == 20 for t in trials.values())  # the search ran to its end
        assert "motion: budget reached during repeat 1 of 3" in said
        assert outcome.plan.tuned["motion"]["chosen"] == "off"


def test_tune_says_the_frames_each_run_went_over(
    tiny_model: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Issue #47: on a 30-frame video the progress lines said "60 frames" and "300 frames" where
    the table said 30: each line says the frames the run went over (a failed run the frames it
    was asked for, at most the video's)."""
    from conftest import run_cli, write_video

    from visionrt.tune import ladder, tuner

    broken = Candidate("onnxruntime", "fp32", export="no-such-target")
    monkeypatch.setattr(tuner, "candidates", lambda *args: [REFERENCE, SPIN_OFF, broken])
    monkeypatch.setattr(ladder, "SHARES", ())  # how far a ladder goes is this machine's to say
    monkeypatch.setenv("VISIONRT_PLANS", str(tmp_path / "plans"))
    video = write_video(tmp_path / "short.mp4", frames=30)
    exit_code, error = run_cli(["tune", str(video), "-m", str(tiny_model), "--no-motion"], capsys)
    assert exit_code == 0, error
    lines = [line for line in error.splitlines() if " frames: " in line]
    assert len(lines) == 6  # 60 frames: all three; 150: the one left; 300: it and the reference
    assert all(" · 30 frames: " in line for line in lines), lines
    assert "export target 'no-such-target'" in lines[2]
