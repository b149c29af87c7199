"""A cluster run's summary.json: each source's row and counts from what its workers said and
what the coordinator committed, across attempts and frame ranges, and the run's totals."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from typing import Any

from visionrt.distributed.report import ClusterReport, SourceState
from visionrt.pipeline.gating import motion_figures
from visionrt.telemetry.stats import RunSummary

WORKER_LOST = "cluster: worker lost"


def cluster_summary(
    report: ClusterReport, live: frozenset[str], outputs: list[str], driver_cpu: float = 0.0
) -> RunSummary:
    """The run's summary from each source's last attempt and what was committed: its row as
    that attempt's worker wrote it (latency, reconnects), the counts the coordinator's (every
    attempt's), and what a plain run's summary holds of the run as the workers' Pipelines
    said it, each source's last attempt (of each of its ranges: a file split into frame
    ranges): the live audit's figures, the events (added up, with the zone and line events of
    the frames a retry resumed after), the zones' and lines' figures at the end (a retry
    resumes them), motion gating's. `cpu_percent`: the CPU seconds of the driver
    (`driver_cpu`) and of each worker group's process as its last attempt reported them, over
    the run's seconds (percent of one core; an attempt whose worker was lost reported none)."""
    states = report.sources
    rows = [
        {
            "name": name,
            **_attempt_row(state),
            **_counts(state, name in live),
            "events": _added(
                events
                for unit in state.unit_finals()
                for events in (unit.get("events_before", {}), unit.get("row", {}).get("events", {}))
            ),
        }
        for name, state in states.items()
    ]
    dropped: dict[str, int] = {}
    for row in rows:
        for reason, count in row["dropped"].items():
            dropped[reason] = dropped.get(reason, 0) + count
    frames_out = sum(row["frames_out"] for row in rows)
    finals = [unit for state in states.values() for unit in state.unit_finals()]
    cpu = driver_cpu + sum(unit.get("cpu_seconds", 0.0) for unit in finals)
    summary = RunSummary(
        frames_in=sum(row["frames_in"] for row in rows),
        frames_out=frames_out,
        dropped=dropped,
        seconds=round(report.seconds, 3),
        fps=round(frames_out / report.seconds, 3) if report.seconds else 0.0,
        stages={},
        latency={},
        cpu_percent=round(100.0 * cpu / report.seconds, 1) if report.seconds else 0.0,
        rss_mb=0.0,
    )
    summary.sources = rows
    summary.events = _added(
        [*(row["events"] for row in rows), *(unit.get("unsourced_events", {}) for unit in finals)]
    )
    # Each source's figures at its end: those of its last range (in frame order) that has any.
    analytics: dict[str, dict[str, Any]] = {
        name: next((u["analytics"] for u in reversed(s.unit_finals()) if u.get("analytics")), {})
        for name, s in states.items()
    }
    summary.analytics = {name: figures for name, figures in analytics.items() if figures}
    summary.motion = _merged_motion(finals)
    summary.audit = _merged_audit(
        [unit.get("audit") or {} for state in states.values() for unit in state.unit_finals()]
    )
    backends = {json.dumps(s.summary.get("backend")) for s in states.values()} - {"null", "{}"}
    summary.backend = json.loads(backends.pop()) if len(backends) == 1 else {}  # one plan group
    notes = (note for state in states.values() for note in state.summary.get("notes", []))
    summary.notes = list(dict.fromkeys(notes))
    summary.cluster = report.to_json()
    summary.outputs = outputs
    summary.error = "; ".join(f"{name}: {error}" for name, error in report.failed.items())
    return summary


def _added(counts: Iterable[dict[str, int]]) -> dict[str, int]:
    """Counts by name, added up."""
    total: dict[str, int] = {}
    for named in counts:
        for name, count in named.items():
            total[name] = total.get(name, 0) + count
    return total


def _merged_motion(units: list[dict[str, Any]]) -> dict[str, Any]:
    """The workers' motion gating (units' summaries, each of one source or range) as one
    run's: the settings of the first, the figures from every unit's events and frames."""
    gated = [unit for unit in units if unit.get("motion")]
    if not gated:
        return {}
    setting = ("mode", "threshold", "min_area", "refresh", "region")
    settings = {key: gated[0]["motion"][key] for key in setting if key in gated[0]["motion"]}
    events = _added(unit.get("row", {}).get("events", {}) for unit in gated)
    out = sum(unit.get("frames_out", 0) for unit in gated)
    whole = sum(unit.get("frames_out", 0) * math.prod(unit["input_hw"]) for unit in gated)
    return motion_figures(settings, events, out, whole)


def _attempt_row(state: SourceState) -> dict[str, Any]:
    row = dict(state.summary.get("row") or {})
    row.pop("name", None)
    return row


def _merged_audit(audits: list[dict[str, Any]]) -> dict[str, Any]:
    """The workers' live-audit reports (each of one source, or of one range of it) as one
    run's: the settings of the first, every source's figures (its ranges' combined), the
    events in time order, the first error."""
    found = [audit for audit in audits if audit]
    if not found:
        return {}
    merged = {**found[0], "sources": {}, "events": [], "error": ""}
    for audit in found:
        for name, entry in audit.get("sources", {}).items():
            merged["sources"][name] = _combined(merged["sources"].get(name), entry)
        merged["events"] += audit.get("events", [])
        merged["error"] = merged["error"] or audit.get("error", "")
    merged["events"].sort(key=lambda event: event.get("t", 0.0))
    return merged


def _counts(state: SourceState, live: bool) -> dict[str, Any]:
    """A source's frames in, out and dropped. A file's retry runs it from the frame after the
    last one committed (`start_frame`), so its frames in are those before it and those its
    last attempt saw; a live stream's attempts each saw their own stretch, and the last one's
    summary is all that came back: its frames in are those written, those that attempt
    dropped, and the gap no worker read (`worker lost`). A file split into frame ranges: the
    sum over its ranges."""
    dropped: dict[str, int] = {}
    for unit in state.unit_finals():
        for reason, count in unit.get("dropped", {}).items():
            dropped[reason] = dropped.get(reason, 0) + count
    for reason, count in state.dropped_before.items():
        dropped[reason] = dropped.get(reason, 0) + count
    if state.lost:
        dropped[WORKER_LOST] = state.lost
    frames_in = 0
    for unit in state.unit_finals():
        before = unit.get("start_frame", 0) - unit.get("first_frame", 0)  # committed earlier
        frames_in += before + unit.get("frames_in", 0)
    if live:
        frames_in = state.written + sum(dropped.values())
    # A run stopped before a worker's last attempt said what it read: what it sent, at least.
    frames_in = max(frames_in, state.written + sum(dropped.values()))
    return {"frames_in": frames_in, "frames_out": state.written, "dropped": dropped}


def _combined(first: dict[str, Any] | None, other: dict[str, Any]) -> dict[str, Any]:
    """Two ranges' audit figures of one source as a whole run's: counts and frames added, mAP
    and depth errors weighted by each range's audited frames (what one audit over the whole
    file comes nearest to), and each range's own mAP kept under `ranges` (a weak range shows
    there); the live window is the worse range's."""
    if first is None:  # the source's first range (or its whole file)
        return dict(other)
    merged: dict[str, Any] = {
        key: first.get(key, 0) + other.get(key, 0) for key in ("sampled", "audited", "skipped")
    }
    merged["ranges"] = first.get("ranges", _ranges(first)) + _ranges(other)
    fid = [e["fidelity"] for e in (first, other) if "fidelity" in e]
    if fid:
        merged["fidelity"] = {
            **_weighted(fid, ("map50", "map50_95"), 4),
            **{k: sum(f[k] for f in fid) for k in ("reference_boxes", "candidate_boxes")},
        }
        windows = [e["window"] for e in (first, other) if e.get("window")]
        merged["window"] = min(windows, key=lambda w: w["map50"]) if windows else {}
    deep = [e["depth"] for e in (first, other) if "depth" in e]
    if deep:
        merged["depth"] = {
            **_weighted(deep, ("abs_rel", "delta1"), 5),
            "window_abs_rel": max(d["window_abs_rel"] for d in deep),
        }
    return merged


def _ranges(entry: dict[str, Any]) -> list[dict[str, Any]]:
    """One range's own fidelity, as listed under a split source's `ranges`."""
    fidelity = entry.get("fidelity")
    return [{"map50": fidelity["map50"], "frames": fidelity["frames"]}] if fidelity else []


def _weighted(figures: list[dict[str, Any]], keys: tuple[str, ...], digits: int) -> dict[str, Any]:
    """`keys` of `figures` averaged, each weighted by its `frames`; the frames added."""
    frames = sum(f["frames"] for f in figures)
    mean = {k: sum(f[k] * f["frames"] for f in figures) / (frames or 1) for k in keys}
    return {**{k: round(v, digits) for k, v in mean.items()}, "frames": frames}
