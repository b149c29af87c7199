"""The depth half of `visionrt tune --depth`: check its budget, search, print the table, say
where the plan went."""

from __future__ import annotations

import math
import sys
import threading
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from visionrt.errors import ConfigError
from visionrt.plans import Plan, cached_plan
from visionrt.tune.depth import DEPTH_SIZES, DepthLimits, DepthTrial, tune_depth
from visionrt.tune.depth_every import DEFAULT_MAX_HELD_ERROR


def depth_limits(
    depth: str | None,
    short_side: int | None,
    max_abs_rel: float,
    min_delta1: float,
    max_held_error: float = DEFAULT_MAX_HELD_ERROR,
) -> DepthLimits | None:
    """The depth budget, checked before any work (None without --depth)."""
    if depth is None:
        return None
    if not Path(depth).is_file():
        raise ConfigError(f"--depth: model file not found: {depth}")
    if short_side is not None and (short_side < 14 or short_side % 14):
        raise ConfigError(
            f"--depth-size: expected a multiple of 14 (266, 364, 518), got {short_side}"
        )
    if not (max_abs_rel > 0 and math.isfinite(max_abs_rel)):
        raise ConfigError(f"--max-abs-rel: expected a number > 0, got {max_abs_rel}")
    if not 0 <= min_delta1 <= 1:
        raise ConfigError(f"--min-delta1: expected 0 to 1, got {min_delta1}")
    if not (max_held_error >= 0 and math.isfinite(max_held_error)):
        raise ConfigError(f"--max-held-error: expected a number >= 0, got {max_held_error}")
    return DepthLimits(max_abs_rel, min_delta1, max_held_error)


def tune_depth_model(
    video: str,
    model: Path,
    short_side: int | None,
    limits: DepthLimits,
    if_missing: bool,
    err: Console,
    stop: threading.Event,
    detector: Path | None = None,
) -> None:
    """Search (or, with `if_missing`, find cached) the depth model's plan and show it; with the
    `detector`, on how many frames depth must run is measured at its boxes."""
    found = cached_depth_plan(model, short_side, detector is not None) if if_missing else None
    if found is not None:
        plan, path = found
        err.print(f"depth plan {path.name}: {plan.summary_line()} (cached)")
        return

    def show(trial: DepthTrial) -> None:
        verdict = trial.why_out or f"{trial.ms:.1f} ms" + (
            "" if trial.candidate.reference else f", AbsRel {trial.abs_rel:.3f}"
        )
        err.print(f"  depth {trial.candidate.label}: {verdict}")

    sizes = (
        f"short side {short_side}"
        if short_side
        else "short sides " + ", ".join(str(side) for side in DEPTH_SIZES)
    )
    then = ", then how often it must run" if detector is not None else ""
    with err.status(f"tuning the depth model ({sizes}{then})"):
        plan, path, trials = tune_depth(
            video, model, short_side, limits, on_trial=show, stop=stop, detector=detector
        )
    size = plan.tuned["input_hw"]
    table = Table(title=f"visionrt tune --depth · {model.name} · {size[0]}×{size[1]}")
    for column in ("configuration", "ms model-only", "× reference", "AbsRel", "δ<1.25", "status"):
        table.add_column(
            column, justify="left" if column in ("configuration", "status") else "right"
        )
    reference_ms = trials[0].ms
    for trial in trials:
        chosen = trial.candidate.label == plan.tuned["label"]
        status = "chosen" if chosen else ("reference" if trial.candidate.reference else "")
        table.add_row(
            trial.candidate.label,
            f"{trial.ms:.1f}" if trial.ms else "",
            f"{reference_ms / trial.ms:.2f}×" if trial.ms and reference_ms else "",
            "" if trial.candidate.reference or not trial.ms else f"{trial.abs_rel:.3f}",
            "" if trial.candidate.reference or not trial.ms else f"{trial.delta1:.3f}",
            f"out: {trial.why_out}" if trial.why_out else status,
        )
    Console(width=None if sys.stdout.isatty() else 150).print(table)
    if plan.tuned.get("architecture_only"):
        err.print(
            "note: architecture-only depth model (random weights): its AbsRel says nothing about"
            " a trained model's accuracy; tune again with real weights"
        )
    every = plan.tuned.get("every")
    if isinstance(every, dict):
        err.print(every_line(every))
    err.print(f"depth plan: {plan.summary_line()}")
    # Plans are files named by their model's content: the detector's stays as it was.
    beside = cached_plan(detector) if detector is not None else None
    if beside is not None and beside[1] != path:
        err.print(
            f"cached as {path}, beside the detector's plan {beside[1].name}, which is kept:"
            f" a run of this detector with `--depth {model}` uses both"
        )
    else:
        err.print(f"cached as {path}: `visionrt run --depth {model}` now uses it")


def every_line(every: dict[str, Any]) -> str:
    """What the plan's `every` section measured and chose, in one line."""
    tried = every.get("tried") or []
    errors = ", ".join(
        f"1 in {t['every']}: {t['p90']:.3f}" for t in tried if isinstance(t, dict) and t["boxes"]
    )
    measured = f" (p90 error of held maps' distances at the boxes: {errors})" if errors else ""
    chosen = every.get("chosen", 1)
    head = f"depth on 1 frame in {chosen}" if chosen != 1 else "depth on every frame"
    why = f"; {every['why']}" if every.get("why") else ""
    return f"  {head}{measured}, budget {every.get('max_held_error')}{why}"


def cached_depth_plan(
    model: Path, short_side: int | None, every: bool = True
) -> tuple[Plan, Path] | None:
    """`model`'s cached depth plan on this machine when it answers a tune at `short_side`: that
    size was tuned, or, with no size asked, the sizes were searched; with `every` (a tune
    given the detector), how often depth must run was measured too."""
    found = cached_plan(model)
    if found is None or found[0].tuned.get("task") != "depth":
        return None
    tuned = found[0].tuned
    if every and "every" not in tuned:
        return None
    if short_side is None:
        return found if len(tuned.get("sizes_searched") or []) > 1 else None
    return found if tuned.get("short_side") == short_side else None
