"""Issue #16's benchmark: the tuned plan as the commands users type next compose with it, each
against its baseline in the same round, alternating, ≥ 3 rounds:

- live: one camera at the video's 10 FPS (`--realtime`): the plan's live settings (latency hint)
  vs its throughput settings on the same artifact — glass-to-result p50/p99;
- batch: three cameras `--batch 3`: the plan's batch-ready artifact vs the reference;
- seed: `rgb` detect + depth, `slam1/slam2` detect, depth at 266: the depth plan vs FP32 depth.

Each configuration runs as its own `visionrt run` process (model load excluded: figures from the
run summary). Needs the plans cached (`visionrt tune --depth DEPTH --depth-size 266`).

Usage: .venv/bin/python scripts/bench_plan_flags.py [--runs 3] [--frames 200] [--only live,...]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from bench_plan import spread  # scripts/ is on the path of a script run from it

from visionrt.hardware import cpu_model
from visionrt.models import demo_model_path, depth_model_path
from visionrt.paths import DEMO_VIDEO
from visionrt.plans import cached_plan

ROOT = Path(__file__).resolve().parent.parent
VISIONRT = str(Path(sys.executable).parent / "visionrt")


def run(args: list[str]) -> dict:
    with tempfile.TemporaryDirectory() as out:
        command = [VISIONRT, "run", "--no-video", "-o", out, "-q", "--json", *args]
        proc = subprocess.run(command, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"{' '.join(command)}: exit {proc.returncode}: {proc.stderr.strip()[-400:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def scenarios(frames: int, plan_file: Path) -> dict[str, dict[str, list[str]]]:
    video, depth = str(DEMO_VIDEO), str(depth_model_path())
    cams = [f"a={video}", f"b={video}", f"c={video}"]
    seed = [
        f"rgb={video}",
        f"slam1={video}",
        f"slam2={video}",
        "--depth",
        depth,
        "--depth-on",
        "rgb",
        "--depth-size",
        "266",
    ]
    limit = ["--max-frames", str(frames)]
    return {
        "live": {
            "plan (live: latency hint)": [video, "--realtime", "--plan", str(plan_file), *limit],
            "plan, throughput hint": [
                video,
                "--realtime",
                "--plan",
                str(plan_file),
                "--set",
                "inference.settings.hint=throughput",
                *limit,
            ],
        },
        "batch": {
            "plan --batch 3": [*cams, "--batch", "3", *limit],
            "reference --batch 3": [*cams, "--batch", "3", "--no-plan", *limit],
        },
        "seed": {
            "detector + depth plans": [*seed, *limit],
            "detector plan, FP32 depth": [*seed, "--set", "depth.backend=onnxruntime", *limit],
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--frames", type=int, default=200)
    parser.add_argument("--only", default="live,batch,seed")
    parser.add_argument("--json", type=Path, default=ROOT / "docs" / "results" / "plan_flags.json")
    args = parser.parse_args()
    found = cached_plan(demo_model_path())
    if found is None:
        sys.exit("no cached plan for the demo model on this machine: run `visionrt tune` first")
    plan, path = found
    print(f"plan {path.name}: {plan.summary_line()}", file=sys.stderr)
    chosen = scenarios(args.frames, path)
    chosen = {k: v for k, v in chosen.items() if k in args.only.split(",")}
    results: dict[str, dict[str, list[dict]]] = {s: {c: [] for c in v} for s, v in chosen.items()}
    for index in range(args.runs):
        for scenario, configs in chosen.items():
            for label, extra in configs.items():
                summary = run(extra)
                results[scenario][label].append(summary)
                print(
                    f"round {index + 1} {scenario} · {label}: {summary['fps']:.1f} FPS,"
                    f" p50 {summary['latency'].get('p50', 0):.0f} ms",
                    file=sys.stderr,
                )
    print(
        f"CPU: {cpu_model()}; {DEMO_VIDEO.name}, {args.frames} frames per source;"
        f" {args.runs} rounds, alternating; median (min–max)"
    )
    print("| scenario | configuration | FPS (all sources) | glass-to-result p50 ms | p99 ms |")
    print("|---|---|---|---|---|")
    for scenario, configs in results.items():
        for label, runs in configs.items():
            fps = [r["fps"] for r in runs]
            p50 = [r["latency"].get("p50", 0.0) for r in runs]
            p99 = [r["latency"].get("p99", 0.0) for r in runs]
            cells = [spread(fps, ".1f"), spread(p50, ".0f"), spread(p99, ".0f")]
            print(f"| {scenario} | {label} | {' | '.join(cells)} |")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    slim = {
        s: {
            c: [{k: r[k] for k in ("fps", "latency", "notes", "backend")} for r in runs]
            for c, runs in configs.items()
        }
        for s, configs in results.items()
    }
    args.json.write_text(
        json.dumps({"cpu": cpu_model(), "plan": str(path), "runs": slim}, indent=2, default=str)
    )


if __name__ == "__main__":
    main()
