"""What a plan was proven on: per source geometry (height × width), the configuration that held
the fidelity budget there, what it scored and how. A plan's accuracy is a fact about the footage
it was measured on; a source of another size letterboxes differently, so its proof is its own.

Stored in the plan as `tuned.proven`, keyed "HxW":
    {"run": "plan" | "reference" | {model?, inference},  # what runs there: changes over the plan
     "label", "fidelity", "frames", "source", "at", "by": "tune" | "check",
     "input_hw", "letterbox": {scale, top, left}, "tried": [{label, fidelity}, ...]}
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from visionrt.plans.store import RUN_KEYS, Plan
from visionrt.preprocess import compute_letterbox

PROVEN_KEY = "proven"
DEFAULT_BUDGET = 0.95


def geometry_key(source_hw: tuple[int, int]) -> str:
    return f"{source_hw[0]}x{source_hw[1]}"


def budget(plan: Plan) -> float:
    """The least fidelity the plan was tuned to keep (mAP50 against the FP32 reference)."""
    limits = plan.tuned.get("limits") or {}
    return float(limits.get("min_fidelity", DEFAULT_BUDGET))


def input_hw(plan: Plan, sections: Mapping[str, Any] | None = None) -> tuple[int, int] | None:
    """The input size the plan's configuration runs at (None: the model's own, unknown here)."""
    inference = (sections or plan.run).get("inference") or {}
    size = inference.get("input_size") or (plan.tuned.get("artifact") or {}).get("input_hw")
    size = size or plan.tuned.get("input_hw")
    return (int(size[0]), int(size[1])) if size else None


def letterbox_facts(source_hw: tuple[int, int], model_hw: tuple[int, int]) -> dict[str, Any]:
    box = compute_letterbox(source_hw, model_hw)
    return {"scale": round(box.scale, 4), "top": box.top, "left": box.left}


def proof(plan: Plan, source_hw: tuple[int, int]) -> dict[str, Any] | None:
    """The plan's proof for this geometry, or None when it was never measured there."""
    entry = (plan.tuned.get(PROVEN_KEY) or {}).get(geometry_key(source_hw))
    return dict(entry) if isinstance(entry, Mapping) else None


def record(plan: Plan, source_hw: tuple[int, int], entry: Mapping[str, Any]) -> None:
    """Keep `entry` as the plan's proof for this geometry (the caller saves the plan)."""
    proven = dict(plan.tuned.get(PROVEN_KEY) or {})
    proven[geometry_key(source_hw)] = dict(entry)
    plan.tuned[PROVEN_KEY] = proven


def sections_for(sections: Mapping[str, Any], entry: Mapping[str, Any]) -> dict[str, Any] | None:
    """The model, backend and inference sections to run on a geometry: `sections` (the plan's,
    its live settings merged) with the proof's changes over them (another artifact, another
    input size); None: the reference."""
    chosen = entry.get("run", "plan")
    if chosen == "reference":
        return None
    merged = {key: sections[key] for key in RUN_KEYS if key in sections}
    if isinstance(chosen, Mapping):
        if "model" in chosen:
            merged["model"] = chosen["model"]
        merged["inference"] = {**(sections.get("inference") or {}), **chosen.get("inference", {})}
    return merged


def tune_proof(
    video: str, hw: tuple[int, int], size: tuple[int, int], measured: Mapping[str, Any], at: str
) -> dict[str, Any]:
    """The proof `tune` gives the plan on the video it searched."""
    return {
        "run": "plan",
        "label": f"the plan ({size[0]}×{size[1]})",
        "fidelity": float(measured.get("fidelity", 0)),
        "frames": int(measured.get("frames", 0)),
        "source": video,
        "by": "tune",
        "at": at,
        "input_hw": list(size),
        "letterbox": letterbox_facts(hw, size),
    }


def describe(entry: Mapping[str, Any]) -> str:
    """'fidelity 0.979 over 300 frames of vtest.avi (tune)'."""
    how = "tune" if entry.get("by") == "tune" else "checked"
    return (
        f"fidelity {float(entry.get('fidelity', 0)):.3f} over {entry.get('frames', 0)} frames"
        f" of {entry.get('source', '?')} ({how})"
    )
