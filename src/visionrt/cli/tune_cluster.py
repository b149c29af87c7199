"""`visionrt tune --ray ADDRESS`: a plan for each kind of machine in a Ray cluster, kept in this
machine's plan folder for `visionrt run --ray` (distributed.tune)."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from visionrt.errors import ConfigError
from visionrt.tune import Limits


def tune_on_cluster(
    address: str, model: Path, video: Path, limits: Limits, motion: bool, err: Console
) -> None:
    """Connect to the cluster at `address`, tune each kind of machine that has no plan here
    (each node's `visionrt tune` within `limits`, with or without `motion`), say what each
    kind runs; a ConfigError (exit 2) naming the kinds whose tuning failed."""
    args = [
        "--objective", limits.objective, "--min-fidelity", str(limits.min_fidelity),
        "--max-p99-ms", str(limits.max_p99_ms), "--budget-minutes", str(limits.budget_s / 60),
        "--motion" if motion else "--no-motion",
    ]  # fmt: skip
    from visionrt.config import check_address
    from visionrt.distributed.ray_start import connect
    from visionrt.distributed.tune import tune_kinds

    check_address(address, "--ray")
    if address == "local":
        raise ConfigError("tune --ray local: one machine, one kind: run `visionrt tune` instead")
    ray = connect(address)
    try:
        kinds = tune_kinds(
            model, video, args, lambda line: err.print(line, markup=False, highlight=False)
        )
    finally:
        ray.shutdown()
    failed = [key for key, kind in kinds.items() if kind.plan.startswith("failed")]
    if failed:
        raise ConfigError(f"tune --ray: no plan for {', '.join(failed)} (see above)")
    err.print(f"{len(kinds)} kind(s) of machine, each with a plan: `visionrt run --ray` uses them")
