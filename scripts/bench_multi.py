"""Issue #7's multi-camera benchmark: N copies of the demo video as N cameras through one
`visionrt run` (detection; optionally depth on the first), aggregate FPS and per-camera p50/p99
glass-to-result latency, against the single-stream model-only throughput measured in the same
rounds.

Every configuration runs as its own `visionrt run` process (model load excluded: the FPS is the
run summary's), in turn within a round, so drift hits all alike; ratios are taken within a round.
Model-only: the same backend settings, `infer` on prepared real frames, one call in flight
("single stream") and, where the runtime overlaps requests, at its own concurrency.

Usage: .venv/bin/python scripts/bench_multi.py [--sources 1,3,6] [--frames 150] [--runs 3]
       [--set KEY=VALUE ...] [--depth MODEL] [--label NAME]
The run uses the cached plan for the demo model when there is one (as a plain `visionrt run`).
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

from visionrt.bench.measure import measure_model_only, prepared_inputs
from visionrt.config import load_config
from visionrt.hardware import cpu_model
from visionrt.models import demo_model_path
from visionrt.paths import DEMO_VIDEO
from visionrt.tasks import DetectTask
from visionrt.tune import cached_plan

VISIONRT = str(Path(sys.executable).parent / "visionrt")


def spread(values: list[float], fmt: str = ".2f") -> str:
    if not values:
        return "—"
    return f"{statistics.median(values):{fmt}} ({min(values):{fmt}}–{max(values):{fmt}})"


def run_cameras(count: int, frames: int, extra: list[str], depth: str) -> dict[str, Any]:
    sources = [f"cam{i}={DEMO_VIDEO}" for i in range(count)]
    with tempfile.TemporaryDirectory() as out:
        command = [VISIONRT, "run", *sources, "--no-video", "-o", out, "-q", "--json", *extra]
        command += ["--max-frames", str(frames)]
        if depth:
            command += ["--depth", depth, "--depth-on", "cam0"]
        proc = subprocess.run(command, capture_output=True, text=True)
    if proc.returncode:
        sys.exit(f"visionrt run failed: {proc.stderr.strip().splitlines()[-1:]}")
    summary: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    if not summary["accounted"] or summary["frames_out"] != count * frames:
        sys.exit(f"frames lost: {summary['frames_in']} in, {summary['frames_out']} out")
    return summary


def model_only(overrides: list[str], calls: int) -> tuple[float, float, str]:
    """(single-stream FPS, FPS at the runtime's concurrency, description) for the plan's
    backend settings on the demo model."""
    found = cached_plan(demo_model_path())
    config = load_config(overrides=overrides, base=found[0].run if found else None)
    model = config.model or str(demo_model_path())
    task = DetectTask(model, config.backend, config.inference)
    backend = task.backend
    inputs = prepared_inputs(str(DEMO_VIDEO), task.input_hw, task.layout, frames=16)
    concurrency = backend.concurrency
    backend.concurrency = 1
    single = 1 / statistics.median(measure_model_only(backend, inputs, calls))
    backend.concurrency = concurrency
    overlapped = single
    if concurrency > 1:
        overlapped = 1 / statistics.median(measure_model_only(backend, inputs, calls))
    info = backend.info
    what = f"{info.runtime} {info.precision} {task.input_hw[0]}×{task.input_hw[1]}"
    what += f", concurrency {concurrency}, batch {task.batch}"
    task.close()
    return single, overlapped, what


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sources", default="1,3,6")
    parser.add_argument("--frames", type=int, default=150, help="frames per camera")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--calls", type=int, default=40, help="model-only calls per round")
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--depth", default="", help="depth model on cam0")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    counts = [int(c) for c in args.sources.split(",")]
    extra = [a for o in args.overrides for a in ("--set", o)]
    fps: dict[int, list[float]] = {c: [] for c in counts}
    p50: dict[int, list[float]] = {c: [] for c in counts}
    p99: dict[int, list[float]] = {c: [] for c in counts}
    single: list[float] = []
    overlapped: list[float] = []
    what = ""
    for index in range(args.runs):
        one, many, what = model_only(args.overrides, args.calls)
        single.append(one)
        overlapped.append(many)
        for count in counts:
            summary = run_cameras(count, args.frames, extra, args.depth)
            fps[count].append(summary["fps"])
            p50[count].append(statistics.median(s["latency_ms"]["p50"] for s in summary["sources"]))
            p99[count].append(max(s["latency_ms"]["p99"] for s in summary["sources"]))
        line = ", ".join(f"{c} cams {fps[c][-1]:.2f} FPS" for c in counts)
        print(f"round {index + 1}: model-only {one:.2f} FPS; {line}", file=sys.stderr)
    print(f"CPU: {cpu_model()}; {what}; {args.frames} frames per camera of {DEMO_VIDEO.name};")
    print(f"{args.runs} rounds, median (min–max); depth on cam0: {args.depth or 'no'}")
    print(f"model-only single stream: {spread(single)} FPS; at its concurrency: "
          f"{spread(overlapped)} FPS")  # fmt: skip
    print("| cameras | aggregate FPS | × single-stream model-only | per-camera p50 ms |"
          " worst camera p99 ms |")  # fmt: skip
    print("|---|---|---|---|---|")
    results = {}
    for count in counts:
        ratio = [f / s for f, s in zip(fps[count], single, strict=True)]
        print(
            f"| {count} | {spread(fps[count])} | {spread(ratio)} | {spread(p50[count], '.0f')}"
            f" | {spread(p99[count], '.0f')} |"
        )
        results[count] = {"fps": fps[count], "ratio": ratio, "p50": p50[count], "p99": p99[count]}
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        data = {"cpu": cpu_model(), "config": what, "single": single, "overlapped": overlapped,
                "frames": args.frames, "depth": args.depth, "results": results}  # fmt: skip
        args.json.write_text(json.dumps(data, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
