"""What a run's summary says of its parts and sources: what each model ran (and, where sources of
several frame sizes run detectors of their own, which source ran which), one row per source name
with its counts, and what the latency ladder, the audit and motion gating did."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from visionrt.pipeline.gating import ladder_gates, motion_summary
from visionrt.pipeline.opening import OpenRun
from visionrt.pipeline.parts import Parts
from visionrt.sources import Source
from visionrt.telemetry import RunSummary


def run_summary(
    run: OpenRun,
    service: bool,
    interrupted: bool = False,
    errors: Sequence[BaseException] = (),
    outputs: Sequence[str] = (),
) -> RunSummary:
    """The telemetry's summary of `run` so far, with what its parts ran on which sources
    (`service`: a service's sources, counted by name across removals), what each policy did,
    whether it was `interrupted`, its error (the first of `errors`, and each source's that
    ended early) and the files written (`outputs`)."""
    summary = run.telemetry.summary()
    summary.interrupted = interrupted
    said = [str(e) for e in errors[:1] if not isinstance(e, KeyboardInterrupt)]
    said += [s.stats.ended_early for s in run.sources if s.stats.ended_early]
    summary.error = "; ".join(dict.fromkeys(said))
    summary.outputs = list(outputs)
    parts, options = run.parts, run.options
    summary.backend = describe_parts(parts, run.names, run.sources)
    per_source = run.telemetry.per_source()
    summary.sources = source_rows(parts, run.names, run.sources, per_source, service)
    if parts.degrader is not None:
        summary.slo = parts.degrader.report()
    if run.auditor is not None:
        summary.audit = run.auditor.report()
    if options.motion.mode != "off" or ladder_gates(options):
        input_hw = parts.detector.input_hw
        summary.motion = motion_summary(options, input_hw, summary.events, summary.frames_out)
    summary.notes = list(run.notes)
    return summary


def describe_parts(parts: Parts, names: Sequence[str], sources: Sequence[Source]) -> dict[str, Any]:
    """The detector's description, with each other task's under its name (the depth model's
    with `every`: depth on 1 frame in N), the detectors by frame size (`detectors`: each with
    the sources it ran) and what motion windows ran."""
    described = parts.detector.describe()
    for task in parts.tasks[1:]:  # the depth model: also on 1 frame in how many it ran
        described[task.name] = task.describe()
        if parts.depth is not None:
            described[task.name]["every"] = parts.depth.every
    if parts.sized:
        described["detectors"] = parts.detector_rows(names, sources)
    if parts.regions is not None:
        described["regions"] = parts.regions.describe()
    return described


def source_rows(
    parts: Parts,
    names: Sequence[str],
    sources: Sequence[Source],
    counts: Mapping[str, Mapping[str, Any]],
    service: bool,
) -> list[dict[str, Any]]:
    """One row per name: counts are kept by name, and a service's camera removed and added
    again under its name is one camera (its latest source's report, `instances` of it). With
    detectors by frame size, each row names the one its source ran (`detector`)."""
    ran: dict[str, str] = {}
    if parts.sized:
        rows = parts.detector_rows(names, sources)
        ran = {name: row["label"] for row in rows for name in row["sources"]}
    by_name: dict[str, dict[str, Any]] = {}
    for source, name in zip(sources, names, strict=True):
        instances = by_name[name]["instances"] + 1 if name in by_name else 1
        row = {**source.report(), "name": name, "spec": source.name, **counts.get(name, {})}
        if name in ran:
            row["detector"] = ran[name]
        if service:
            row["instances"] = instances
        by_name[name] = row
    return list(by_name.values())
