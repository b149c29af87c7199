"""Issue #9's tracking curve: detect-every-N with each tracker against the every-frame FP32
reference on vtest.avi, frames per second and fidelity (mAP50 of every frame's boxes, detected
or predicted, with the reference's boxes as ground truth).

Every run is a `visionrt.pipeline.Pipeline` over the first `--frames` frames (file mode, every
frame kept), ONNX Runtime FP32 on the demo model. A round is the reference (every frame, no
tracking, at `--conf`) then per N the tracked runs of each tracker in turn, so drift hits all
alike; each ratio is against the same tracker's N = 1 run of the same round, and the table gives
the median (min–max) over `--rounds` rounds. FPS is counted from the first result to the last
(model load and the first inference excluded). Boxes do not depend on timing; the fidelity is
from the first round, and the rounds are checked to agree.

`--sweep` also runs the detector once on every frame at the tracker's low threshold and replays
detect-every-N through trackers with other options offline (the same update/predict calls the
pipeline makes, so the default options must reproduce the pipeline's boxes, which is checked):
fidelity for other lost windows and match IoUs without another inference.

Usage: .venv/bin/python scripts/bench_track.py [--frames 200] [--every 1,2,3,4,5] [--rounds 3]
       [--trackers bytetrack,ocsort] [--conf 0.25] [--sweep] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from visionrt.backends import BackendOptions
from visionrt.config import pipeline_options
from visionrt.fidelity import REFERENCE_BACKEND, tracking_fidelity
from visionrt.fuse.bytetrack import Tracker
from visionrt.fuse.ocsort import OcSortTracker
from visionrt.hardware import cpu_model
from visionrt.models import demo_model_path
from visionrt.paths import DEMO_VIDEO
from visionrt.pipeline import Pipeline, PipelineOptions
from visionrt.postprocess import PostprocessOptions
from visionrt.sources import SourceOptions
from visionrt.types import Detections, TrackedDetections

TARGET_EVERY, TARGET_MAP50, TARGET_SPEEDUP = 3, 0.85, 2.5


@dataclass(frozen=True, slots=True)
class Run:
    """One pipeline pass: each frame's boxes and timestamp, FPS, the tracker's thresholds."""

    boxes: list[Detections]
    stamps: list[float]
    fps: float
    high: float
    low: float


def run_pipeline(
    model: Path, video: Path, frames: int, conf: float, options: PipelineOptions
) -> Run:
    pipeline = Pipeline(
        [str(video)],
        model,
        REFERENCE_BACKEND,
        BackendOptions(),
        PostprocessOptions(conf=conf),
        SourceOptions(mode="file", max_frames=frames),
        options,
    )
    boxes, stamps, arrivals = [], [], []
    try:
        for result in pipeline:
            arrivals.append(time.perf_counter())
            boxes.append(result.detections)
            stamps.append(result.frame.timestamp)
    finally:
        pipeline.close()
    if len(boxes) != frames:
        raise SystemExit(f"expected {frames} frames from {video}, got {len(boxes)}")
    fps = (len(arrivals) - 1) / (arrivals[-1] - arrivals[0])
    return Run(boxes, stamps, fps, pipeline.parts.tracker_high, pipeline.parts.tracker_low)


def replay(
    tracker: Tracker, raw: Sequence[Detections], stamps: Sequence[float], every: int
) -> list[TrackedDetections]:
    """The pipeline's tracker calls for detect-every-`every`, on every-frame detections `raw`
    taken at the tracker's low threshold."""
    return [
        tracker.update(det, t) if i % every == 0 else tracker.predict(t)
        for i, (det, t) in enumerate(zip(raw, stamps, strict=True))
    ]


def boxes_of(tracked: Sequence[TrackedDetections]) -> list[Detections]:
    return [t.detections for t in tracked]


def identities(tracked: Sequence[TrackedDetections]) -> int:
    """Distinct track ids output: for the same people, fewer means fewer split tracks."""
    return len({int(i) for t in tracked for i in t.track_id})


def make(kind: str, high: float, low: float, **options: Any) -> Tracker:
    cls = OcSortTracker if kind == "ocsort" else Tracker
    return cls(high=high, low=low, **options)


def same_boxes(a: Sequence[Detections], b: Sequence[Detections]) -> float:
    """Largest coordinate difference in pixels (inf when the box counts differ)."""
    worst = 0.0
    for x, y in zip(a, b, strict=True):
        if len(x) != len(y):
            return float("inf")
        if len(x):
            worst = max(worst, float(np.abs(x.xyxy - y.xyxy).max()))
    return worst


def spread(values: Sequence[float]) -> str:
    return f"{statistics.median(values):.2f} ({min(values):.2f}–{max(values):.2f})"


def measure(
    model: Path, args: argparse.Namespace, everies: list[int], kinds: list[str]
) -> tuple[list[Run], dict[tuple[str, int], list[Run]]]:
    """`args.rounds` rounds, each the reference then every (N, tracker) in turn."""
    references: list[Run] = []
    runs: dict[tuple[str, int], list[Run]] = {}
    for round_index in range(args.rounds):
        references.append(
            run_pipeline(model, args.video, args.frames, args.conf, PipelineOptions())
        )
        line = [f"round {round_index + 1}: reference {references[-1].fps:.2f} FPS"]
        for every in everies:
            for kind in kinds:
                options = pipeline_options(track=True, detect_every=every, tracker=kind)
                run = run_pipeline(model, args.video, args.frames, args.conf, options)
                runs.setdefault((kind, every), []).append(run)
                line.append(f"{kind} N={every} {run.fps:.2f}")
        print(", ".join(line), flush=True)
    return references, runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=200)
    parser.add_argument("--every", default="1,2,3,4,5")
    parser.add_argument("--trackers", default="bytetrack,ocsort")
    parser.add_argument("--conf", type=float, default=0.25)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--video", type=Path, default=DEMO_VIDEO)
    parser.add_argument("--sweep", action="store_true")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    everies = [int(n) for n in args.every.split(",")]
    kinds = args.trackers.split(",")
    model = demo_model_path()

    print(f"CPU: {cpu_model()}; model {model.name}; {args.frames} frames of {args.video.name}")
    references, runs = measure(model, args, everies, kinds)
    reference = references[0]
    rows: list[dict[str, Any]] = []
    for (kind, every), taken in runs.items():
        # Boxes do not depend on timing: every round must give the same ones.
        drift = max(same_boxes(reference.boxes, r.boxes) for r in references)
        drift = max(drift, *(same_boxes(taken[0].boxes, r.boxes) for r in taken))
        score = tracking_fidelity(reference.boxes, taken[0].boxes, every)
        fps = [r.fps for r in taken]
        speedup = [r.fps / b.fps for r, b in zip(taken, runs[kind, everies[0]], strict=True)]
        rows.append(
            {
                "tracker": kind,
                "detect_every": every,
                "fps": [round(f, 3) for f in fps],
                "speedup": [round(x, 3) for x in speedup],
                "vs_reference": [
                    round(r.fps / b.fps, 3) for r, b in zip(taken, references, strict=True)
                ],
                "map50": round(score.overall.map50, 4),
                "map50_95": round(score.overall.map50_95, 4),
                "map50_predicted": None
                if score.predicted is None
                else round(score.predicted.map50, 4),
                "boxes": score.overall.candidate_boxes,
                "reference_boxes": score.overall.reference_boxes,
                "rounds_differ_px": drift,
            }
        )
    rows.sort(key=lambda row: (row["tracker"], row["detect_every"]))

    some = next(iter(runs.values()))[0]
    print(
        f"\nreference (every frame, no tracking) {spread([r.fps for r in references])} FPS;"
        f" tracker high {some.high}, low {some.low}; median (min–max) of {args.rounds} rounds"
    )
    lines = [
        f"| tracker | N | FPS | × N={everies[0]} | × reference | mAP50 | mAP50 predicted frames"
        " | mAP50-95 | boxes (reference) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        predicted = "—" if row["map50_predicted"] is None else f"{row['map50_predicted']:.3f}"
        lines.append(
            f"| {row['tracker']} | {row['detect_every']} | {spread(row['fps'])}"
            f" | {spread(row['speedup'])} | {spread(row['vs_reference'])} | {row['map50']:.3f}"
            f" | {predicted} | {row['map50_95']:.3f} | {row['boxes']} ({row['reference_boxes']}) |"
        )
        if row["rounds_differ_px"]:
            lines.append(f"(rounds differ by {row['rounds_differ_px']} px: not deterministic)")
    print("\n".join(lines))
    for row in rows:
        if row["detect_every"] == TARGET_EVERY:
            speedup = statistics.median(row["speedup"])
            met = row["map50"] >= TARGET_MAP50 and speedup >= TARGET_SPEEDUP
            print(
                f"{row['tracker']} N={TARGET_EVERY}: mAP50 {row['map50']:.3f}"
                f" (target ≥ {TARGET_MAP50}), {speedup:.2f}× (target ≥ {TARGET_SPEEDUP}):"
                f" {'met' if met else 'MISSED'}"
            )

    sweep: list[dict[str, Any]] = []
    if args.sweep:
        raw = run_pipeline(model, args.video, args.frames, some.low, PipelineOptions())
        for (kind, every), taken in runs.items():  # the replay must be the pipeline's own result
            replayed = boxes_of(
                replay(make(kind, some.high, some.low), raw.boxes, raw.stamps, every)
            )
            print(f"replay check {kind} N={every}: max {same_boxes(replayed, taken[0].boxes)} px")
        grid: list[dict[str, float]] = [
            {},
            *({"lost_seconds": s} for s in (0.5, 2.0)),
            *({"match_iou": m} for m in (0.1, 0.2)),
            {"lost_seconds": 2.0, "match_iou": 0.2},
            {"per_class": True},  # tracks kept to one class (the default before 2026-11-23)
        ]
        print("\n| tracker | options | " + " | ".join(f"N={n}" for n in everies) + " |")
        print("|---|---|" + "---:|" * len(everies))
        for kind in kinds:
            for tracker_options in grid:
                scores, ids = [], []
                for every in everies:
                    tracker = make(kind, some.high, some.low, **tracker_options)
                    tracked = replay(tracker, raw.boxes, raw.stamps, every)
                    boxes = boxes_of(tracked)
                    scores.append(tracking_fidelity(reference.boxes, boxes, every).overall.map50)
                    ids.append(identities(tracked))
                    sweep.append(
                        {
                            "tracker": kind,
                            "options": tracker_options,
                            "detect_every": every,
                            "map50": round(scores[-1], 4),
                            "track_ids": ids[-1],
                        }
                    )
                label = ", ".join(f"{k} {v}" for k, v in tracker_options.items()) or "defaults"
                cells = [f"{x:.3f} ({n} ids)" for x, n in zip(scores, ids, strict=True)]
                print(f"| {kind} | {label} | " + " | ".join(cells) + " |")
    if args.json:
        out = {
            "cpu": cpu_model(),
            "frames": args.frames,
            "rounds": args.rounds,
            "reference_fps": [r.fps for r in references],
            "rows": rows,
            "sweep": sweep,
        }
        args.json.write_text(json.dumps(out, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
