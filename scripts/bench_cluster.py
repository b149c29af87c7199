"""`visionrt run --ray local` against a plain `visionrt run` on the same files, alternating:
the cluster path's overhead end to end (on one machine the workers share its cores, so no
speed-up is claimed), and how the frames spread over the workers.

    python scripts/bench_cluster.py --files 4 --frames 0 --runs 2     # whole files, workers auto
    python scripts/bench_cluster.py --files 4 --frames 300 --realtime  # as cameras: latency
    python scripts/bench_cluster.py --files 4 --workers 2 --worker-cpus 1  # two 1-CPU workers

With `--realtime` the files are read at their frame rate, as live streams: what counts then is
each source's glass-to-result latency (p50, p95) and the frames dropped to keep up.
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


def once(args: argparse.Namespace, ray: bool, out: Path) -> dict[str, float]:
    sources = [f"cam{i}={VIDEO}" for i in range(args.files)]
    extra = ["--ray", "local", "--workers", args.workers] if ray else []
    if ray and args.worker_cpus:
        extra += ["--worker-cpus", str(args.worker_cpus)]
    if args.frames:
        extra += ["--max-frames", str(args.frames)]
    if args.realtime:
        extra += ["--realtime"]
    command = [
        sys.executable, "-m", "visionrt.cli.main", "run", *sources, *extra, "--no-video",
        "--out", str(out), "--quiet",
    ]  # fmt: skip
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ})
    wall = time.perf_counter() - started
    if done.returncode:
        raise SystemExit(done.stderr)
    summary = json.loads((out / "summary.json").read_text())
    frames = summary["frames_out"]
    rows = summary["sources"]
    return {
        "wall_s": round(wall, 2),
        "frames": frames,
        "fps_wall": round(frames / wall, 2),
        "fps_run": summary["fps"],
        "dropped": sum(summary["dropped"].values()),
        "p50_ms": statistics.median(r.get("latency_ms", {}).get("p50", 0.0) for r in rows),
        "p95_ms": statistics.median(r.get("latency_ms", {}).get("p95", 0.0) for r in rows),
        "cluster": summary.get("cluster", {}),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--frames", type=int, default=0, help="per file; 0: all")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--workers", default="auto")
    parser.add_argument("--worker-cpus", type=float, default=0, help="0: the default (2)")
    parser.add_argument("--realtime", action="store_true", help="read the files as cameras")
    parser.add_argument("--result", default=str(ROOT / "docs/results/cluster_overhead.json"))
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="visionrt-cluster-"))
    rows: dict[str, list[dict]] = {"plain": [], "ray": []}
    for run in range(args.runs):
        for name in ("plain", "ray") if run % 2 == 0 else ("ray", "plain"):
            row = once(args, name == "ray", work / f"{name}{run}")
            rows[name].append(row)
            print(name, run, {k: v for k, v in row.items() if k != "cluster"}, flush=True)
    report = {
        "machine": f"{cpu_model()}, {os.cpu_count()} vCPU",
        "files": args.files,
        "frames_per_file": args.frames,
        "workers": args.workers,
        "worker_cpus": args.worker_cpus or 2,
        "realtime": args.realtime,
        "runs": rows,
    }
    for name in rows:
        walls = [r["wall_s"] for r in rows[name]]
        fps = [r["fps_run"] for r in rows[name]]
        report[f"{name}_wall_median_s"] = statistics.median(walls)
        report[f"{name}_fps_median"] = statistics.median(fps)
        for key in ("p50_ms", "p95_ms", "dropped"):  # a source's median, per run: their median
            report[f"{name}_{key}_median"] = statistics.median(r[key] for r in rows[name])
    report["overhead_wall"] = round(
        report["ray_wall_median_s"] / report["plain_wall_median_s"] - 1, 4
    )
    Path(args.result).write_text(json.dumps(report, indent=2))
    print(json.dumps({k: v for k, v in report.items() if k != "runs"}, indent=2))


if __name__ == "__main__":
    main()
