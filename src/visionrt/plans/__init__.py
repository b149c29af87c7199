"""Plans: the configuration `tune` chose for a model on this machine, cached, and how a run takes
it (model file, backend and inference settings, resolved before anything loads; the motion
gating tune found to pay)."""

from visionrt.plans.gating import GatingUse, use_gating
from visionrt.plans.resolve import (
    PlanRequest,
    PlanUse,
    batch_ready,
    plan_model_sha256,
    use_depth_plan,
    use_plan,
)
from visionrt.plans.store import (
    Plan,
    cached_plan,
    default_root,
    fingerprint_differences,
    fingerprint_key,
    machine_fingerprint,
    plan_path,
)

__all__ = [
    "GatingUse",
    "Plan",
    "PlanRequest",
    "PlanUse",
    "batch_ready",
    "cached_plan",
    "default_root",
    "fingerprint_differences",
    "fingerprint_key",
    "machine_fingerprint",
    "plan_model_sha256",
    "plan_path",
    "use_depth_plan",
    "use_gating",
    "use_plan",
]
