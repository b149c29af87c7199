"""What the live audit found, read from its sources' records: the window's figures per source
(for the per-second telemetry and Prometheus) and the run summary's `audit` section."""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

from visionrt import fidelity as coco  # the one COCO-style implementation, called by module
from visionrt.accuracy.audit_window import AuditEvent, AuditSettings, SourceAudit, mean_of


def window_figures(records: Mapping[str, SourceAudit]) -> dict[str, dict[str, float]]:
    """The window's figures per source with audited frames: `fidelity` (mAP50) and its
    `fidelity_frames`, `depth_abs_rel` and `depth_delta1`. The caller holds the lock the
    records are shared under."""
    out: dict[str, dict[str, float]] = {}
    for name, state in records.items():
        values: dict[str, float] = {}
        if state.map50 is not None:
            values["fidelity"] = round(state.map50, 4)
            values["fidelity_frames"] = len(state.pairs)
        if state.depth:
            values["depth_abs_rel"] = round(mean_of(state.depth, "abs_rel"), 5)
            values["depth_delta1"] = round(mean_of(state.depth, "delta1"), 4)
        if values:
            out[name] = values
    return out


def audit_report(
    settings: AuditSettings,
    records: Mapping[str, SourceAudit],
    lock: threading.Lock,
    events: Sequence[AuditEvent],
) -> dict[str, Any]:
    """The run summary's audit section but its `error`: settings, per source the counts, the
    whole-run and window figures (mAP50 with its frames and reference boxes; depth AbsRel and
    δ<1.25), events. `records` are copied under `lock` (the lane updates them), then scored
    outside it."""
    sources: dict[str, Any] = {}
    with lock:
        states = {
            name: (s.sampled, s.audited, s.skipped, list(s.whole), s.map50, len(s.pairs),
                   list(s.depth), list(s.depth_sum), s.spared_map50, len(s.spared))
            for name, s in records.items()
        }  # fmt: skip
    for name, state in states.items():
        sampled, audited, skipped, whole, map50, window, depth, sums, *spared = state
        entry: dict[str, Any] = {"sampled": sampled, "audited": audited, "skipped": skipped}
        if spared[1]:  # the frames motion gating spared, their own window
            entry["spared"] = {"map50": round(spared[0] or 0.0, 4), "frames": spared[1]}
        if whole:
            run = coco.fidelity([r for _, r, _ in whole], [c for _, _, c in whole])
            entry["fidelity"] = {
                "map50": round(run.map50, 4),
                "map50_95": round(run.map50_95, 4),
                "frames": run.frames,
                "reference_boxes": run.reference_boxes,
                "candidate_boxes": run.candidate_boxes,
            }
            entry["window"] = {"map50": round(map50 or 0.0, 4), "frames": window}
        if sums[2]:
            entry["depth"] = {
                "abs_rel": round(sums[0] / sums[2], 5),
                "delta1": round(sums[1] / sums[2], 4),
                "frames": int(sums[2]),
                "window_abs_rel": round(mean_of(depth, "abs_rel"), 5),
            }
        sources[name] = entry
    return {
        "rate": settings.rate,
        "period": settings.period,
        "reference": settings.reference,
        "depth_reference": settings.depth_reference,
        "budget": {
            **({"min_fidelity": settings.min_fidelity} if settings.reference else {}),
            **({"max_abs_rel": settings.max_abs_rel} if settings.depth_reference else {}),
        },
        "window": settings.window,
        "architecture_only": settings.architecture_only,
        "depth_architecture_only": settings.depth_architecture_only,
        "sources": sources,
        "events": [event.to_json() for event in events],
    }
