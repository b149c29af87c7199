"""`visionrt demo` (`make demo`): results before the tune on a machine with no plan, one run on a
plan once there is one, each run's line saying which configuration it used and where its results
are; what a failing or interrupted step leaves; the Makefile's recipes."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from visionrt.cli import demo
from visionrt.plans import Plan

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = {"runtime": "onnxruntime", "precision": "fp32", "input_hw": [640, 640]}
PLANNED = {"runtime": "openvino", "precision": "int8", "input_hw": [512, 640]}


def _plan(**tuned: object) -> Plan:
    return Plan(
        run={"model": "m.xml", "backend": "openvino", "inference": {"precision": "int8"}},
        tuned={"at": "2026-11-28T10:00:00+00:00", "input_hw": [512, 640],
               "measured": {"fps": 27.3, "fidelity": 0.979}, **tuned},
    )  # fmt: skip


class FakeMachine:
    """`visionrt` commands that record themselves: a run writes the summary.json of the
    configuration in use (a plan once one is cached), a tune caches `tuned` (None: it finds
    none). `codes` gives a step's exit code by its place in the order."""

    def __init__(self, out: Path, plan: Plan | None, tuned: Plan | None = None,
                 codes: dict[int, int] | None = None) -> None:  # fmt: skip
        self.out, self.plan, self.tuned, self.codes = out, plan, tuned, codes or {}
        self.events: list[str] = []

    def command(self, argv: list[str]) -> int:
        self.events.append(" ".join(argv))
        code = self.codes.get(len(self.events), 0)
        if argv[0] == "tune" and code == 0:
            self.plan = self.tuned
        if argv[0] == "run" and code in (0, 130):  # an interrupted run finalizes its outputs
            self.out.mkdir(parents=True, exist_ok=True)
            backend = PLANNED if self.plan is not None else REFERENCE
            files = [str(self.out / n) for n in ("vtest.mp4", "vtest.jsonl", "summary.json")]
            summary = {"backend": backend, "fps": 26.4 if self.plan else 6.1, "outputs": files}
            (self.out / "summary.json").write_text(json.dumps(summary))
        return code

    def say(self, line: str) -> None:
        self.events.append(line)

    def demo(self, given: tuple[str, ...] = (), overwrite: bool = False) -> int:
        return demo.run_demo(
            self.out, list(given), 10, lambda: self.plan, self.command, self.say, overwrite
        )


FIRST = "run --out {out}"  # the demo's first run claims the folder as any run does
RUN = "run --out {out} --overwrite"  # the run on the plan replaces the demo's own first
TUNE = "tune --if-missing --budget-minutes 10"


def test_without_a_plan_the_reference_results_come_before_the_tune(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    machine = FakeMachine(out, None, tuned=_plan())
    assert machine.demo() == 0
    run = RUN.format(out=out)
    first, tuning, plan_line = machine.events[1], machine.events[2], machine.events[5]
    assert machine.events == [FIRST.format(out=out), first, tuning, TUNE, run, plan_line]
    assert first == (
        "demo: results of the FP32 reference, while this machine's plan is not ready — this run"
        f" onnxruntime fp32 640×640, 6.1 FPS — in {out}: vtest.mp4, vtest.jsonl, summary.json"
    )
    assert tuning.startswith("demo: tuning this machine's plan now (at most 10 min, once;")
    assert plan_line == (
        "demo: results of the tuned plan (openvino int8 512×640, tuned 2026-11-28, 27.3 FPS,"
        " fidelity 0.979) — this run openvino int8 512×640, 26.4 FPS — in"
        f" {out}: vtest.mp4, vtest.jsonl, summary.json; they replace the reference's"
    )


def test_with_a_plan_the_demo_is_one_run_on_it(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    machine = FakeMachine(out, _plan())
    assert machine.demo(("clip.mp4", "--model", "m.onnx")) == 0
    assert machine.events[0] == f"run clip.mp4 --model m.onnx --out {out}"
    assert len(machine.events) == 2
    overwriting = FakeMachine(out, _plan())
    assert overwriting.demo(overwrite=True) == 0
    assert overwriting.events[0] == f"run --out {out} --overwrite"
    assert machine.events[1].startswith("demo: results of the tuned plan (openvino int8 512×640")
    assert not any(event.startswith("tune") for event in machine.events)


def test_a_time_boxed_plan_is_named_so(tmp_path: Path) -> None:
    boxed = _plan(budget={"minutes": 1.5, "reached": True})
    machine = FakeMachine(tmp_path / "demo", None, tuned=boxed)
    assert machine.demo() == 0
    assert machine.events[-1].startswith("demo: results of the time-boxed plan (openvino int8")


@pytest.mark.parametrize(
    ("failing", "code", "ran", "last"),
    [
        # The reference's run: its own line says why; nothing is tuned.
        (1, 130, ["run"], "run"),
        (1, 3, ["run"], "run"),
        # The tune: the reference's results are what the folder holds, no plan cached.
        (4, 130, ["run", "tune"], "demo: no plan cached; {out} holds the FP32 reference's"),
        (4, 2, ["run", "tune"], "demo: no plan cached; {out} holds the FP32 reference's"),
        # The run on the plan: the plan is cached, the folder holds what that run finished.
        (5, 130, ["run", "tune", "run"], "demo: the plan is cached (the next run uses it)"),
    ],
    ids=["reference-interrupted", "reference-failed", "tune-interrupted", "tune-failed",
         "plan-run-interrupted"],
)  # fmt: skip
def test_a_failing_step_ends_the_demo_with_its_code(
    tmp_path: Path, failing: int, code: int, ran: list[str], last: str
) -> None:
    out = tmp_path / "demo"
    machine = FakeMachine(out, None, tuned=_plan(), codes={failing: code})
    assert machine.demo() == code
    commands = [e.split()[0] for e in machine.events if not e.startswith("demo:")]
    assert commands == ran
    assert machine.events[-1].startswith(last.format(out=out))


def test_the_demo_command_runs_the_reference_tunes_and_runs_the_plan(
    tmp_path: Path, small_video: Path, tiny_model: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    """The real commands, in this process, with a tune cut to its first measurement: the
    search's clock passes the budget once the first candidate has been measured (a wall-clock
    budget would leave this to the machine's speed), so the plan it caches is time-boxed, and
    the second run uses it and says so."""
    from conftest import run_cli

    from visionrt.plans import cached_plan
    from visionrt.tune import search as search_module
    from visionrt.tune import tuner

    real = search_module.successive_halving

    def cut_after_first(*args: object, **kwargs: object) -> search_module.SearchResult:
        ticks = iter([0.0, 0.0])  # the start, the check before the first candidate

        def clock() -> float:
            return next(ticks, 1e9)  # every later check: far past any budget

        kwargs.update(clock=clock, started=0.0)  # the search's own clock, from its start
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(tuner, "successive_halving", cut_after_first)
    monkeypatch.setenv("VISIONRT_PLANS", str(tmp_path / "plans"))
    # No depth model built for this demo (`make test` builds one in ~/.cache: planning it here
    # would take minutes); the demo says how to get one planned.
    monkeypatch.setattr("visionrt.models.depth_model_target", lambda: tmp_path / "none.onnx")
    out = tmp_path / "demo"
    argv = ["demo", str(small_video), "-m", str(tiny_model), "-o", str(out)]
    code, err = run_cli([*argv, "--budget-minutes", "0.01"], capsys)
    assert code == 0, err
    said = [line for line in err.splitlines() if line.startswith("demo:")]
    assert said[0].startswith("demo: results of the FP32 reference, while this machine's plan")
    assert said[0].endswith(f"in {out}: small.mp4, small.jsonl, summary.json")
    assert said[-2].startswith("demo: results of the time-boxed plan (")
    assert said[-1].startswith("demo: no depth model here, none planned: `make depth-model`")
    found = cached_plan(tiny_model)
    assert found is not None
    plan, _ = found
    assert plan.time_boxed
    summary = json.loads((out / "summary.json").read_text())
    assert summary["frames_out"] == 40
    assert summary["notes"][0].startswith(f"plan {found[1].name}: ")
    assert "time-boxed" in summary["notes"][0]
    # A second demo into the folder refuses the first's results, as any run does; with
    # --overwrite (make demo passes it), once the plan is there, the demo is one run on it.
    code, err = run_cli(argv, capsys)
    assert code == 2, err
    assert "holds another run's outputs" in err
    code, err = run_cli([*argv, "--overwrite"], capsys)
    assert code == 0, err
    said = [line for line in err.splitlines() if line.startswith("demo:")]
    assert len(said) == 2, err
    assert said[0].startswith("demo: results of the time-boxed plan (")


@pytest.mark.parametrize(
    ("built", "planned", "code", "said"),
    [
        (True, False, 0, ["demo: planning the depth model depth.onnx too", "tune"]),
        (True, True, 0, []),  # planned before: nothing to do, nothing said
        (False, False, 0, ["demo: no depth model here, none planned: `make depth-model`"]),
        (True, False, 130, ["demo: planning", "tune", "demo: no depth plan cached;"]),
        (True, False, 2, ["demo: planning", "tune", "demo: no depth plan cached;"]),
    ],
    ids=["plans-it", "cached", "no-model", "interrupted", "failed"],
)  # fmt: skip
def test_after_the_detector_the_demo_plans_the_depth_model_once(
    tmp_path: Path, built: bool, planned: bool, code: int, said: list[str]
) -> None:
    """So that the seed scenario as typed after `make demo` runs depth on its plan, not FP32 at
    518 (1.57 FPS per camera here, 3.6 on the plan: docs/benchmarks.md)."""
    depth = tmp_path / "depth.onnx"
    machine = FakeMachine(tmp_path / "demo", _plan(), codes={2: code})  # its tune, after a line
    given = ["clip.mp4", "--model", "m.onnx"]
    got = demo.plan_depth(
        given, depth if built else None, lambda: planned, machine.command, machine.say
    )
    assert got == code
    assert len(machine.events) == len(said)
    for event, start in zip(machine.events, said, strict=True):
        assert event.startswith(start), machine.events
    if built and not planned:
        assert machine.events[1] == f"tune clip.mp4 --model m.onnx --if-missing --depth {depth}"


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_during_the_tune_keeps_the_reference_results_and_caches_nothing(
    tmp_path: Path, small_video: Path, tiny_model: Path, sig: signal.Signals
) -> None:
    plans, out = tmp_path / "plans", tmp_path / "demo"
    proc = subprocess.Popen(
        [sys.executable, "-m", "visionrt.cli.main", "demo", str(small_video), "-m",
         str(tiny_model), "-o", str(out)],
        stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
        env={**os.environ, "VISIONRT_PLANS": str(plans)}, start_new_session=True,
    )  # fmt: skip
    assert proc.stderr is not None
    lines: list[str] = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # the reference's results are out, the tune under way
        lines.append(proc.stderr.readline())
        tuning = any(line.startswith("demo: tuning") for line in lines)
        if (tuning and " frames: " in lines[-1]) or not lines[-1]:
            break
    assert " frames: " in lines[-1], "".join(lines)
    proc.send_signal(sig)
    _, rest = proc.communicate(timeout=60)
    assert proc.returncode == 130, "".join(lines) + rest
    assert "Traceback" not in rest, rest
    said = rest.strip().splitlines()
    assert said[-2] == f"demo: no plan cached; {out} holds the FP32 reference's results", rest
    assert said[-1] == "visionrt: error: demo interrupted"
    assert not plans.exists() or not any(plans.iterdir())
    assert json.loads((out / "summary.json").read_text())["frames_out"] == 40
    assert not list(out.glob("*.partial*"))


@pytest.mark.parametrize("budget", ["0", "nan", "-1"])
def test_a_bad_budget_is_refused_before_anything_runs(
    tmp_path: Path, budget: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from conftest import run_cli

    out = tmp_path / "demo"
    code, err = run_cli(["demo", "-o", str(out), "--budget-minutes", budget], capsys)
    assert code == 2
    assert err.strip().splitlines() == [
        f"visionrt: error: --budget-minutes: expected a number of minutes > 0, got {float(budget)}"
    ]
    assert not out.exists()


def _make_dry_run(target: str, venv: Path) -> list[str]:
    """The commands `make TARGET` would run, its set-up done (a fresh venv stamp)."""
    (venv / "bin").mkdir(parents=True)
    (venv / ".installed").touch()  # newer than the checkout's pyproject.toml and setup.sh
    proc = subprocess.run(
        ["make", "-n", "-C", str(ROOT), target, f"VENV={venv}"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return [line for line in proc.stdout.splitlines() if not line.startswith("make")]


@pytest.mark.skipif(shutil.which("make") is None, reason="make not installed")
def test_make_demo_is_one_command_and_builds_no_depth_model(tmp_path: Path) -> None:
    assert _make_dry_run("demo", tmp_path / "venv") == [
        f"{tmp_path / 'venv'}/bin/visionrt demo --out out/demo --overwrite"
    ]


@pytest.mark.skipif(shutil.which("make") is None, reason="make not installed")
def test_make_test_builds_the_depth_model_before_the_tests(tmp_path: Path) -> None:
    steps = _make_dry_run("test", tmp_path / "venv")
    depth = next(i for i, s in enumerate(steps) if "scripts/setup_depth.sh" in s)
    tests = next(i for i, s in enumerate(steps) if "-m pytest" in s)
    assert depth < tests, steps
