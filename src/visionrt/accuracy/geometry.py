"""A plan on the run's own source geometry. `tune` proves a plan on the video it searched; a source
of another size letterboxes differently (another scale, another grid offset) and its fidelity
can fall below the budget silently (issue #17: 0.914 on a 640×480 pan of the tune video). So a
run uses what was proven for each of its sources' sizes: the plan's record for that size, or —
never measured there — the first of these that holds the budget on 60 frames spread over the
source's first minute, against the FP32 reference (seconds), recorded in the plan for the next
run:

1. the plan at the input size aligned for that geometry (`aligned_sizes`: its own size when it
   already is aligned), 2. the plan's configuration at the model's own size, 3. for an INT8
   plan, its runtime in float (BF16 where the CPU has it, at the aligned size then the model's
   own; then FP32 at the model's own), 4. the reference.

Each size then runs its own proven configuration (`PlanUse.by_size`; the pipeline loads one
detector per distinct configuration: `pipeline.sizes`); sources whose size is not known before
the run (cameras, streams) run the safest of the sizes' choices.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from visionrt.accuracy.check import (
    CHECK_FRAMES,
    CHECK_SECONDS,
    Build,
    Say,
    first_size,
    now,
    prove,
    size_text,
)
from visionrt.plans import Plan, PlanUse
from visionrt.plans.proof import (
    budget,
    describe,
    input_hw,
    proof,
    record,
    sections_for,
    tune_proof,
)
from visionrt.sources.naming import split_name
from visionrt.sources.registry import LIVE_KINDS, source_kind

log = logging.getLogger("visionrt")


def source_sizes(specs: Sequence[str]) -> tuple[dict[tuple[int, int], str], list[str]]:
    """Each distinct frame size among the file sources (→ the first source of that size), and
    the cameras and streams, whose size is not read before the run (they are not opened twice:
    the run opens them)."""
    sizes: dict[tuple[int, int], str] = {}
    unknown: list[str] = []
    for named in specs:
        spec = split_name(named)[1]
        if source_kind(spec) in LIVE_KINDS:
            unknown.append(spec)
            continue
        hw = first_size(spec)
        if hw is not None:  # else unreadable: the run itself says what is wrong with it
            sizes.setdefault(hw, spec)
    return sizes, unknown


def settle(
    use: PlanUse,
    specs: Sequence[str],
    conf: float = 0.25,
    say: Say | None = None,
    frames: int = CHECK_FRAMES,
    seconds: float = CHECK_SECONDS,
    build: Build | None = None,
) -> PlanUse:
    """The configuration proven for the run's sources (see the module's docstring), as a PlanUse
    with one more note line saying which and why. Checks run only for file sources of a size
    the plan was never measured on; a source whose size is unknown before the run (a camera)
    runs the safest choice and is said to be unproven. An option whose artifact is not cached
    is passed over (a run builds nothing), unless `build` makes it (`tune` passes its exporter)."""
    plan = use.plan
    if use.sections is None or plan is None or plan.tuned.get("task") == "depth":
        return use
    say = say or (lambda line: log.info("%s", line))
    _with_tune_proof(plan)
    sizes, unknown = source_sizes(specs)
    chosen: list[tuple[tuple[int, int], dict[str, Any]]] = []
    proved: list[str] = []
    for hw, spec in sizes.items():
        entry = proof(plan, hw)
        if entry is None or entry.get("refuted"):
            past = _refuted_labels(entry)
            entry = prove(plan, use.sections, hw, spec, conf, say, frames, seconds, past, build)
            if not entry.get("unchecked"):
                record(plan, hw, entry)
                proved.append(size_text(hw))
        chosen.append((hw, entry))
    checked = bool(proved)
    if checked and use.path is not None:
        plan.save(use.path)  # the next run on these sizes needs no check
        # Said now: a run that stops before its notes are printed has still changed the plan.
        say(f"proved {', '.join(proved)}: recorded in the plan {use.path}")
    # Each size runs what was proven on it; sources whose size is not known before the run (a
    # camera, or a size the pipeline cannot tell) run the safest of those choices.
    order = {"plan": 0, "reference": 2}
    runs = [entry.get("run", "plan") for _, entry in chosen]
    final = max(runs, key=lambda r: order.get(r, 1) if isinstance(r, str) else 1, default="plan")
    safest = next((e for _, e in chosen if e.get("run", "plan") == final), {})
    note = _note(chosen, unknown, checked, use.path is not None, safest.get("label", "the plan"))
    sections = sections_for(use.sections, {"run": final})
    by_size = {}
    for hw, entry in chosen:
        own = sections_for(use.sections, entry)
        if own != sections:
            by_size[hw] = own
    note = "\n".join(filter(None, [use.note, note]))
    return replace(use, sections=sections, note=note, by_size=by_size)


def _refuted_labels(entry: Mapping[str, Any] | None) -> list[str]:
    """The options a refuted proof rules out: the one that ran and every one before it."""
    if entry is None:
        return []
    labels = [str(t.get("label")) for t in entry.get("tried", [])]
    ran = str(entry.get("label", ""))
    return labels[: labels.index(ran) + 1] if ran in labels else [ran]


def _with_tune_proof(plan: Plan) -> None:
    """A plan tuned before proofs were recorded: its tune video's size is proven by the figures
    tune measured on it."""
    if plan.tuned.get("proven"):
        return
    video = Path(str(plan.tuned.get("video") or ""))
    measured = plan.tuned.get("measured") or {}
    hw = first_size(str(video)) if video.is_file() else None
    size = input_hw(plan)
    if hw is None or not measured or size is None:
        return
    record(plan, hw, tune_proof(video.name, hw, size, measured, str(plan.tuned.get("at", ""))))


def _note(
    chosen: list[tuple[tuple[int, int], dict[str, Any]]],
    unknown: list[str],
    checked: bool,
    recorded: bool,
    safest: str = "the plan",
) -> str:
    parts = []
    for hw, entry in chosen:
        where = f"{hw[0]}×{hw[1]}"
        if entry.get("unchecked"):
            parts.append(f"{where}: unproven (the model it was tuned from is gone)")
        elif entry.get("by") == "check" and len(entry.get("tried", [])) > 1:
            failed = ", ".join(_tried(t) for t in entry["tried"][:-1])
            parts.append(
                f"{where}: {failed} below budget on {entry['frames']} frames"
                f" → {entry['label']} ({entry['fidelity']:.3f})"
            )
        else:
            parts.append(f"{where}: {entry.get('label', 'the plan')}, {describe(entry)}")
    if unknown:
        parts.append(
            f"{', '.join(Path(u).name for u in unknown)}: size unknown before the run,"
            f" {safest} runs unproven there (the audit watches it)"
        )
    if not parts:
        return ""
    tail = ""
    if checked:
        tail = " (recorded in the plan)" if recorded else " (a --plan file is not written to)"
    return "geometry: " + "; ".join(parts) + tail


def _tried(option: Mapping[str, Any]) -> str:
    if option.get("refuted"):
        return f"{option['label']} (refuted by an audit)"
    if option.get("missing"):
        return f"{option['label']} (not tried: {option['missing']})"
    return f"{option['label']} {float(option.get('fidelity', 0)):.3f}"


def remember_audit(
    use: PlanUse, sizes: Mapping[str, tuple[int, int]], audit: Mapping[str, Any]
) -> list[str]:
    """After a run: a source whose audit fell below the plan's budget — an event over the window
    and the whole run's audited fidelity — refutes the proof for its frame size, so the next run
    on that size checks again past what was refuted (`settle`). Only the cached plan is
    written; returns a line per refuted size."""
    plan, path = use.plan, use.path
    if plan is None or use.sections is None or path is None or not audit.get("reference"):
        return []
    limit = float((audit.get("budget") or {}).get("min_fidelity", budget(plan)))
    flagged = {e["source"] for e in audit.get("events", []) if e.get("metric") == "fidelity"}
    lines = []
    for name in sorted(flagged):
        figure = (audit.get("sources", {}).get(name) or {}).get("fidelity") or {}
        hw = sizes.get(name)
        entry = proof(plan, hw) if hw else None
        if hw is None or entry is None or entry.get("run") == "reference":
            continue
        if not figure or float(figure["map50"]) >= limit:
            continue
        entry["refuted"] = {"fidelity": figure["map50"], "frames": figure["frames"], "at": now()}
        record(plan, hw, entry)
        lines.append(
            f"geometry: {size_text(hw)}: the audit measured {figure['map50']:.3f} < {limit:g} over"
            f" {figure['frames']} frames of {name} for {entry.get('label', 'the plan')}: the next"
            " run on this size checks again, past it"
        )
    if lines:
        plan.save(path)
    return lines
