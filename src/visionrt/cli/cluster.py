"""`visionrt run --ray`: the sources as work units on Ray workers, the coordinator writing the
JSONL and summary.json here; progress as one bar: frames (of the files' total), aggregate FPS
and frames per node."""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable
from typing import Any

from rich.console import Console

from visionrt.accuracy.audit_window import AuditEvent
from visionrt.cli.outputs import metrics_token
from visionrt.cli.run_display import run_progress
from visionrt.cli.signals import STARTUP, not_ours
from visionrt.config import RunConfig
from visionrt.distributed.coordinator import RunStop
from visionrt.distributed.report import ClusterReport
from visionrt.distributed.run import frame_total
from visionrt.errors import Interrupted, SourceError
from visionrt.pipeline.outputs import OutputFolder
from visionrt.telemetry.report import audit_lines
from visionrt.telemetry.stats import RunSummary


def run_cluster(
    cfg: RunConfig,
    plan_note: str,
    resolve: Callable[[dict[str, Any]], tuple[RunConfig, str]],
    console: Console,
    json_out: bool,
    quiet: bool = False,
    folder: OutputFolder | None = None,
) -> None:
    """Run `cfg`'s sources on the cluster `cfg.cluster` names, each worker with the plan of
    its machine (`resolve(fingerprint)`: the configuration and its plan lines, as this
    machine's are `cfg` and `plan_note`); SourceError (exit 3) when a source failed, after
    every output is finalized; Interrupted (exit 130) after Ctrl-C or SIGTERM, the outputs
    holding the frames committed. `folder` (the run's, claimed: None claims it here) is
    cleared once the workers are up, before anything is written, and gets summary.json."""
    from visionrt.distributed.ray_run import run_on_ray

    said: set[str] = set()

    def say(line: str) -> None:
        said.add(line)
        console.print(line, markup=False, highlight=False, soft_wrap=True)

    token = metrics_token(cfg)
    stop = RunStop()
    install_stop(stop)
    with run_progress("ray", console, quiet, " · {task.fields[nodes]}") as bar:
        task = bar.add_task("ray", total=frame_total(cfg), fps=0.0, nodes="")

        def progress(report: ClusterReport) -> None:
            # Frames of later ranges held back count too: they are done, written later.
            done = sum(s.written + s.held for s in report.sources.values())
            fps = done / report.seconds if report.seconds else 0.0
            bar.update(task, completed=done, fps=fps, nodes=by_node(report))

        try:
            summary, report = run_on_ray(
                cfg, plan_note, resolve, token, say, progress, stop, folder
            )
        except Interrupted:
            STARTUP.check()  # the start-up's line, naming the signal
            raise
    if json_out:
        import json

        print(json.dumps(summary.to_json()))
    # What the workers' Pipelines noted (a zone outside its source's frames), said as a plain
    # run says its notes, --quiet or not.
    for note in summary.notes:
        if note not in said:
            Console(stderr=True, soft_wrap=True).print(note, markup=False, highlight=False)
    _say(summary, report, console)
    if report.failed:
        raise SourceError(f"--ray: {summary.error}")
    if summary.interrupted:
        how = "aborted" if stop.aborted.is_set() else "interrupted"
        raise Interrupted(f"{how}: outputs finalized with {summary.frames_out} frames")


def install_stop(stop: RunStop) -> None:
    """Ctrl-C or SIGTERM while Ray and the workers start: the start-up's handling (one line,
    exit 130, nothing processed). Once the run is under way: `stop` is asked (the workers
    finish the frames they read, the outputs are finalized); a second signal ends it now
    with what was committed; a third leaves at once."""
    starting: dict[int, object] = {
        sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)
    }

    def handle(signum: int, frame: Any) -> None:
        if not_ours(signum):
            return
        if not stop.started.is_set():
            stop.abort()  # held for the run's start, should a library swallow what is raised
            previous = starting.get(signum)
            if callable(previous):
                previous(signum, frame)  # the start-up's: raises
            raise KeyboardInterrupt
        if stop.aborted.is_set():
            raise KeyboardInterrupt
        name = signal.Signals(signum).name
        said = (
            "aborting: the outputs keep what was committed"
            if stop.asked.is_set()
            else ("stopping, the workers finish the frames they read (again to abort)")
        )
        print(f"\nvisionrt: {name}: {said}", file=sys.stderr)
        stop.ask()

    if threading.current_thread() is threading.main_thread():  # Python's rule for handlers
        signal.signal(signal.SIGINT, handle)
        signal.signal(signal.SIGTERM, handle)


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
    # The live audit, as a plain run says it: its events (there, as they came), each source.
    events = [str(AuditEvent.from_json(e)) for e in (summary.audit or {}).get("events", [])]
    for line in [*events, *audit_lines(summary.audit)]:
        console.print(line, markup=False, highlight=False)
