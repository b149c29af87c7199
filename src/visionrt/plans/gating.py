"""Which gating a run takes from its plan: the plan's `pipeline` section (the mode `tune`
measured to pay on its video: motion gating, or detection on 1 frame in N with the tracker's
boxes between), unless the user chose otherwise themselves — with one line saying which."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from visionrt.plans.store import PIPELINE_KEY, Plan

MOTION_KEY = "motion"  # the pipeline section's motion gating, and the tuned record's
TRACKING_KEY = "tracking"  # the pipeline section's detect-every-N


@dataclass(frozen=True, slots=True)
class GatingUse:
    """`section`: pipeline options to layer under the run's own (empty: none of the plan's);
    `note`: the line to show ("" when there is nothing to say)."""

    section: dict[str, Any] = field(default_factory=dict)
    note: str = ""


def use_gating(plan: Plan | None, given: Mapping[str, Any]) -> GatingUse:
    """The plan's motion gating for a run whose user set the pipeline options `given` (from the
    config file, `--set` and flags). The user's `pipeline.motion` wins; a plan's region model
    that is gone sets its gating aside. (Which region model a run that asks for regions takes:
    `pipeline.planned.planned_regions`.)"""
    if plan is None:
        return GatingUse()
    every = plan_every(plan.run.get(PIPELINE_KEY) or {})
    if every > 1:
        return _use_every(plan, given, every)
    motion = plan_motion(plan.run.get(PIPELINE_KEY) or {})
    planned = str(motion.get("mode", "off"))
    mine = (given.get(MOTION_KEY) or {}).get("mode")  # given as the config reads it: nested
    section = {MOTION_KEY: motion}
    if planned == "off":
        return GatingUse()
    if mine is not None and mine != planned:
        return GatingUse(
            note=f"plan's motion gating ({planned}) set aside: pipeline.motion.mode (--motion)"
            f" {mine} given"
        )
    region_model = str(motion.get("region_model") or "")
    if region_model and not Path(region_model).is_file():
        return GatingUse(
            note=f"plan's motion gating ({planned}) set aside: its region model {region_model}"
            " is missing (`visionrt tune` makes it again)"
        )
    if mine is not None:
        return GatingUse(section, f"motion gating {planned}: given, and the plan's too")
    measured = _measured(plan, planned)
    note = f"motion gating from the plan: {planned} ({measured}); --motion off turns it off"
    return GatingUse(section, note)


def every_section(every: int) -> dict[str, Any]:
    """The `pipeline` section of a plan that detects on 1 frame in `every` (`tune` writes it):
    the tracker's boxes between, track ids only where the run asks for tracking."""
    return {TRACKING_KEY: {"detect_every": every, "predict_between": True}}


def plan_every(section: Mapping[str, Any]) -> int:
    """The detect-every-N of a plan's `pipeline` section (1: none)."""
    tracking = section.get(TRACKING_KEY)
    if not isinstance(tracking, Mapping):
        return 1
    every = tracking.get("detect_every", 1)
    return every if isinstance(every, int) and not isinstance(every, bool) else 1


def _use_every(plan: Plan, given: Mapping[str, Any], every: int) -> GatingUse:
    """The plan's detection on 1 frame in `every`, unless the user set `detect_every` or a
    motion gating mode (the plan measured neither with it). Track ids only where the user asks
    for tracking (their `enabled` is layered over the plan's section)."""
    planned = f"every {every}"
    mine = (given.get(TRACKING_KEY) or {}).get("detect_every")
    if mine is not None:
        return GatingUse(
            note=f"plan's detection on 1 frame in {every} set aside:"
            f" pipeline.tracking.detect_every (--detect-every) {mine} given"
        )
    motion = (given.get(MOTION_KEY) or {}).get("mode")
    if motion is not None and motion != "off":
        return GatingUse(
            note=f"plan's detection on 1 frame in {every} set aside: pipeline.motion.mode"
            f" (--motion) {motion} given"
        )
    section = every_section(every)
    ids = (given.get(TRACKING_KEY) or {}).get("enabled")
    between = "the tracks' boxes between" if ids else "the tracker's boxes between, no track ids"
    note = (
        f"detection on 1 frame in {every} from the plan, {between}"
        f" ({_measured(plan, planned)}); --detect-every 1 turns it off"
    )
    return GatingUse(section, note)


def plan_motion(section: Mapping[str, Any]) -> dict[str, Any]:
    """A plan's `pipeline` section's motion gating as the `pipeline.motion` section's keys. A
    plan tuned before that section existed holds them flat (`motion: skip`,
    `motion_min_area: 0.005`)."""
    motion = section.get(MOTION_KEY)
    if isinstance(motion, Mapping):
        return dict(motion)
    flat = {
        key.removeprefix("motion_"): value
        for key, value in section.items()
        if key.startswith("motion_")
    }
    return {**flat, "mode": motion} if motion is not None else flat


def _measured(plan: Plan, mode: str) -> str:
    """'2.10× the plan alone, fidelity 0.968 on vtest.avi' from the plan's record."""
    record = plan.tuned.get(MOTION_KEY) or {}
    # The mode as measured ("skip 0.005"), which names its options beyond `motion`.
    name = str(record.get("chosen") or mode)
    figures = (record.get("modes") or {}).get(name) or {}
    video = Path(str(plan.tuned.get("video") or "its video")).name
    if not figures.get("fps"):
        return f"tuned on {video}"
    said = f"{name}: " if name != mode else ""
    return (
        f"{said}{float(figures.get('speedup', 0)):.2f}× the plan alone, fidelity"
        f" {float(figures.get('fidelity', 0)):.3f} on {video}"
    )
