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
from visionrt.errors import SourceError
from visionrt.telemetry.stats import RunSummary


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
    from visionrt.distributed.ray_run import run_on_ray

    def say(line: str) -> None:
        console.print(line, markup=False, highlight=False, soft_wrap=True)

    said = [0.0]

    def progress(report: ClusterReport) -> None:  # a line every 2 s, on a terminal
        if not console.is_terminal or report.seconds - said[0] < 2.0:
            return
        said[0] = report.seconds
        done = sum(s.written for s in report.sources.values())
        per = ", ".join(f"{w} {n}" for w, n in sorted(report.frames_by_worker.items()))
        fps = done / report.seconds if report.seconds else 0.0
        console.print(f"{done} frames · {fps:.1f} FPS · {per}", markup=False, highlight=False)

    token = metrics_token(cfg)
    summary, report = run_on_ray(cfg, plan_note, resolve, token, say, progress)
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
