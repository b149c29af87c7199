"""`visionrt tune`: find this machine's fastest configuration within an accuracy budget, print
reference vs chosen vs runners-up, and write the plan a plain `run` then uses."""

from __future__ import annotations

import json
import math
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from visionrt.bench.report import ReportPoint, write_report
from visionrt.cli.signals import not_ours
from visionrt.cli.stdout import print_out
from visionrt.cli.tune_depth import depth_limits, tune_depth_model
from visionrt.cli.tune_tables import (
    TrialLines,
    motion_line,
    motion_table,
    results_table,
    status_text,
)
from visionrt.errors import ConfigError, Interrupted, SourceError, VisionRTError
from visionrt.models import demo_model_path
from visionrt.paths import DEMO_VIDEO
from visionrt.plans import machine_fingerprint, plan_path
from visionrt.sinks.base import check_writable
from visionrt.tune import Limits, Plan, cached_plan, tune
from visionrt.tune.batch import BatchPoint
from visionrt.tune.depth_every import DEFAULT_MAX_HELD_ERROR
from visionrt.tune.motion import MIN_GAIN
from visionrt.tune.search import INTERRUPTED, Trial

Opt = typer.Option
VIDEO_SUFFIXES = (".mp4", ".avi", ".mkv", ".mov", ".webm", ".m4v", ".ts", ".mpg", ".mpeg")


def tune_command(
    sources: Annotated[
        list[str] | None,
        typer.Argument(
            help="Videos to tune on (your own; a folder: the videos in it). The search runs on"
            " the first, INT8 calibrates on all; the plan is then proven on each other frame"
            " size. Default: the demo video.",
            show_default=False,
        ),
    ] = None,
    model: Annotated[
        str | None, Opt("--model", "-m", help="ONNX detector. Default: the demo model.")
    ] = None,
    objective: Annotated[str, Opt(help="throughput (FPS) or latency (p99).")] = "throughput",
    min_fidelity: Annotated[
        float, Opt(help="Least fidelity mAP50 against the FP32 reference.")
    ] = 0.95,
    max_p99_ms: Annotated[
        float, Opt(help="Most per-frame processing p99 in ms (0: no limit).")
    ] = 0.0,
    budget_minutes: Annotated[
        float,
        Opt(
            help="Wall-clock budget of the detector's search (size ladder, batch, live and"
            " gating steps included): past it nothing starts and the run under way is"
            " abandoned; the plan keeps the best measured by then and says it was time-boxed."
        ),
    ] = 10.0,
    plan_out: Annotated[
        Path | None, Opt("--plan", help="Also write the plan here (it is always cached).")
    ] = None,
    if_missing: Annotated[
        bool, Opt("--if-missing", help="Do nothing when a plan for this model and machine exists.")
    ] = False,
    json_out: Annotated[bool, Opt("--json", help="Print the plan's figures as JSON.")] = False,
    report: Annotated[
        Path | None, Opt(help="Write an HTML report (Pareto front, stage times) here.")
    ] = None,
    depth: Annotated[
        str | None,
        Opt(help="Also plan this depth model (Depth Anything v2 ONNX), as `run --depth` uses it."),
    ] = None,
    depth_size: Annotated[
        int | None,
        Opt(
            help="With --depth: measure this short side only (default: 518, 364 and 266, each"
            " scored against FP32 at 518; the plan keeps the fastest within the budget and"
            " `run --depth` runs at it unless --depth-size is given)."
        ),
    ] = None,
    max_abs_rel: Annotated[
        float, Opt(help="With --depth: most depth AbsRel against FP32 (after alignment).")
    ] = 0.02,
    min_delta1: Annotated[
        float, Opt(help="With --depth: least depth δ<1.25 against FP32 (after alignment).")
    ] = 0.95,
    max_held_error: Annotated[
        float,
        Opt(
            help="With --depth: most error (90th percentile, relative) a depth map held for"
            " later frames may put into the distances at the detector's boxes; the plan runs"
            " depth on 1 frame in the largest N (up to 5) within it (0: on every frame)."
        ),
    ] = DEFAULT_MAX_HELD_ERROR,
    motion: Annotated[
        bool,
        Opt(
            "--motion/--no-motion",
            help="Then measure gating (off; motion: skip, regions; detection on 1 frame in 2 or"
            " 3, the tracker's boxes between) with the chosen configuration on the same"
            " frames, and keep in the plan the fastest mode within the fidelity"
            f" budget that is at least {MIN_GAIN:.0%} faster than none.",
        ),
    ] = True,
    ray: Annotated[
        str | None,
        Opt(
            help="Tune each kind of machine in the Ray cluster at this address (auto or"
            " HOST:PORT) that has no plan here, on one of its nodes; `run --ray` uses them.",
        ),
    ] = None,
) -> None:
    """Search backends × precisions × input sizes × request settings on your video (and the
    batch, when the best runs on an NVIDIA GPU), within an accuracy budget, and cache the best
    as the plan a plain `visionrt run` uses; with --depth, the depth model's too."""
    model_path = Path(model) if model else demo_model_path()
    videos = tune_sources(sources or [])
    if not videos and not DEMO_VIDEO.is_file():
        raise SourceError(f"no video given and the demo video {DEMO_VIDEO} is missing")
    video = videos[0] if videos else str(DEMO_VIDEO)
    err = Console(stderr=True, soft_wrap=True)
    limits = _limits(min_fidelity, max_p99_ms, objective, budget_minutes)
    limits_for_depth = depth_limits(depth, depth_size, max_abs_rel, min_delta1, max_held_error)
    if ray is not None:
        if depth is not None:  # refused, not dropped
            raise ConfigError(
                "--depth with --ray: the depth model is not planned on a cluster's nodes yet;"
                f" `visionrt tune --depth {depth}` plans it for this machine's kind (nodes of"
                " other kinds run it FP32)"
            )
        from visionrt.cli.tune_cluster import tune_on_cluster

        tune_on_cluster(ray, model_path, Path(video), limits, motion, err)
        return
    # Every destination is checked before minutes of search, not after.
    for planned in (model_path, Path(depth) if depth else None):
        if planned is not None and planned.is_file():
            check_writable(plan_path(planned, machine_fingerprint()))
    for destination in (plan_out, report):
        if destination is not None:
            check_writable(destination)
    stop = threading.Event()
    _stop_on_signals(stop, err)
    try:
        cached = cached_plan(model_path) if if_missing else None
        if cached is not None and cached[0].tuned.get("task") != "depth":
            plan, path = cached
            err.print(f"plan {path.name}: {plan.summary_line()} (cached; `visionrt tune` to redo)")
        else:
            outputs = (report, plan_out, json_out)
            _tune_detector(video, model_path, limits, err, stop, outputs, motion, videos[1:])
            if len(videos) > 1:
                _prove_others(model_path, videos, err)
        if depth is not None and limits_for_depth is not None:
            tune_depth_model(
                video,
                Path(depth),
                depth_size,
                limits_for_depth,
                if_missing,
                err,
                stop,
                model_path,
            )
    except KeyboardInterrupt as interrupt:
        raise Interrupted(INTERRUPTED) from interrupt
    except VisionRTError as error:
        # A runtime that wrapped the interruption in its own error (a load that failed).
        if stop.is_set() and error.exit_code != 130:
            raise Interrupted(INTERRUPTED) from error
        raise


def tune_sources(given: list[str]) -> list[str]:
    """The videos to tune on: each argument, a folder standing for the videos in it (sorted; an
    image folder when it holds none)."""
    found: list[str] = []
    for arg in given:
        path = Path(arg)
        if path.is_dir():
            videos = sorted(
                str(p) for p in path.iterdir() if p.is_file() and p.suffix.lower() in VIDEO_SUFFIXES
            )
            found.extend(videos or [arg])
        else:
            found.append(arg)
    return found


def _prove_others(model: Path, videos: list[str], err: Console) -> None:
    """Prove the plan just cached on each other frame size among `videos` (its record for each
    size is what runs there), with the tune's longer check."""
    from visionrt.accuracy.check import TUNE_CHECK_FRAMES, TUNE_CHECK_SECONDS
    from visionrt.accuracy.geometry import settle
    from visionrt.plans import PlanUse
    from visionrt.tune.evaluate import export_sized

    found = cached_plan(model)
    if found is None:
        return
    plan, path = found
    if plan.time_boxed:  # proofs take minutes (an export and 150 frames a size): not past it
        err.print(
            "not proven on the other frame sizes: the search's budget was spent (a run checks"
            " each size on its first frames; a larger --budget-minutes proves them here)"
        )
        return
    sections: dict[str, Any] = {
        key: plan.run[key] for key in ("model", "backend", "inference") if key in plan.run
    }
    use = PlanUse(sections, "", plan, path)
    with err.status("proving the plan on each frame size"):
        settled = settle(
            use,
            videos,
            say=lambda line: err.print(f"  {line}", markup=False, highlight=False),
            frames=TUNE_CHECK_FRAMES,
            seconds=TUNE_CHECK_SECONDS,
            build=export_sized,  # tune exports what the proof needs; a run takes the cache's
        )
    for line in settled.note.splitlines():
        err.print(line, markup=False, highlight=False)


def _tune_detector(
    video: str,
    model_path: Path,
    limits: Limits,
    err: Console,
    stop: threading.Event,
    outputs: tuple[Path | None, Path | None, bool],
    motion: bool,
    calibrate_too: Sequence[str] = (),
) -> None:
    report, plan_out, json_out = outputs
    lines = TrialLines()
    with err.status("tuning") as status:

        def show(trial: Trial, frames: int) -> None:
            err.print(lines.line(trial, frames))
            status.update(f"tuning: {trial.candidate.label} done")

        def show_batch(point: BatchPoint) -> None:
            verdict = point.error or f"{point.fps:.1f} FPS model-only"
            err.print(f"  batch {point.batch}: {verdict}")
            status.update(f"tuning: batch {point.batch} done")

        def show_motion(line: str) -> None:
            err.print(f"  {line}", markup=False, highlight=False)
            status.update(f"tuning: {line.split(':')[0]}")

        outcome = tune(
            video,
            model_path,
            limits,
            on_trial=show,
            progress=False,
            on_batch=show_batch,
            stop=stop,
            motion=motion,
            on_motion=show_motion,
            calibrate_too=calibrate_too,
        )
    search = outcome.search
    title = (
        f"visionrt tune · {Path(video).name} · {search.seconds:.0f} s"
        f"{' (budget reached)' if search.out_of_time else ''}"
    )
    # Piped or logged, rich would fold the table to 80 columns.
    out = Console(width=None if sys.stdout.isatty() else 150)
    out.print(results_table(search, title))
    if outcome.motion is not None and outcome.motion.results:
        out.print(motion_table(outcome.motion, f"gating · {Path(video).name}"))
    if report is not None:
        points = [
            ReportPoint(
                t.candidate.label,
                t.last.fps,
                t.last.p99_ms,
                t.last.fidelity,
                t.last.stages,
                status_text(t, search),
            )
            for t in search.trials
            if t.runs and t.last.fps
        ]
        written = write_report(points, report, title, "--report")
        err.print(f"wrote {', '.join(str(p) for p in written)}")
    if outcome.plan is None or outcome.path is None:
        raise ConfigError(
            f"no configuration met fidelity ≥ {limits.min_fidelity}"
            + (f" and p99 ≤ {limits.max_p99_ms} ms" if limits.max_p99_ms else "")
            + ": loosen --min-fidelity or --max-p99-ms"
        )
    if outcome.ladder is not None:
        err.print(outcome.ladder.line(), markup=False, highlight=False)
    if outcome.batch is not None:
        err.print(f"batch: {outcome.batch.best or 1} ({outcome.batch.stopped})")
    if outcome.motion is not None:
        err.print(motion_line(outcome.motion), markup=False, highlight=False)
    _finish(outcome.plan, outcome.path, plan_out, err)
    if json_out:
        print_out(json.dumps({"plan": str(outcome.path), **outcome.plan.tuned}, default=str))


def _limits(
    min_fidelity: float, max_p99_ms: float, objective: str, budget_minutes: float
) -> Limits:
    """The search's limits, each checked (NaN compares false to everything: refused by name)."""
    if not (budget_minutes > 0 and math.isfinite(budget_minutes)):
        raise ConfigError(
            f"--budget-minutes: expected a number of minutes > 0, got {budget_minutes}"
        )
    if not 0 <= min_fidelity <= 1:
        raise ConfigError(f"--min-fidelity: expected 0 to 1, got {min_fidelity}")
    if not (max_p99_ms >= 0 and math.isfinite(max_p99_ms)):
        raise ConfigError(f"--max-p99-ms: expected >= 0 (0: no limit), got {max_p99_ms}")
    if objective not in ("throughput", "latency"):
        raise ConfigError(f"--objective: expected throughput or latency, got {objective}")
    return Limits(min_fidelity, max_p99_ms, objective, budget_minutes * 60)


def _stop_on_signals(stop: threading.Event, err: Console) -> None:
    """Ctrl-C or SIGTERM ends the search now: the measurement in flight is abandoned, no plan
    is cached, the command exits 130. Half-made artifacts never look finished (the export's
    staging folder is removed)."""

    def handle(signum: int, _frame: object) -> None:
        if not_ours(signum):
            return
        if not stop.is_set():
            err.print(f"\nvisionrt: {signal.Signals(signum).name}: stopping tune, keeping nothing")
        stop.set()
        # KeyboardInterrupt, not an Exception: no `except Exception` on the way can swallow it.
        raise KeyboardInterrupt

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, handle)
        signal.signal(signal.SIGTERM, handle)


def _finish(plan: Plan, path: Path, copy_to: Path | None, err: Console) -> None:
    err.print(f"plan: {plan.summary_line()}")
    err.print(f"cached as {path}: a plain `visionrt run` with this model now uses it")
    if copy_to is not None:
        plan.save(copy_to)
        err.print(f"wrote {copy_to}: `visionrt run --plan {copy_to}` reproduces it")


def register(app: typer.Typer) -> None:
    app.command("tune", help=tune_command.__doc__)(tune_command)
