"""`visionrt run --ray`: the sources as work units on Ray workers, the coordinator writing the
JSONL and summary.json here; progress as one bar: frames (of the files' total), aggregate FPS
and frames per node."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console

from visionrt.cli.outputs import metrics_token, run_progress, write_summary
from visionrt.config import RunConfig
from visionrt.distributed.report import ClusterReport
from visionrt.distributed.run import frame_total
from visionrt.errors import SourceError
from visionrt.telemetry.stats import RunSummary


def run_cluster(
    cfg: RunConfig,
    plan_note: str,
    resolve: Callable[[dict[str, Any]], tuple[RunConfig, str]],
    console: Console,
    json_out: bool,
    quiet: bool = False,
) -> None:
    """Run `cfg`'s sources on the cluster `cfg.cluster` names, each worker with the plan of
    its machine (`resolve(fingerprint)`: the configuration and its plan lines, as this
    machine's are `cfg` and `plan_note`); SourceError (exit 3) when a source failed, after
    every output is finalized."""
    from visionrt.distributed.ray_run import run_on_ray

    def say(line: str) -> None:
        console.print(line, markup=False, highlight=False, soft_wrap=True)

    token = metrics_token(cfg)
    with run_progress("ray", console, quiet, " · {task.fields[nodes]}") as bar:
        task = bar.add_task("ray", total=frame_total(cfg), fps=0.0, nodes="")

        def progress(report: ClusterReport) -> None:
            done = sum(s.written for s in report.sources.values())
            fps = done / report.seconds if report.seconds else 0.0
            bar.update(task, completed=done, fps=fps, nodes=by_node(report))

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


def by_node(report: ClusterReport) -> str:
    """Frames committed so far per node (its id's first 8 characters), most first."""
    counts: dict[str, int] = {}
    for worker, frames in report.frames_by_worker.items():
        node = str(report.worker_info.get(worker, {}).get("node", "?"))[:8]
        counts[node] = counts.get(node, 0) + frames
    return ", ".join(f"node {n} {c}" for n, c in sorted(counts.items(), key=lambda i: -i[1]))


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
