"""`visionrt demo`: results from the first seconds after set-up on a machine with no tuned plan
yet — the FP32 reference's run first, then `tune`, then the run again on the plan it cached —
each run followed by one line saying which configuration it used and where its results are."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from visionrt.cli.signals import STARTUP
from visionrt.errors import ConfigError, Interrupted
from visionrt.plans import Plan, PlanRequest, use_plan

Opt = typer.Option
Command = Callable[[list[str]], int]  # one `visionrt` command line → its exit code
Say = Callable[[str], None]
PlanReady = Callable[[], Plan | None]  # the plan a plain run would use now, or None


# The command line's own entry (cli.main.main), handed over by `register`: importing it here
# would make cli.main and cli.demo import each other.
_MAIN: list[Callable[[list[str]], None]] = []


def visionrt_command(argv: list[str]) -> int:
    """`visionrt ARGV` in this process, as if typed: its own progress, signal handling and
    one-line errors (the handlers in place before are put back after); its exit code."""
    try:
        _MAIN[0](argv)
    except SystemExit as done:
        return done.code if isinstance(done.code, int) else 1
    finally:
        STARTUP.during = ""  # what `run` said of its start-up is not said of the demo's steps
    return 0


def ready_plan(model: Path | None) -> PlanReady:
    """The plan a plain `run` of `model` (None: the demo model) takes, as `run` decides it."""

    def ready() -> Plan | None:
        use = use_plan(PlanRequest(model))
        return use.plan if use.sections is not None else None

    return ready


def run_demo(
    out: Path,
    given: list[str],
    budget_minutes: float,
    plan_ready: PlanReady,
    command: Command,
    say: Say,
    overwrite: bool = False,
) -> int:
    """With a plan ready, one run on it. Without, the reference's run first (its results are
    the first ones, minutes sooner than after a tune), then `tune` and the run again on the
    plan it cached, into the same folder, replacing the reference's. The first run claims the
    folder as any run does (an earlier run's outputs there refused unless `overwrite`).
    `given` are the video and model flags; the exit code is the first failing step's (130
    when interrupted), and then nothing later runs."""
    first = ["run", *given, "--out", str(out), *(["--overwrite"] if overwrite else [])]
    run = ["run", *given, "--out", str(out), "--overwrite"]  # after the demo's own first run
    plan = plan_ready()
    if plan is not None:
        code = command(first)
        if code == 0:
            say(results_line(out, plan_label(plan)))
        return code
    code = command(first)
    if code != 0:
        return code  # its own line said why; nothing tuned
    say(results_line(out, "the FP32 reference, while this machine's plan is not ready"))
    say(
        f"demo: tuning this machine's plan now (at most {budget_minutes:g} min, once; the"
        f" results above stay in {out} meanwhile), then running the demo on it"
    )
    code = command(["tune", *given, "--if-missing", "--budget-minutes", f"{budget_minutes:g}"])
    if code != 0:
        say(f"demo: no plan cached; {out} holds the FP32 reference's results")
        return code
    plan = plan_ready()
    code = command(run)
    if code == 0:
        label = plan_label(plan) if plan is not None else "the FP32 reference (no plan serves it)"
        say(results_line(out, label, "they replace the reference's"))
    elif plan is not None:
        say(f"demo: the plan is cached (the next run uses it); {out} holds what this run finished")
    return code


def plan_depth(
    given: list[str], depth: Path | None, planned: Callable[[], bool], command: Command, say: Say
) -> int:
    """After the detector's results, the depth model's plan too (`tune --depth`, once), so
    `run --depth` runs on it as typed, not FP32 at 518. `depth` None: no depth model is built
    here (`make demo` builds none); `planned`: its plan for this machine is cached already."""
    if depth is None:
        say(
            "demo: no depth model here, none planned: `make depth-model` builds the"
            " architecture-only one, `visionrt tune --depth MODEL` plans it for `run --depth`"
        )
        return 0
    if planned():
        return 0
    say(
        f"demo: planning the depth model {depth.name} too (once; minutes on a CPU), so"
        f" `visionrt run … --depth {depth}` runs on its plan; the results above stand meanwhile"
    )
    code = command(["tune", *given, "--if-missing", "--depth", str(depth)])
    if code != 0:
        say("demo: no depth plan cached; the detector's results above stand")
    return code


def depth_planned(model: Path) -> Callable[[], bool]:
    """Whether `model`'s depth plan for this machine is cached, its sizes searched and how
    often depth must run measured."""

    def planned() -> bool:
        from visionrt.cli.tune_depth import cached_depth_plan

        return cached_depth_plan(model, None) is not None

    return planned


def plan_label(plan: Plan) -> str:
    """Which plan: tuned in full, or time-boxed (its search stopped at its budget)."""
    label = "the time-boxed plan" if plan.time_boxed else "the tuned plan"
    return f"{label} ({plan.summary_line()})"


def results_line(out: Path, label: str, remark: str = "") -> str:
    """One line from the run's summary.json: what ran, at what speed, and where its files are."""
    summary = _summary(out / "summary.json")
    backend = summary.get("backend") or {}
    height, width = backend.get("input_hw") or ("?", "?")
    ran = (
        f"{backend.get('runtime', '?')} {backend.get('precision', '?')} {height}×{width},"
        f" {float(summary.get('fps') or 0):.1f} FPS"
    )
    files = ", ".join(Path(p).name for p in summary.get("outputs") or [])
    tail = f"; {remark}" if remark else ""
    return f"demo: results of {label} — this run {ran} — in {out}: {files}{tail}"


def _summary(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def demo_command(
    video: Annotated[
        str | None,
        typer.Argument(
            help="Video to run and tune on. Default: the demo video.", show_default=False
        ),
    ] = None,
    model: Annotated[
        str | None, Opt("--model", "-m", help="ONNX detector. Default: the demo model.")
    ] = None,
    out: Annotated[Path, Opt("--out", "-o", help="Output folder.")] = Path("out/demo"),
    budget_minutes: Annotated[
        float, Opt(help="Wall-clock budget of the tune, when one is needed.")
    ] = 10.0,
    overwrite: Annotated[
        bool,
        Opt(
            "--overwrite",
            help="Replace an earlier run's outputs in --out (refused without it, as by `run`).",
        ),
    ] = False,
) -> None:
    """The demo (`make demo`): a run on this machine's tuned plan; with no plan yet, the FP32
    reference's run first, then `tune`, then the run again on its plan. Each run ends in one
    line saying which configuration it used and where its results are. Then, once, the depth
    model's plan (`tune --depth`) when the depth model is built (`make setup`)."""
    if not (budget_minutes > 0 and math.isfinite(budget_minutes)):  # refused before the runs
        raise ConfigError(
            f"--budget-minutes: expected a number of minutes > 0, got {budget_minutes}"
        )
    given = [*([video] if video else []), *(["--model", model] if model else [])]
    console = Console(stderr=True, soft_wrap=True)

    def say(line: str) -> None:
        console.print(line, markup=False, highlight=False)

    ready = ready_plan(Path(model) if model else None)
    code = run_demo(out, given, budget_minutes, ready, visionrt_command, say, overwrite)
    if code == 0:
        from visionrt.models import depth_model_target  # numpy: not at the CLI's start

        depth = depth_model_target()
        built = depth if depth.is_file() else None
        code = plan_depth(given, built, depth_planned(depth), visionrt_command, say)
    if code == 130:
        raise Interrupted("demo interrupted")
    if code != 0:
        raise typer.Exit(code)


def register(app: typer.Typer, main: Callable[[list[str]], None]) -> None:
    """Add `demo` to `app`; `main` runs a whole command line (its steps)."""
    _MAIN[:] = [main]
    app.command("demo", help=demo_command.__doc__)(demo_command)
