"""The host's ceiling of each input path: `visionrt run` with the null backend (no model) in each
input form it can declare — float32 (host letterbox, today's path for every runtime but torch on
CUDA), uint8 (folded, as OpenVINO's) and frames (staged for a device, which does the rest) — over
1, 8 and 32 copies of a video, alternating within each round; median (min–max) of the rounds.

Usage: .venv/bin/python scripts/bench_host_paths.py [--video V] [--streams 1,8,32] [--frames 150]
       [--runs 3] [--forms float32,uint8,frames] [--json out.json]
A form may name how the decoder delivers pictures after a colon (`source.pixels`): `frames:bgr`
is the frames path with FFmpeg's BGR conversion, as it was before frames travelled as I420.
With `--before SRC` (an older checkout's src, e.g. from `git worktree add`), a form written
`before/frames` runs that tree through PYTHONPATH, with the same virtual environment. A form
ending `@P` runs the streams on P worker processes (`--ray processes --workers P`, each worker
a pipeline of its share of the streams, batched by that share).
With no GPU, the frames form measures the host's share alone (the null backend on the CPU skips
what a device would do); with --device cuda it does that work on the GPU.
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
from visionrt.paths import DEMO_VIDEO

VISIONRT = str(Path(sys.executable).parent / "visionrt")


def run(
    video: str, streams: int, frames: int, form: str, device: str, before: Path | None
) -> dict[str, Any]:
    sources = [f"s{i}={video}" for i in range(streams)]
    env = dict(os.environ)
    if form.startswith("before/"):
        if before is None:
            sys.exit(f"{form}: give the older checkout's src with --before")
        env["PYTHONPATH"], form = str(before), form.removeprefix("before/")
    form, _, processes = form.partition("@")
    share = -(-streams // int(processes or 1))  # each worker process's streams
    with tempfile.TemporaryDirectory() as out:
        command = [VISIONRT, "run", *sources, "--backend", "null", "--batch", str(share)]
        if processes:
            command += ["--ray", "processes", "--workers", processes]
            command += ["--set", "cluster.worker_cpus=1"]
            command += ["--set", f"cluster.files_per_worker={share}"]
        form, _, pixels = form.partition(":")
        command += ["--set", f"inference.settings.input={form}", "--device", device]
        if pixels:
            command += ["--set", f"source.pixels={pixels}"]
        command += ["--no-plan", "--no-video", "--no-jsonl", "-q", "--json", "-o", out]
        command += ["--max-frames", str(frames)]
        proc = subprocess.run(command, capture_output=True, text=True, env=env)
    if proc.returncode:
        sys.exit(f"visionrt run failed: {proc.stderr.strip().splitlines()[-1:]}")
    summary: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    if not summary["accounted"] or summary["frames_out"] != streams * frames:
        sys.exit(f"frames lost: {summary['frames_in']} in, {summary['frames_out']} out")
    return summary


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.0f} ({min(values):.0f}–{max(values):.0f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--video", default=str(DEMO_VIDEO))
    parser.add_argument("--streams", default="1,8,32")
    parser.add_argument("--frames", type=int, default=150, help="frames per stream")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--forms", default="float32,uint8,frames")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--before", type=Path, default=None, help="an older checkout's src")
    args = parser.parse_args()
    counts = [int(c) for c in args.streams.split(",")]
    forms = args.forms.split(",")
    fps: dict[tuple[str, int], list[float]] = {(f, c): [] for f in forms for c in counts}
    cpu: dict[tuple[str, int], list[float]] = {(f, c): [] for f in forms for c in counts}
    # Worker processes (`@P`): the rate after the first result, their start left out.
    running: dict[tuple[str, int], list[float]] = {(f, c): [] for f in forms for c in counts}
    for index in range(args.runs):
        for count in counts:
            for form in forms:
                summary = run(args.video, count, args.frames, form, args.device, args.before)
                fps[form, count].append(summary["fps"])
                cpu[form, count].append(summary["cpu_percent"])
                if summary.get("cluster"):
                    running[form, count].append(summary["cluster"]["fps_after_first_result"])
        line = ", ".join(f"{f} ×{c} {v[-1]:.0f}" for (f, c), v in fps.items())
        print(f"round {index + 1}: {line}", file=sys.stderr)
    print(f"CPU: {cpu_model()}; {Path(args.video).name}, {args.frames} frames per stream,")
    print(f"{args.runs} rounds alternating; null backend on {args.device}; FPS median (min–max)")
    print("| input form | " + " | ".join(f"{c} stream{'s' * (c > 1)}" for c in counts) + " |")
    print("|---|" + "---|" * len(counts))
    for form in forms:
        cells = " | ".join(
            f"{spread(fps[form, c])} FPS, "
            + (
                f"{spread(running[form, c])} after the first result"
                if running[form, c]
                else f"CPU {statistics.median(cpu[form, c]):.0f}%"
            )
            for c in counts
        )
        print(f"| {form} | {cells} |")
    if args.json:
        data = {"cpu": cpu_model(), "video": args.video, "frames": args.frames,
                "fps": {f"{f}x{c}": v for (f, c), v in fps.items()},
                "cpu_percent": {f"{f}x{c}": v for (f, c), v in cpu.items()},
                "fps_after_first_result": {f"{f}x{c}": v for (f, c), v in running.items() if v},
                "before": str(args.before or ""), "forms": forms}  # fmt: skip
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(data, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
