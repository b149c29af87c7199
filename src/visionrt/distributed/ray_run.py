"""A run on Ray, wired: the workers (`RayExecutor`), each kind of machine's plan (`GroupPlans`),
the metrics (`ClusterMetrics`) and the coordinator (`run_on_cluster`). `visionrt run --ray`
and the Python API both come here."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from visionrt.config import PROCESSES, RunConfig
from visionrt.distributed.coordinator import Executor, RunStop
from visionrt.distributed.files import check_models
from visionrt.distributed.metrics import ClusterMetrics
from visionrt.distributed.plans import GroupPlans
from visionrt.distributed.report import ClusterReport
from visionrt.distributed.run import check_sources, run_on_cluster, worker_settings
from visionrt.pipeline.outputs import TARGETS, OutputFolder
from visionrt.pipeline.plan_run import with_defaults
from visionrt.plans import fingerprint_key, machine_fingerprint
from visionrt.sinks.base import check_writable
from visionrt.telemetry.stats import RunSummary

# A machine's fingerprint → its configuration and the lines saying which plan and why.
Resolve = Callable[[dict[str, Any]], tuple[RunConfig, str]]


def run_on_ray(
    cfg: RunConfig,
    plan_note: str = "",
    resolve: Resolve | None = None,
    metrics_token: str = "",
    say: Callable[[str], None] | None = None,
    on_progress: Callable[[ClusterReport], None] | None = None,
    stop: RunStop | None = None,
    folder: OutputFolder | None = None,
) -> tuple[RunSummary, ClusterReport]:
    """Run `cfg`'s sources on the Ray cluster `cfg.cluster.address` names ("" or "local": an
    embedded Ray on this machine; "processes": worker processes here, no Ray). A worker on
    this machine's kind runs `cfg` (its plan lines: `plan_note`); one on another kind runs
    `resolve(fingerprint)` (None: `cfg` too). With `output.metrics_port` the cluster's totals
    are served there and each Ray worker serves its own metrics, listed in TARGETS. `say` gets
    the lines worth printing (workers, plan groups, metrics). `stop` ends the run early (see
    RunStop; its `started` is set once the workers are up). `folder`: the output folder the
    caller claimed (`pipeline.outputs`; None: claimed here, as `run` claims it, and let go at
    the end), cleared once the workers are up, before any output is written; summary.json is
    written there at the end. A configuration naming no model or source runs the demo's, as
    `run` does; `cfg` runs as given otherwise (the plan is the caller's:
    `visionrt.runs.run_configured` settles it as `run --ray` does). The summary and the
    report; outputs are finalized."""
    from visionrt.distributed.processes import ProcessExecutor
    from visionrt.distributed.ray_executor import RayExecutor

    cfg = with_defaults(cfg)
    if cfg.output.telemetry:  # a path that cannot be written fails before Ray starts
        check_writable(Path(cfg.output.telemetry), "telemetry")
    check_models(worker_settings(cfg))  # as would a plain run (exit 4), not after Ray starts
    check_sources(cfg)  # zones and lines of no source of the run (exit 2), the same
    if folder is None:
        with OutputFolder.for_run(cfg, "visionrt run --ray") as claimed:
            return run_on_ray(
                cfg, plan_note, resolve, metrics_token, say, on_progress, stop, claimed
            )
    tell = say or (lambda _line: None)
    own = fingerprint_key(machine_fingerprint())

    def settings(fingerprint: dict[str, Any]) -> tuple[dict[str, Any], str]:
        if resolve is None or fingerprint_key(fingerprint) == own:
            return worker_settings(cfg), plan_note
        group_cfg, note = resolve(fingerprint)
        if "no tuned plan" in note:
            note += f"\n`visionrt tune --ray {cluster.address}` tunes each kind of machine"
        return worker_settings(group_cfg), note

    cluster = cfg.cluster
    plans = GroupPlans(settings)
    address = None if cluster.address in ("", "local", PROCESSES) else cluster.address
    metrics, worker_metrics = None, None
    if cfg.output.metrics_port:  # the cluster's totals here; each worker's own endpoint
        targets = Path(cfg.output.dir) / TARGETS
        host = cfg.output.metrics_host
        metrics = ClusterMetrics(targets, cfg.output.metrics_port, host, metrics_token)
        worker_metrics = (host, metrics_token)
        tell(f"metrics: {metrics.url} (cluster totals); workers listed in {targets}")
    count = 0 if cluster.workers == "auto" else int(cluster.workers)  # 0: what fits
    try:
        executor: Executor
        if cluster.address == PROCESSES:
            # No Ray: the workers' own metrics endpoints need it; the totals are served here.
            executor = ProcessExecutor(
                count, cluster.worker_cpus, worker_settings(cfg), settings_for=plans.settings_for
            )
            tell(f"processes: {len(executor.workers())} worker process(es) on this machine")
        else:
            executor = RayExecutor(
                address,
                count,
                cluster.worker_cpus,
                cluster.worker_gpus,
                worker_settings(cfg),
                settings_for=plans.settings_for,
                metrics=worker_metrics,
            )
            tell(f"ray: {len(executor.workers())} worker(s) at {cluster.address or 'local'}")
        try:
            plans.announce(tell)  # which plan each kind of machine runs, and each that joins
            summary, report = run_on_cluster(
                cfg, executor, on_progress, plans, metrics, stop=stop, say=tell,
                before_writing=partial(folder.clear, tell),
            )  # fmt: skip
            error = folder.finish(summary)
            if error is not None:
                raise error
            return summary, report
        finally:
            executor.close()
    finally:
        if metrics is not None:
            metrics.close()
