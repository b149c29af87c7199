"""Each camera's own pace in the seed scenario from files: `visionrt run rgb=… slam1=… slam2=…
--depth … --depth-on rgb --max-frames N` on this machine's plans, as typed. For each camera, the
seconds from the run's start to its last result (read off the per-second telemetry, so the same
for any tree), its FPS over them and its glass-to-result p50. The detect-only cameras should go
at the detector's pace, not at the depth camera's. Alternating within each round, median
(min–max) of the rounds.

Usage: .venv/bin/python scripts/bench_camera_pace.py [--frames 40] [--runs 3] [--before SRC]
       [--json out.json]
With `--before SRC` (an older checkout's src, e.g. from `git worktree add`), each round runs that
tree too, through PYTHONPATH, with the same virtual environment.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench_plan import spread  # scripts/ is on the path of a script run from it

from visionrt.hardware import cpu_model
from visionrt.models import depth_model_path
from visionrt.paths import DEMO_VIDEO

VISIONRT = str(Path(sys.executable).parent / "visionrt")
CAMERAS = ("rgb", "slam1", "slam2")


def run(frames: int, src: Path | None) -> dict[str, Any]:
    """One run's figures: per camera `done` (s), `fps`, `p50` (ms); and the run's `seconds`."""
    video, depth = str(DEMO_VIDEO), str(depth_model_path())
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = str(src)
    with tempfile.TemporaryDirectory() as out:
        telemetry = Path(out) / "telemetry.jsonl"
        command = [VISIONRT, "run", *(f"{name}={video}" for name in CAMERAS)]
        command += ["--depth", depth, "--depth-on", "rgb", "--telemetry", str(telemetry)]
        command += ["-q", "--json", "-o", out, "--max-frames", str(frames)]
        proc = subprocess.run(command, capture_output=True, text=True, env=env)
        if proc.returncode:
            sys.exit(f"visionrt run failed: {proc.stderr.strip().splitlines()[-1:]}")
        snapshots = [json.loads(line) for line in telemetry.read_text().splitlines() if line]
    summary: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    if not summary["accounted"] or summary["frames_out"] != len(CAMERAS) * frames:
        sys.exit(f"frames lost: {summary['frames_in']} in, {summary['frames_out']} out")
    figures: dict[str, Any] = {"seconds": summary["seconds"]}
    for row in summary["sources"]:
        # The first snapshot with all of the camera's results; the run's end if none had them.
        done = next(
            (s["t"] for s in snapshots if s["sources"].get(row["name"], {}).get("frames_out", 0)
             >= frames),
            summary["seconds"],
        )  # fmt: skip
        done = min(done, summary["seconds"])
        figures[row["name"]] = {"done": done, "fps": frames / done, "p50": row["latency_ms"]["p50"]}
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=40, help="frames per camera")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--before", type=Path, default=None, help="an older checkout's src")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    trees: list[tuple[str, Path | None]] = [("now", None)]
    if args.before is not None:
        trees.insert(0, ("before", args.before))
    runs: dict[str, list[dict[str, Any]]] = {tree: [] for tree, _ in trees}
    for index in range(args.runs):
        for tree, src in trees:
            runs[tree].append(run(args.frames, src))
            last = runs[tree][-1]
            said = ", ".join(f"{c} {last[c]['done']:.0f} s" for c in CAMERAS)
            print(f"round {index + 1} {tree}: {said}", file=sys.stderr)
    print(f"CPU: {cpu_model()}; the seed scenario on this machine's plans, as typed,")
    print(f"{args.frames} frames per camera, {args.runs} rounds alternating; median (min–max)")
    print("| tree | camera | seconds to its last result | its FPS | p50 ms |")
    print("|---|---|---|---|---|")
    for tree, rows in runs.items():
        for camera in CAMERAS:
            done = [r[camera]["done"] for r in rows]
            fps = [r[camera]["fps"] for r in rows]
            p50 = [r[camera]["p50"] for r in rows]
            cells = [spread(done, ".1f"), spread(fps, ".1f"), spread(p50, ".0f")]
            print(f"| {tree} | {camera} | " + " | ".join(cells) + " |")
    if args.json:
        data = {"cpu": cpu_model(), "frames": args.frames, "runs": runs,
                "before": str(args.before or "")}  # fmt: skip
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(data, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
