"""A run over a cluster's workers: a work unit per source, the coordinator committing each
source's JSONL lines in order into the run's one JSONL file, and the run's summary with its
`cluster` section."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from visionrt.config import RunConfig
from visionrt.distributed.coordinator import ClusterReport, Coordinator, Executor
from visionrt.distributed.units import WorkUnit
from visionrt.sinks.base import FileSink
from visionrt.sources.naming import named_specs
from visionrt.sources.registry import LIVE_KINDS, source_kind
from visionrt.telemetry.stats import RunSummary
from visionrt.types import FrameResult


class LinesSink(FileSink):
    """JSON lines handed over already serialized (by the workers), committed in order."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, one_source=False)

    def write(self, result: FrameResult) -> None:
        self.append(json.dumps(result.to_json(), separators=(",", ":")) + "\n")


def work_units(cfg: RunConfig) -> list[WorkUnit]:
    """A unit per source, named as a single-process run names it."""
    return [
        WorkUnit(i, name, spec, live=source_kind(spec) in LIVE_KINDS or cfg.source.realtime)
        for i, (name, spec) in enumerate(named_specs(cfg.sources))
    ]


def worker_settings(cfg: RunConfig) -> dict[str, Any]:
    """What a worker builds its Pipeline from: the run's sections, its plan already in them;
    sources, outputs and the cluster are the driver's."""
    settings = asdict(cfg)
    for key in ("sources", "output", "cluster", "serve"):
        settings.pop(key, None)
    return settings


def run_on_cluster(
    cfg: RunConfig,
    executor: Executor,
    on_progress: Callable[[ClusterReport], None] | None = None,
) -> tuple[RunSummary, ClusterReport]:
    """Run every source of `cfg` as a unit on `executor`'s workers; the JSONL goes to
    `output.dir` as a single-process run names it, each source's `source_id` its place in
    `cfg.sources`. The summary's `error` names the sources that failed."""
    units = work_units(cfg)
    out = Path(cfg.output.dir)
    name = f"{units[0].name}.jsonl" if len(units) == 1 else "detections.jsonl"
    sink = LinesSink(out / name) if cfg.output.jsonl else None
    ids = {unit.name: unit.unit_id for unit in units}

    def write(source: str, _frame: int, line: str) -> None:
        if sink is None:
            return
        record = json.loads(line)
        record["source_id"] = ids[source]  # a worker's Pipeline numbers its one source 0
        sink.append(json.dumps(record, separators=(",", ":")) + "\n")

    coordinator = Coordinator(units, executor, write, cfg.cluster.max_attempts, on_progress)
    report: ClusterReport | None = None
    try:
        report = coordinator.run()
    finally:
        outputs = sink.close(complete=report is not None) if sink is not None else []
    return _summary(report, [str(p) for p in outputs]), report


def _summary(report: ClusterReport, outputs: list[str]) -> RunSummary:
    """The run's summary from each source's last attempt and what was committed."""
    finals = {name: state.summary for name, state in report.sources.items()}
    frames_in = sum(s.get("frames_in", 0) for s in finals.values())
    dropped: dict[str, int] = {}
    for summary in finals.values():
        for reason, count in summary.get("dropped", {}).items():
            dropped[reason] = dropped.get(reason, 0) + count
    frames_out = sum(state.written for state in report.sources.values())
    summary = RunSummary(
        frames_in=frames_in,
        frames_out=frames_out,
        dropped=dropped,
        seconds=round(report.seconds, 3),
        fps=round(frames_out / report.seconds, 3) if report.seconds else 0.0,
        stages={},
        latency={},
        cpu_percent=0.0,
        rss_mb=0.0,
    )
    summary.sources = [
        {"name": name, "frames_out": state.written, **_counts(state.summary)}
        for name, state in report.sources.items()
    ]
    summary.cluster = report.to_json()
    summary.outputs = outputs
    summary.error = "; ".join(f"{name}: {error}" for name, error in report.failed.items())
    return summary


def _counts(summary: dict[str, Any]) -> dict[str, Any]:
    return {"frames_in": summary.get("frames_in", 0), "dropped": summary.get("dropped", {})}
