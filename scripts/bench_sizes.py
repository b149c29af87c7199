"""Issue #32's mixed-size benchmark: three cameras of two frame sizes (vtest150.mp4, 768×576, and
cup150.mp4 and box150.mp4, 640×480 windows of vtest.avi, 150 frames each) through one `visionrt
run`, against vtest150.mp4 alone, under a plan folder — for each given source tree and plan
folder (`--tree before=/path/to/old/src,PLANS`), alternating within each round, so drift hits all
alike.

Each run starts from a copy of the plan folder as it was (an audit that refutes a proof must not
change the next run), with the sizes already proven there (run each command once first: a check
would be timed). The FPS is the run summary's (model load excluded).

Usage: .venv/bin/python scripts/bench_sizes.py --plans DIR [--tree NAME=SRC[,PLANS] ...]
       [--runs 3] [--clips DIR] [--out docs/results/sizes.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import cv2
import numpy as np

from visionrt.hardware import cpu_model
from visionrt.paths import DEMO_VIDEO

VISIONRT = str(Path(sys.executable).parent / "visionrt")
# name → (first frame of vtest.avi, crop rows, crop columns): 150 frames each.
CLIPS = {
    "vtest150": (0, slice(0, 576), slice(0, 768)),
    "cup150": (200, slice(0, 480), slice(0, 640)),
    "box150": (400, slice(96, 576), slice(128, 768)),
}


def make_clips(folder: Path, frames: int = 150) -> dict[str, Path]:
    """The clips as H.264 (CRF 18), made once."""
    folder.mkdir(parents=True, exist_ok=True)
    made = {}
    for name, (start, rows, columns) in CLIPS.items():
        path = made[name] = folder / f"{name}.mp4"
        if path.is_file():
            continue
        capture = cv2.VideoCapture(str(DEMO_VIDEO))
        capture.set(cv2.CAP_PROP_POS_FRAMES, start)
        with av.open(str(path), "w") as container:
            stream = container.add_stream("libx264", rate=Fraction(10))
            stream.height, stream.width = rows.stop - rows.start, columns.stop - columns.start
            stream.pix_fmt, stream.options = "yuv420p", {"crf": "18"}
            for _ in range(frames):
                ok, image = capture.read()
                if not ok:
                    break
                crop = np.ascontiguousarray(image[rows, columns])
                container.mux(stream.encode(av.VideoFrame.from_ndarray(crop, format="bgr24")))
            container.mux(stream.encode(None))
        capture.release()
    return made


def run_once(tree: str, sources: list[str], plans: Path) -> dict[str, Any]:
    """One `visionrt run` of `sources` with the code under `tree` and a copy of `plans`."""
    with tempfile.TemporaryDirectory() as scratch:
        copy = Path(scratch) / "plans"
        shutil.copytree(plans, copy)
        env = {**os.environ, "VISIONRT_PLANS": str(copy), "PYTHONPATH": tree}
        out = Path(scratch) / "out"
        command = [VISIONRT, "run", *sources, "-o", str(out), "-q"]
        done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(command)}: exit {done.returncode}: {done.stderr[-800:]}")
        summary = json.loads((out / "summary.json").read_text())
    return {
        "fps": round(summary["fps"], 2),
        "frames": summary["frames_out"],
        "accounted": summary["accounted"],
        "detectors": [
            (row["label"], row["sources"]) for row in summary["backend"].get("detectors", [])
        ]
        or [summary["backend"]["precision"]],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plans", type=Path, required=True)
    parser.add_argument(
        "--tree", action="append", default=[], help="NAME=SRC[,PLANS] (default: this, --plans)"
    )
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--clips", type=Path, default=Path(tempfile.gettempdir()) / "clips32")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    given = dict(t.split("=", 1) for t in args.tree) or {"this": str(Path("src").resolve())}
    trees = {name: value.split(",")[0] for name, value in given.items()}
    plans = {n: Path(v.split(",")[1]) if "," in v else args.plans for n, v in given.items()}
    clips = make_clips(args.clips)
    setups = {
        "one": [f"rgb={clips['vtest150']}"],
        "three": [f"rgb={clips['vtest150']}", f"slam1={clips['cup150']}",
                  f"slam2={clips['box150']}"],
    }  # fmt: skip
    order = [(tree, setup) for tree in trees for setup in setups]
    runs: dict[str, list[dict[str, Any]]] = {f"{t}/{s}": [] for t, s in order}
    for round_ in range(args.runs):
        # Rotate the order each round: none always runs first (a cold cache) or last.
        shift = round_ % len(order)
        for tree, setup in order[shift:] + order[:shift]:
            result = run_once(trees[tree], setups[setup], plans[tree])
            runs[f"{tree}/{setup}"].append(result)
            print(f"round {round_ + 1} {tree}/{setup}: {result}", flush=True)
    report: dict[str, Any] = {"cpu": cpu_model(), "cpus": os.cpu_count(), "runs": runs}
    report["trees"] = {name: {"src": trees[name], "plans": str(plans[name])} for name in trees}
    for tree in trees:
        one = [r["fps"] for r in runs[f"{tree}/one"]]
        three = [r["fps"] for r in runs[f"{tree}/three"]]
        ratios = [t / o for t, o in zip(three, one, strict=True)]
        report[tree] = {
            "one_fps": statistics.median(one),
            "three_fps": statistics.median(three),
            "three_over_one": round(statistics.median(ratios), 3),
            "ratio_range": [round(min(ratios), 3), round(max(ratios), 3)],
        }
        print(f"{tree}: {report[tree]}")
    if args.out is not None:
        args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
