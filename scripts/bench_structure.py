"""Issue #18's before/after benchmark: the same commands on two checkouts of visionrt, alternating
within each round, so drift hits both alike:

- plain: `visionrt run` on the demo video with the tuned plan and the MP4 + JSONL sinks on;
- three: three cameras (the demo video three times) with the plan, sinks on;
- seed: `rgb` detect + depth at 266, `slam1/slam2` detect (the depth plan cached by
  `visionrt tune --depth`), sinks on;
- profile: `visionrt profile --json` once per checkout per round: busy share per thread group;
- slow-sink: plain, with x264 at preset "slow" (a sink as costly as inference per frame).

Each command is its own process (model load excluded: FPS from the run summary). "before" is a
source tree given with --before (e.g. `git worktree add /tmp/before <commit>`: its `src`), run
with the same virtual environment through PYTHONPATH.

Usage: .venv/bin/python scripts/bench_structure.py --before /tmp/before/src [--runs 3]
       [--frames 400] [--only plain,three,seed,profile,slow-sink]
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

from bench_plan import spread  # scripts/ is on the path of a script run from it

from visionrt.hardware import cpu_model
from visionrt.models import depth_model_path
from visionrt.paths import DEMO_VIDEO

ROOT = Path(__file__).resolve().parent.parent
VISIONRT = str(Path(sys.executable).parent / "visionrt")


def command(src: Path, args: list[str]) -> dict[str, Any]:
    """Run `visionrt ARGS` on the checkout at `src`; its JSON output."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    with tempfile.TemporaryDirectory() as out:
        full = [VISIONRT, *args[:1], "-o", out, *args[1:]]
        proc = subprocess.run(full, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        sys.exit(f"{' '.join(full)}: exit {proc.returncode}: {proc.stderr.strip()[-400:]}")
    return json.loads(proc.stdout[proc.stdout.index("{") :])


def scenarios(frames: int) -> dict[str, list[str]]:
    video = str(DEMO_VIDEO)
    cams = [f"a={video}", f"b={video}", f"c={video}"]
    seed = [f"rgb={video}", f"slam1={video}", f"slam2={video}", "--depth",
            str(depth_model_path()), "--depth-on", "rgb", "--depth-size", "266"]  # fmt: skip
    return {
        "plain": ["run", video, "-q", "--json", "--max-frames", str(frames)],
        "three": ["run", *cams, "-q", "--json", "--max-frames", str(frames // 2)],
        "seed": ["run", *seed, "-q", "--json", "--max-frames", str(frames // 5)],
        "profile": ["profile", video, "--json", "--max-frames", str(frames)],
        # The sink in the way: x264 at preset "slow" costs about what inference does per frame.
        "slow-sink": [
            "run",
            video,
            "-q",
            "--json",
            "--max-frames",
            str(frames),
            "--set",
            "output.preset=slow",
        ],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, required=True, help="the older checkout's src")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--frames", type=int, default=400)
    parser.add_argument("--only", default="plain,three,seed,profile,slow-sink")
    parser.add_argument("--json", type=Path, default=ROOT / "docs" / "results" / "structure.json")
    args = parser.parse_args()
    versions = {"before": args.before.resolve(), "after": ROOT / "src"}
    wanted = args.only.split(",")
    runs = {name: argv for name, argv in scenarios(args.frames).items() if name in wanted}
    results: dict[str, dict[str, list[dict[str, Any]]]] = {
        name: {label: [] for label in versions} for name in runs
    }
    for index in range(args.runs):
        for name, argv in runs.items():
            # Alternate which goes first, so neither always runs on a machine just warmed up.
            order = list(versions.items())
            for label, src in order if index % 2 == 0 else order[::-1]:
                out = command(src, argv)
                results[name][label].append(out)
                fps = out.get("fps", 0.0)
                print(f"round {index + 1} {name} · {label}: {fps:.1f} FPS", file=sys.stderr)
    table = {"cpu": cpu_model(), "frames": args.frames, "runs": args.runs, "rows": {}}
    for name, by_label in results.items():
        row: dict[str, Any] = {"frames": args.frames}
        for label, outs in by_label.items():
            fps = [o["fps"] for o in outs]
            row[label] = {"fps": fps, "fps_median": statistics.median(fps)}
            if name == "profile":
                groups = sorted({g for o in outs for g in o["busy"]})
                row[label]["busy"] = {g: [o["busy"].get(g, 0.0) for o in outs] for g in groups}
            print(f"{name:8s} {label:6s} FPS {spread(fps, '.1f')}")
            for group, shares in row[label].get("busy", {}).items():
                print(f"{'':8s} {label:6s} busy {group}: {spread(shares, '.2f')}")
        pairs = zip(row["before"]["fps"], row["after"]["fps"], strict=True)
        row["after_over_before"] = [a / b for b, a in pairs if b]
        print(f"{name:8s} after/before {spread(row['after_over_before'], '.3f')}")
        table["rows"][name] = row
    if args.json.exists():  # a partial rerun (--only) keeps the other rows
        kept = json.loads(args.json.read_text(encoding="utf-8")).get("rows", {})
        table["rows"] = {**kept, **table["rows"]}
    args.json.write_text(json.dumps(table, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
