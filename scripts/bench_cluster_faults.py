"""How long a cluster run takes to notice a lost worker and to resume its work, on a two-node local
Ray cluster (`ray.cluster_utils.Cluster`, both nodes on this machine, 1 CPU each): a worker's
process killed (SIGKILL) and a whole node removed, the latter with Ray's default health checks
and with shorter ones. Every run must still write every frame once (checked).

    python scripts/bench_cluster_faults.py --frames 300 --runs 2
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from visionrt.config import load_config
from visionrt.distributed.ray_executor import RayExecutor
from visionrt.distributed.run import run_on_cluster, worker_settings
from visionrt.hardware import cpu_model
from visionrt.models import demo_model_path

ROOT = Path(__file__).resolve().parent.parent
VIDEO = "/usr/share/doc/opencv-doc/examples/data/vtest.avi"
SHORT = {
    "health_check_initial_delay_ms": 0,
    "health_check_period_ms": 500,
    "health_check_timeout_ms": 500,
    "health_check_failure_threshold": 3,
}


def once(fault: str, checks: dict[str, int], frames: int, out: Path) -> dict[str, Any]:
    """One run of two files on two 1-CPU workers (one per node); the fault hits the worker on
    the second node once it committed 40 frames. Seconds from the fault to the loss being
    seen and to the next frame of the lost worker's source committed after it."""
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(
        initialize_head=True, head_node_args={"num_cpus": 1, "_system_config": checks}
    )
    node = cluster.add_node(num_cpus=1)
    ray.init(address=cluster.address, log_to_driver=False)
    values = {
        "sources": [f"a={VIDEO}", f"b={VIDEO}"],
        "model": str(demo_model_path()),
        "backend": "onnxruntime",
        "source": {"max_frames": frames},
        "output": {"dir": str(out), "video": False},
        "cluster": {"files_per_worker": 1},
    }
    cfg = load_config(values=values)
    executor = RayExecutor(None, 2, 1.0, 0.0, worker_settings(cfg), startup_timeout=120)
    doomed = next(w for w in executor.workers() if executor.info(w)["node"] == node.node_id)
    moments: dict[str, float] = {}
    names = ["a", "b"]  # unit ids are the sources' places
    victim: list[str] = []

    def watch(report: Any) -> None:
        if "fault" not in moments and report.frames_by_worker.get(doomed, 0) >= 40:
            victim.extend(names[i] for i in executor.running(doomed))
            moments["fault"] = time.monotonic()
            if fault == "kill":
                os.kill(executor.info(doomed)["pid"], signal.SIGKILL)
            else:
                cluster.remove_node(node, allow_graceful=False)
        elif "fault" in moments and "lost" not in moments and report.lost_workers:
            moments["lost"], moments["written"] = (
                time.monotonic(),
                report.sources[victim[0]].written,
            )
        elif (
            "lost" in moments
            and "resumed" not in moments
            and report.sources[victim[0]].written > moments["written"]
        ):
            moments["resumed"] = time.monotonic()

    try:
        summary, report = run_on_cluster(cfg, executor, watch)
    finally:
        executor.close()
        ray.shutdown()
        cluster.shutdown()
    if summary.frames_out != 2 * frames or not summary.accounted:
        raise SystemExit(f"{fault}: frames lost or written twice: {summary.to_json()}")
    return {
        "detect_s": round(moments["lost"] - moments["fault"], 2),
        "resume_s": round(moments["resumed"] - moments["fault"], 2),
        "seconds": summary.seconds,
        "reassignments": report.reassignments,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=300, help="per file")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--result", default=str(ROOT / "docs/results/cluster_faults.json"))
    args = parser.parse_args()
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    cases = {
        "worker killed (SIGKILL)": ("kill", {}),
        "node removed, Ray's default health checks": ("node", {}),
        "node removed, checks every 0.5 s, 3 failures": ("node", SHORT),
    }
    rows: dict[str, list[dict[str, Any]]] = {name: [] for name in cases}
    work = Path(tempfile.mkdtemp(prefix="visionrt-faults-"))
    for run in range(args.runs):
        for name, (fault, checks) in cases.items():
            row = once(fault, checks, args.frames, work / f"{fault}{len(checks)}-{run}")
            rows[name].append(row)
            print(name, run, row, flush=True)
    report = {
        "machine": f"{cpu_model()}, {os.cpu_count()} vCPU",
        "frames_per_file": args.frames,
        "runs": rows,
        "median": {
            name: {
                key: statistics.median(r[key] for r in found) for key in ("detect_s", "resume_s")
            }
            for name, found in rows.items()
        },
    }
    Path(args.result).write_text(json.dumps(report, indent=2))
    print(json.dumps(report["median"], indent=2))


if __name__ == "__main__":
    main()
