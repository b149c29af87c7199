"""Issue #19's benchmark: end-to-end FPS and fidelity of motion gating (`--motion skip`,
`--motion regions`, with tracking and detect-every-N) against the plan alone, per clip,
alternating within each round.

Each configuration is its own `visionrt run` on the clip's first --frames frames (the tuned plan,
JSONL sink only: x264 would hide what gating saves), FPS from the run summary; fidelity is mAP50
of the boxes each frame got (reused or not) against the FP32 reference run on every frame
(`bench.reference.detections_over`, ONNX Runtime), the issue's budget being 0.95.

Regions run windows through an OpenVINO INT8 detector exported at --region px (made once by
`visionrt export`, cached) beside the plan's whole-frame detector.

Usage: .venv/bin/python scripts/bench_motion.py [--runs 2] [--frames 300]
       [--clips vtest,Megamind,tree] [--min-area 0.002,0.01,0.03] [--refresh 2]
       [--threshold 25] [--modes skip,regions] [--every 1,2] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
from bench_plan import spread  # scripts/ is on the path of a script run from it

from visionrt.bench.reference import detections_over
from visionrt.fidelity import fidelity
from visionrt.hardware import cpu_model
from visionrt.models import demo_model_path
from visionrt.types import Detections

ROOT = Path(__file__).resolve().parent.parent
VISIONRT = str(Path(sys.executable).parent / "visionrt")
DATA = Path("/usr/share/doc/opencv-doc/examples/data")


def run(video: Path, frames: int, extra: list[str]) -> tuple[dict[str, Any], list[Detections]]:
    """One `visionrt run`: its summary, and each frame's boxes from its JSONL."""
    with tempfile.TemporaryDirectory() as out:
        command = [VISIONRT, "run", str(video), "--no-video", "-o", out, "-q", "--json",
                   "--max-frames", str(frames), *extra]  # fmt: skip
        proc = subprocess.run(command, capture_output=True, text=True)
        if proc.returncode != 0:
            sys.exit(f"{' '.join(command)}: exit {proc.returncode}: {proc.stderr[-400:]}")
        summary = json.loads(proc.stdout[proc.stdout.index("{") :])
        lines = (Path(out) / f"{video.stem}.jsonl").read_text(encoding="utf-8").splitlines()
    boxes = []
    for line in map(json.loads, lines):
        rows = line["detections"]
        boxes.append(
            Detections(
                np.array([r["xyxy"] for r in rows], np.float32).reshape(-1, 4),
                np.array([r["confidence"] for r in rows], np.float32),
                np.array([r["class_id"] for r in rows], np.int32),
            )
        )
    reused = sum(1 for line in map(json.loads, lines) if line.get("processed") == "reused")
    summary["reused_share"] = reused / max(1, len(lines))
    return summary, boxes


def region_model(side: int) -> str:
    """The demo detector as OpenVINO INT8 at side×side (exported once, then from the cache)."""
    command = [VISIONRT, "export", "--to", "openvino-int8", "--imgsz", f"{side}x{side}",
               "--no-fidelity"]  # fmt: skip
    proc = subprocess.run(command, capture_output=True, text=True)
    said = [line for line in proc.stdout.splitlines() if line.startswith("artifact: ")]
    if proc.returncode != 0 or not said:
        sys.exit(f"{' '.join(command)}: exit {proc.returncode}: {proc.stderr[-400:]}")
    return said[-1].removeprefix("artifact: ").strip()


def configurations(args: argparse.Namespace) -> dict[str, list[str]]:
    """Named `visionrt run` flags: the plan (and the plan detecting every N with tracking),
    then each gating mode over the settings swept."""
    configs: dict[str, list[str]] = {}
    modes = args.modes.split(",")
    regions = ["--set", f"pipeline.motion.region={args.region}", "--set",
               f"pipeline.motion.region_model={region_model(args.region)}"]  # fmt: skip
    sweeps = [(a, r, t) for a in args.min_area.split(",") for r in args.refresh.split(",")
              for t in args.threshold.split(",")]  # fmt: skip
    for every in args.every.split(","):
        paced = ["--track", "--detect-every", every] if every != "1" else []
        tag = f", every {every}" if every != "1" else ""
        configs[f"plan{tag}"] = [*paced, "--motion", "off"]  # a plan may carry gating
        for mode in modes:
            for area, refresh, threshold in sweeps:
                name = f"{mode}, min_area {area}" + tag
                name += f", refresh {refresh}" if "," in args.refresh else ""
                name += f", threshold {threshold}" if "," in args.threshold else ""
                configs[name] = [*paced, "--motion", mode,
                                 "--set", f"pipeline.motion.min_area={area}",
                                 "--set", f"pipeline.motion.refresh={refresh}",
                                 "--set", f"pipeline.motion.threshold={threshold}",
                                 *(regions if mode == "regions" else [])]  # fmt: skip
    return configs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--frames", type=int, default=300)
    parser.add_argument("--clips", default="vtest,Megamind,tree")
    parser.add_argument("--min-area", default="0.002,0.01,0.03")
    parser.add_argument("--refresh", default="2", help="motion_refresh values (seconds)")
    parser.add_argument("--threshold", default="25", help="motion_threshold values")
    parser.add_argument("--modes", default="skip", help="gating modes: skip, regions")
    parser.add_argument("--every", default="1", help="detect-every values (> 1: with --track)")
    parser.add_argument("--region", type=int, default=320, help="region side (pixels)")
    parser.add_argument("--json", type=Path, default=ROOT / "docs" / "results" / "motion.json")
    args = parser.parse_args()
    configs = configurations(args)
    model = demo_model_path()
    table: dict[str, Any] = {"cpu": cpu_model(), "frames": args.frames, "clips": {}}
    for clip in args.clips.split(","):
        video = DATA / f"{clip}.avi"
        print(f"{clip}: FP32 reference on every frame …", file=sys.stderr)
        reference = detections_over(video, model, frames=args.frames)
        rows: dict[str, dict[str, list[float]]] = {name: {} for name in configs}
        for index in range(args.runs):
            order = list(configs.items())
            for name, extra in order if index % 2 == 0 else order[::-1]:
                summary, boxes = run(video, args.frames, extra)
                score = fidelity(reference[: len(boxes)], boxes).map50
                row = rows[name]
                row.setdefault("fps", []).append(summary["fps"])
                row.setdefault("map50", []).append(score)
                row.setdefault("reused_share", []).append(summary["reused_share"])
                motion = summary.get("motion") or {}
                out = max(1, summary["frames_out"])
                row.setdefault("regions_share", []).append(motion.get("regions", 0) / out)
                row.setdefault("pixel_share", []).append(motion.get("pixel_share", 1.0))
                said = f"{summary['fps']:.1f} FPS, mAP50 {score:.3f}"
                said += f", reused {summary['reused_share']:.0%}"
                print(f"round {index + 1} {clip} · {name}: {said}", file=sys.stderr)
        base = statistics.median(rows["plan"]["fps"])  # every-N rows too: the plan's own pace
        for name, row in rows.items():
            row["speedup"] = [fps / base for fps in row["fps"]]
            print(f"{clip:9s} {name:32s} FPS {spread(row['fps'], '.1f')}  ×{spread(row['speedup'])}"
                  f"  mAP50 {spread(row['map50'], '.3f')}  reused"
                  f" {spread(row['reused_share'], '.2f')}  regions"
                  f" {spread(row['regions_share'], '.2f')}  pixels"
                  f" {spread(row['pixel_share'], '.2f')}")  # fmt: skip
        table["clips"][clip] = rows
    args.json.write_text(json.dumps(table, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
