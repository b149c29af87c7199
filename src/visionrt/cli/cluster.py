"""`visionrt run --ray`: the sources as work units on Ray workers, the coordinator writing the
JSONL and summary.json here; progress as one line of aggregate FPS and frames per worker."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console

from visionrt.cli.outputs import metrics_token, write_summary
from visionrt.config import RunConfig
from visionrt.distributed.coordinator import ClusterReport
from visionrt.errors import ConfigError, SourceError
from visionrt.plans import fingerprint_key, machine_fingerprint
from visionrt.telemetry.stats import RunSummary

# Prometheus' file-based service discovery: the workers' endpoints, labelled node and worker.
TARGETS = "prometheus_targets.json"


def run_cluster(
    cfg: RunConfig,
    plan_note: str,
    resolve: Callable[[dict[str, Any]], tuple[RunConfig, str]],
    console: Console,
    json_out: bool,
) -> None:
    """Run `cfg`'s sources on the cluster `cfg.cluster` names, each worker with the plan of
    its machine (`resolve(fingerprint)`: the configuration and its plan lines, as this
    machine's are `cfg` and `plan_note`); SourceError (exit 3) when a source failed, after
    every output is finalized."""
    from visionrt.distributed.metrics import ClusterMetrics
    from visionrt.distributed.plans import GroupPlans
    from visionrt.distributed.ray_executor import RayExecutor
    from visionrt.distributed.run import run_on_cluster, worker_settings

    if cfg.output.telemetry or cfg.output.mot:
        raise ConfigError(
            "--ray: the telemetry file and MOT outputs are not written by cluster runs yet"
            " (JSONL, summary.json and --metrics-port are)"
        )
    own = fingerprint_key(machine_fingerprint())

    def settings(fingerprint: dict[str, Any]) -> tuple[dict[str, Any], str]:
        if fingerprint_key(fingerprint) == own:  # this machine's: resolved already
            return worker_settings(cfg), plan_note
        group_cfg, note = resolve(fingerprint)
        return worker_settings(group_cfg), note

    plans = GroupPlans(settings)
    cluster = cfg.cluster
    address = None if cluster.address == "local" else cluster.address
    workers = 0 if cluster.workers == "auto" else int(cluster.workers)  # 0: what fits
    metrics, worker_metrics = None, None
    if cfg.output.metrics_port:  # the cluster's totals here; each worker's own endpoint
        token = metrics_token(cfg)
        targets = Path(cfg.output.dir) / TARGETS
        metrics = ClusterMetrics(targets, cfg.output.metrics_port, cfg.output.metrics_host, token)
        worker_metrics = (cfg.output.metrics_host, token)
        console.print(f"metrics: {metrics.url} (cluster totals); workers listed in {targets}")
    try:
        executor = RayExecutor(
            address,
            workers,
            cluster.worker_cpus,
            cluster.worker_gpus,
            worker_settings(cfg),
            settings_for=plans.settings_for,
            metrics=worker_metrics,
        )
    except BaseException:
        if metrics is not None:
            metrics.close()
        raise
    console.print(f"ray: {len(executor.workers())} worker(s) at {cluster.address}")
    say = Console(stderr=True, soft_wrap=True)
    for key, group in plans.report().items():  # which plan each kind of machine runs
        head = f"plan group {key} ({len(group['workers'])} worker(s), {group['cpu']}):"
        say.print(head, markup=False, highlight=False)
        for line in group["plan"].splitlines() or ["no plan: the configuration as given"]:
            say.print(f"  {line}", markup=False, highlight=False)

    said = [0.0]

    def progress(report: ClusterReport) -> None:  # a line every 2 s, on a terminal
        if not console.is_terminal or report.seconds - said[0] < 2.0:
            return
        said[0] = report.seconds
        done = sum(s.written for s in report.sources.values())
        per = ", ".join(f"{w} {n}" for w, n in sorted(report.frames_by_worker.items()))
        fps = done / report.seconds if report.seconds else 0.0
        console.print(f"{done} frames · {fps:.1f} FPS · {per}", markup=False, highlight=False)

    try:
        summary, report = run_on_cluster(cfg, executor, progress, plans, metrics)
    finally:
        executor.close()
        if metrics is not None:
            metrics.close()
    path = Path(cfg.output.dir) / "summary.json"
    summary.outputs.append(str(path))
    write_summary(summary, path)
    if json_out:
        import json

        print(json.dumps(summary.to_json()))
    _say(summary, report, console)
    if report.failed:
        raise SourceError(f"--ray: {summary.error}")


def _say(summary: RunSummary, report: ClusterReport, console: Console) -> None:
    cluster = summary.cluster
    console.print(
        f"{summary.frames_out} frames in {summary.seconds:.1f} s = {summary.fps:.1f} FPS on"
        f" {len(cluster['workers'])} worker(s) · attempts {cluster['attempts']},"
        f" reassigned {cluster['reassignments']}, workers lost {cluster['lost_workers']}"
    )
    for name, state in report.sources.items():
        said = f"failed: {state.error}" if state.error else f"{state.written} frames"
        console.print(f"  {name}: {said} ({state.attempts} attempt(s))", markup=False)
