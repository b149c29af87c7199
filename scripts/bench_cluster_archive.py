"""An archive of short clips on a cluster: `visionrt run --ray local` over many files, this
checkout against another one's code (`--before SRC`, e.g. a `git worktree` of an earlier
commit), alternating; wall time and FPS, median and spread. It measures what a worker does
between its groups (each group of `files_per_worker` files is one Pipeline).

    git worktree add /tmp/before HEAD~1
    python scripts/bench_cluster_archive.py --before /tmp/before/src --files 16 --frames 50 --runs 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from visionrt.hardware import cpu_model

ROOT = Path(__file__).resolve().parent.parent
VIDEO = "/usr/share/doc/opencv-doc/examples/data/vtest.avi"


def once(src: Path, args: argparse.Namespace, out: Path) -> dict[str, float]:
    sources = [f"clip{i}={VIDEO}" for i in range(args.files)]
    command = [
        sys.executable, "-m", "visionrt.cli.main", "run", *sources, "--ray", "local",
        "--max-frames", str(args.frames), "--no-video", "--out", str(out), "--quiet",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(src)}
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - started
    if done.returncode:
        raise SystemExit(done.stderr)
    summary = json.loads((out / "summary.json").read_text())
    return {"wall_s": round(wall, 2), "frames": summary["frames_out"], "fps": summary["fps"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, help="the other checkout's src folder")
    parser.add_argument("--files", type=int, default=16)
    parser.add_argument("--frames", type=int, default=50, help="per file")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--result", default=str(ROOT / "docs/results/cluster_archive.json"))
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="visionrt-archive-"))
    checkouts = {"before": Path(args.before), "after": ROOT / "src"}
    rows: dict[str, list[dict]] = {name: [] for name in checkouts}
    for run in range(args.runs):
        order = list(checkouts) if run % 2 == 0 else list(reversed(checkouts))
        for name in order:
            row = once(checkouts[name], args, work / f"{name}{run}")
            rows[name].append(row)
            print(name, run, row, flush=True)
    report: dict = {
        "machine": f"{cpu_model()}, {os.cpu_count()} vCPU",
        "files": args.files,
        "frames_per_file": args.frames,
        "runs": rows,
    }
    for name, got in rows.items():
        walls = [r["wall_s"] for r in got]
        report[f"{name}_wall_median_s"] = statistics.median(walls)
        report[f"{name}_wall_range_s"] = [min(walls), max(walls)]
    report["after_over_before"] = round(
        report["after_wall_median_s"] / report["before_wall_median_s"], 4
    )
    Path(args.result).write_text(json.dumps(report, indent=2))
    print(json.dumps({k: v for k, v in report.items() if k != "runs"}, indent=2))


if __name__ == "__main__":
    main()
