"""Issue #34, item 4: the depth size as part of the plan. `tune --depth` with no size (it
measures 518, 364 and 266 against FP32 at 518), then the seed scenario as typed — `rgb` detect
+ depth, `slam1`/`slam2` detect, no --depth-size — against the same with `--depth-size 518`
(what a run did before the size was planned), alternating, each its own `visionrt run`,
figures from its summary (model load excluded): each camera's FPS.

With the architecture-only depth model (random weights) the AbsRel the size was chosen by is
plumbing, not accuracy: the table says so.

Usage: .venv/bin/python scripts/bench_depth_size.py [--runs 3] [--frames 80] [--no-tune]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from bench_plan import spread  # scripts/ is on the path of a script run from it
from bench_plan_flags import run

from visionrt.hardware import cpu_model
from visionrt.models import depth_model_path, is_architecture_only
from visionrt.paths import DEMO_VIDEO
from visionrt.plans import cached_plan

ROOT = Path(__file__).resolve().parent.parent
VISIONRT = str(Path(sys.executable).parent / "visionrt")


def tune(depth: Path, budget: float) -> dict:
    command = [VISIONRT, "tune", str(DEMO_VIDEO), "--if-missing", "--budget-minutes",
               f"{budget:g}", "--depth", str(depth)]  # fmt: skip
    started = time.monotonic()
    proc = subprocess.run(command, capture_output=True, text=True)
    seconds = time.monotonic() - started
    if proc.returncode != 0:
        sys.exit(f"{' '.join(command)}: exit {proc.returncode}: {proc.stderr.strip()[-600:]}")
    print(proc.stdout, proc.stderr, sep="\n", file=sys.stderr)
    found = cached_plan(depth)
    assert found is not None
    return {"seconds": round(seconds, 1), "depth_plan": found[0].tuned, "path": str(found[1])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--frames", type=int, default=80)
    parser.add_argument("--budget-minutes", type=float, default=3.0, help="the detector's tune")
    parser.add_argument("--no-tune", action="store_true", help="use the plans cached")
    parser.add_argument("--json", type=Path, default=ROOT / "docs" / "results" / "depth_size.json")
    args = parser.parse_args()
    depth = depth_model_path()
    tuned = {} if args.no_tune else tune(depth, args.budget_minutes)
    found = cached_plan(depth)
    if found is None:
        sys.exit(f"no depth plan for {depth.name}: run without --no-tune")
    print(f"depth plan {found[1].name}: {found[0].summary_line()}", file=sys.stderr)
    if not tuned:  # --no-tune: the record names the cached plan the runs took
        tuned = {"depth_plan": found[0].tuned, "path": str(found[1])}
    video = str(DEMO_VIDEO)
    seed = [f"rgb={video}", f"slam1={video}", f"slam2={video}", "--depth", str(depth),
            "--depth-on", "rgb", "--max-frames", str(args.frames)]  # fmt: skip
    configs = {
        "as typed (the plan's size)": seed,
        "--depth-size 518": [*seed, "--depth-size", "518"],
    }
    results: dict[str, list[dict]] = {label: [] for label in configs}
    for index in range(args.runs):
        for label, argv in configs.items():
            summary = run(argv)
            results[label].append(summary)
            cams = {s["name"]: s["fps"] for s in summary["sources"]}
            print(f"round {index + 1} · {label}: {cams}", file=sys.stderr)
    plan = found[0].tuned
    caveat = (
        " (architecture-only depth model: AbsRel is plumbing)"
        if is_architecture_only(depth)
        else ""
    )
    print(
        f"CPU: {cpu_model()}; {DEMO_VIDEO.name}, {args.frames} frames per camera; {args.runs}"
        f" rounds, alternating; median (min–max). Depth plan: {plan['label']},"
        f" {plan['input_hw'][0]}×{plan['input_hw'][1]}, AbsRel {plan['measured']['abs_rel']}"
        f" against FP32 at {(plan.get('sizes_searched') or ['?'])[0]}{caveat}"
    )
    print("| configuration | rgb FPS (detect + depth) | slam1 FPS | slam2 FPS | depth p50 ms |")
    print("|---|---|---|---|---|")
    for label, runs in results.items():
        cells = []
        for name in ("rgb", "slam1", "slam2"):
            cells.append(spread([next(s["fps"] for s in r["sources"] if s["name"] == name)
                                 for r in runs], ".1f"))  # fmt: skip
        depth_ms = [((r["stages"].get("depth_infer") or {}).get("p50", 0.0)) for r in runs]
        print(f"| {label} | {' | '.join(cells)} | {spread(depth_ms, '.0f')} |")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    slim = {
        label: [{k: r[k] for k in ("fps", "sources", "stages", "notes", "backend")} for r in runs]
        for label, runs in results.items()
    }
    record = {"cpu": cpu_model(), "frames": args.frames, "tune": tuned, "runs": slim}
    args.json.write_text(json.dumps(record, indent=2, default=str))


if __name__ == "__main__":
    main()
