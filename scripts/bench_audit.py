"""The live audit's cost and honesty (issue #17): end-to-end FPS of the cached plan on the demo
video at audit rates 0, 0.01, 0.02 and 0.05, and, for the 0.02 runs, the audited fidelity against
an offline full fidelity of the same run (the FP32 reference on every frame vs what the run
delivered on every frame).

Each round runs every rate once, in an order rotated per round so drift hits all alike; one
Pipeline per run (the Python API with the plan cached for the demo model: `visionrt tune`
first), no sinks. FPS is the run summary's (model load excluded; file mode's bounded wait for
the audit's last queued samples comes after it and is reported apart as `drain_s`).

Usage: .venv/bin/python scripts/bench_audit.py [--runs 5] [--frames 0] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from visionrt import Pipeline, SourceOptions
from visionrt import fidelity as coco
from visionrt.bench.reference import collect_detections
from visionrt.config import pipeline_options
from visionrt.hardware import cpu_model
from visionrt.models import demo_model_path
from visionrt.paths import DEMO_VIDEO
from visionrt.plans import cached_plan
from visionrt.postprocess import PostprocessOptions
from visionrt.types import Detections

ROOT = Path(__file__).resolve().parent.parent
RATES = (0.0, 0.01, 0.02, 0.05)
CHECKED = 0.02  # the rate whose audited fidelity is compared with the full one


def spread(values: list[float]) -> dict[str, float]:
    return {
        "median": round(statistics.median(values), 3),
        "min": round(min(values), 3),
        "max": round(max(values), 3),
    }


def one_run(rate: float, frames: int) -> dict[str, Any]:
    """One run of the plan at `rate`: its FPS, the audit's report and the delivered boxes."""
    pipeline = Pipeline(
        [str(DEMO_VIDEO)],
        demo_model_path(),
        source_options=SourceOptions(mode="file", max_frames=frames),
        options=pipeline_options(audit=rate),
    )
    if pipeline.plan is None:
        pipeline.close()
        sys.exit("no cached plan for the demo model on this machine: run `visionrt tune` first")
    delivered: dict[int, Detections] = {}
    ended = 0.0

    def keep(result: Any) -> None:
        nonlocal ended
        delivered[result.frame.index] = result.detections
        ended = time.perf_counter()

    try:
        summary = pipeline.run(on_result=keep)
        drain = time.perf_counter() - ended
    finally:
        pipeline.close()
    auditor = pipeline.auditor
    source = pipeline.names[0]
    return {
        "fps": summary.fps,
        "cpu_percent": summary.cpu_percent,
        "drain_s": round(drain, 3),
        "audit": summary.audit,
        "audited_frames": auditor.audited_frames(source) if auditor is not None else [],
        "delivered": [delivered[i] for i in sorted(delivered)],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="rounds (each runs every rate)")
    parser.add_argument("--frames", type=int, default=0, help="frames per run (0: the video)")
    parser.add_argument("--json", type=Path, default=ROOT / "docs" / "results" / "audit_cost.json")
    args = parser.parse_args()
    model = demo_model_path()
    found = cached_plan(model)
    if found is None:
        sys.exit("no cached plan for the demo model on this machine: run `visionrt tune` first")
    plan, path = found
    print(f"plan {path.name}: {plan.summary_line()}", file=sys.stderr)
    fps: dict[float, list[float]] = {rate: [] for rate in RATES}
    counts: dict[float, list[dict[str, Any]]] = {rate: [] for rate in RATES}
    checked: list[dict[str, Any]] = []
    for index in range(args.runs):
        order = RATES[index % len(RATES) :] + RATES[: index % len(RATES)]
        for rate in order:
            run = one_run(rate, args.frames)
            fps[rate].append(run["fps"])
            entry = next(iter(run["audit"].get("sources", {}).values()), {})
            counts[rate].append(
                {k: entry.get(k, 0) for k in ("sampled", "audited", "skipped")}
                | {"drain_s": run["drain_s"], "cpu_percent": round(run["cpu_percent"], 1)}
            )
            if rate == CHECKED:
                checked.append(run)
            print(f"round {index + 1} audit {rate}: {run['fps']:.2f} FPS", file=sys.stderr)
    conf = PostprocessOptions().conf
    total = len(checked[0]["delivered"]) if checked else 0
    print(f"reference: ONNX Runtime FP32 on all {total} frames", file=sys.stderr)
    reference = collect_detections(DEMO_VIDEO, model, frames=total, conf=conf)
    honesty = []
    for run in checked:
        full = coco.fidelity(reference, run["delivered"])
        frames = run["audited_frames"]
        subset = coco.fidelity(
            [reference[i] for i in frames], [run["delivered"][i] for i in frames]
        )
        audited = next(iter(run["audit"]["sources"].values())).get("fidelity", {})
        honesty.append(
            {
                "audited_map50": audited.get("map50"),
                "audited_frames": len(frames),
                "audited_reference_boxes": audited.get("reference_boxes"),
                "offline_same_frames_map50": round(subset.map50, 4),
                "full_map50": round(full.map50, 4),
                "full_frames": full.frames,
                "full_reference_boxes": full.reference_boxes,
                "difference": round((audited.get("map50") or 0.0) - full.map50, 4),
            }
        )
    base = fps[0.0]
    cost = {
        str(rate): spread([100 * (1 - f / b) for f, b in zip(fps[rate], base, strict=True)])
        for rate in RATES
        if rate
    }
    print(f"CPU: {cpu_model()}; {args.runs} rounds; FPS median (min–max); cost vs audit 0")
    print("| audit | FPS | cost % | sampled / audited / skipped (first round) |")
    print("|---|---|---|---|")
    for rate in RATES:
        figure = spread(fps[rate])
        first = counts[rate][0]
        print(
            f"| {rate} | {figure['median']:.2f} ({figure['min']:.2f}–{figure['max']:.2f})"
            f" | {cost[str(rate)]['median'] if rate else 0:.1f}"
            f" | {first['sampled']} / {first['audited']} / {first['skipped']} |"
        )
    for row in honesty:
        print(
            f"audit {CHECKED}: audited mAP50 {row['audited_map50']} over {row['audited_frames']}"
            f" frames; full {row['full_map50']} over {row['full_frames']}; difference"
            f" {row['difference']:+.4f}"
        )
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(
        json.dumps(
            {
                "cpu": cpu_model(),
                "plan": {"file": str(path), "label": plan.tuned.get("label")},
                "video": str(DEMO_VIDEO),
                "frames": total,
                "runs": args.runs,
                "fps": {str(rate): values for rate, values in fps.items()},
                "fps_spread": {str(rate): spread(values) for rate, values in fps.items()},
                "cost_percent": cost,
                "audit_counts": {str(rate): values for rate, values in counts.items()},
                "fidelity_at_0.02": honesty,
            },
            indent=2,
        )
    )
    print(f"wrote {args.json}", file=sys.stderr)


if __name__ == "__main__":
    main()
