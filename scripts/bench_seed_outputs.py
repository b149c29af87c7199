"""The host's ceiling of the seed scenario as typed: `visionrt run rgb=… slam1=… slam2=… --depth …
--depth-on rgb` with its outputs (three annotated videos, the depth video, the JSONL) and the
null backend for both models, so what is left is decoding, preparing, fusing and writing;
beside it the same with `--no-video --set depth.video=false` (nothing encoded). Alternating
within each round, median (min–max) of the rounds, FPS per camera.

Usage: .venv/bin/python scripts/bench_seed_outputs.py [--frames 300] [--runs 3]
       [--before SRC] [--json out.json]
With `--before SRC` (an older checkout's src, e.g. from `git worktree add`), each case runs that
tree too, through PYTHONPATH, with the same virtual environment.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from visionrt.hardware import cpu_model
from visionrt.models import depth_model_path
from visionrt.paths import DEMO_VIDEO

VISIONRT = str(Path(sys.executable).parent / "visionrt")
CASES = {
    "as typed": [],
    "no video written": ["--no-video", "--set", "depth.video=false"],
}
NULL = ["--backend", "null", "--set", 'depth.backend="null"', "--no-plan"]


def run(frames: int, extra: list[str], src: Path | None) -> dict[str, Any]:
    video, depth = str(DEMO_VIDEO), str(depth_model_path())
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = str(src)
    with tempfile.TemporaryDirectory() as out:
        command = [VISIONRT, "run", f"rgb={video}", f"slam1={video}", f"slam2={video}"]
        command += ["--depth", depth, "--depth-on", "rgb", *NULL, *extra]
        command += ["-q", "--json", "-o", out, "--max-frames", str(frames)]
        proc = subprocess.run(command, capture_output=True, text=True, env=env)
    if proc.returncode:
        sys.exit(f"visionrt run failed: {proc.stderr.strip().splitlines()[-1:]}")
    summary: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    if not summary["accounted"] or summary["frames_out"] != 3 * frames:
        sys.exit(f"frames lost: {summary['frames_in']} in, {summary['frames_out']} out")
    return summary


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.1f} ({min(values):.1f}–{max(values):.1f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=300, help="frames per camera")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--before", type=Path, default=None, help="an older checkout's src")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    trees: list[tuple[str, Path | None]] = [("now", None)]
    if args.before is not None:
        trees.insert(0, ("before", args.before))
    fps: dict[str, list[float]] = {f"{c}, {t}": [] for c in CASES for t, _ in trees}
    cpu: dict[str, list[float]] = {key: [] for key in fps}
    for index in range(args.runs):
        for case, extra in CASES.items():
            for tree, src in trees:
                summary = run(args.frames, extra, src)
                cameras = [source["fps"] for source in summary["sources"]]
                fps[f"{case}, {tree}"].append(min(cameras))
                cpu[f"{case}, {tree}"].append(summary["cpu_percent"])
        print(f"round {index + 1}: " + ", ".join(f"{k} {v[-1]:.1f}" for k, v in fps.items()),
              file=sys.stderr)  # fmt: skip
    print(f"CPU: {cpu_model()}; the seed scenario, null backends, {args.frames} frames per camera,")
    print(f"{args.runs} rounds alternating; FPS per camera (the slowest), median (min–max)")
    print("| case | FPS per camera | CPU % |")
    print("|---|---|---|")
    for key, values in fps.items():
        print(f"| {key} | {spread(values)} | {statistics.median(cpu[key]):.0f} |")
    if args.json:
        data = {"cpu": cpu_model(), "frames": args.frames, "fps_per_camera": fps,
                "cpu_percent": cpu, "before": str(args.before or "")}  # fmt: skip
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(data, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
