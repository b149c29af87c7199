"""Issue #17's table: the cached plan as it was applied before geometry-aware plans (the same
configuration on every source) vs what a run uses now (`accuracy.geometry.settle`: the plan's
proof for the source's size, or the first-frames check's choice), on vtest.avi (the tune video),
the 640×480 pan clip (scripts/make_clips.py) and Megamind.avi.

For each clip: fidelity mAP50 of both against the ONNX Runtime FP32 reference over the first
`--frames` frames, the time the first-frames check took (a fresh check: the plan's proofs for
other sizes are dropped first), and each configuration's end-to-end FPS over those frames (a
file-mode Pipeline, no sinks, model load excluded).

Needs the demo detector's plan cached (`visionrt tune`).

Usage: .venv/bin/python scripts/bench_geometry.py [--frames 800] [--out docs/results/geometry.json]
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import tempfile
import time
from pathlib import Path

from visionrt import Pipeline
from visionrt.accuracy.check import reference_detections
from visionrt.accuracy.geometry import settle
from visionrt.backends import BackendOptions
from visionrt.fidelity import fidelity
from visionrt.hardware import cpu_model
from visionrt.models import demo_model_path
from visionrt.paths import DEMO_VIDEO, cache_root
from visionrt.plans import PlanUse, cached_plan
from visionrt.plans.resolve import layered
from visionrt.plans.store import RUN_KEYS
from visionrt.postprocess import PostprocessOptions
from visionrt.sources import SourceOptions

CLIPS = cache_root() / "clips"
DATA = DEMO_VIDEO.parent


def timed_fidelity(sections: dict, clip: Path, reference: list) -> tuple[float, float]:
    """mAP50 against the reference over the same frames, and the end-to-end FPS of a run of the
    configuration over them (a Pipeline in file mode, as `visionrt run` builds it)."""
    pipeline = Pipeline(
        [str(clip)],
        sections["model"],
        sections.get("backend", ""),
        layered(BackendOptions(), sections.get("inference") or {}),
        PostprocessOptions(conf=0.25),
        SourceOptions(mode="file", max_frames=len(reference)),
        plan=False,
    )
    try:
        found = [result.detections for result in pipeline]
    finally:
        pipeline.close()
    return fidelity(reference, found).map50, pipeline.summary().fps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--frames", type=int, default=800, help="frames scored (800: every frame of these clips)"
    )
    parser.add_argument("--out", type=Path, default=Path("docs/results/geometry.json"))
    parser.add_argument("--only", default="", help="comma-separated clip names to run")
    args = parser.parse_args()
    found = cached_plan(demo_model_path())
    if found is None:
        sys.exit("no plan cached for the demo detector: run `visionrt tune` first")
    cached, _ = found
    clips = [DEMO_VIDEO, CLIPS / "vtest_pan_640x480.avi", DATA / "Megamind.avi"]
    if args.only:
        clips = [c for c in clips if c.name in args.only.split(",")]
    missing = [c for c in clips if not c.is_file()]
    if missing:
        sys.exit(f"missing {missing[0]}: run scripts/make_clips.py")
    rows = []
    for clip in clips:
        plan = copy.deepcopy(cached)
        tune_video = Path(str(plan.tuned.get("video", ""))).name
        proven = plan.tuned.get("proven") or {}
        plan.tuned["proven"] = {k: v for k, v in proven.items() if v.get("by") == "tune"}
        sections = {key: plan.run[key] for key in RUN_KEYS if key in plan.run}
        with tempfile.TemporaryDirectory() as folder:
            use = PlanUse(copy.deepcopy(sections), "", plan, Path(folder) / "plan.yaml")
            started = time.monotonic()
            settled = settle(use, [str(clip)], say=lambda line: print(f"  {line}", flush=True))
            check_s = time.monotonic() - started
        images, reference = reference_detections(
            Path(str(plan.tuned["source_model"])), str(clip), args.frames, 0.25, seconds=1e9
        )
        today, today_fps = timed_fidelity(sections, clip, reference)
        source = str(plan.tuned["source_model"])
        runs = settled.sections or {"model": source, "backend": "onnxruntime", "inference": {}}
        aware, aware_fps = timed_fidelity(runs, clip, reference)
        row = {
            "clip": clip.name,
            "frames": len(images),
            "size": f"{images[0].shape[0]}x{images[0].shape[1]}",
            "plan_as_applied_before": {"fidelity": round(today, 4), "fps": round(today_fps, 1)},
            "geometry_aware": {
                "fidelity": round(aware, 4),
                "fps": round(aware_fps, 1),
                "note": settled.note,
            },
            "check_seconds": round(check_s, 1) if clip.name != tune_video else 0.0,
        }
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.only and args.out.is_file():  # the other clips' rows stay as they were measured
        ran = {row["clip"] for row in rows}
        kept = [r for r in json.loads(args.out.read_text())["rows"] if r["clip"] not in ran]
        rows = kept + rows
    result = {"cpu": cpu_model(), "plan": cached.summary_line(), "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
