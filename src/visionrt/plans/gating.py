"""Which motion gating a run takes from its plan: the plan's `pipeline` section (the mode `tune`
measured to pay on its video), unless the user chose the mode themselves — with one line
saying which."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from visionrt.plans.store import PIPELINE_KEY, Plan

MOTION_KEY = "motion"  # the pipeline section's motion gating, and the tuned record's


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
