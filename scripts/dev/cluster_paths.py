"""Where a cluster run's running overhead goes: the same sources through the worker code alone
(`group_batches`), through `run_on_cluster` with thread workers (no Ray), and through a Ray
actor (timed from the actor being ready). One run of each, in the order given.

    python scripts/dev/cluster_paths.py --files 4 --frames 0 --modes local,ray,threads
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

from visionrt.cli.run_config import configure_with_plan
from visionrt.distributed.local import ThreadExecutor
from visionrt.distributed.run import run_on_cluster, work_units, worker_settings
from visionrt.distributed.worker import group_batches, run_group
from visionrt.hardware import cpu_model

VIDEO = "/usr/share/doc/opencv-doc/examples/data/vtest.avi"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--frames", type=int, default=0, help="per file; 0: all")
    parser.add_argument("--modes", default="local,ray,threads")
    parser.add_argument("--out", default="/tmp/visionrt-cluster-paths")
    args = parser.parse_args()
    values = {
        "sources": [f"c{i}={VIDEO}" for i in range(args.files)],
        "source": {"max_frames": args.frames},
        "output": {"video": False, "dir": args.out},
    }
    cfg, _, _ = configure_with_plan(None, False, None, None, values)
    settings, units = worker_settings(cfg), tuple(work_units(cfg))
    print(f"{cpu_model()}, {os.cpu_count()} vCPU")
    for mode in args.modes.split(","):
        started = time.perf_counter()
        if mode == "local":
            frames = sum(len(batch) for _, batch in group_batches(units, settings, 2, 32))
        elif mode == "threads":
            executor = ThreadExecutor(1, lambda g, send: run_group(g, settings, send, 2))
            summary, _ = run_on_cluster(cfg, executor)
            executor.close()
            frames = summary.frames_out
        else:
            from visionrt.distributed.ray_executor import RayExecutor

            ray_executor = RayExecutor(None, 1, 2.0, 0.0, settings)
            started = time.perf_counter()  # the actor is ready
            summary, _ = run_on_cluster(cfg, ray_executor)
            frames = summary.frames_out
            seconds = time.perf_counter() - started
            ray_executor.close()
            print(f"{mode}: {frames} frames in {seconds:.2f} s (from the actor ready)")
            continue
        print(f"{mode}: {frames} frames in {time.perf_counter() - started:.2f} s")


if __name__ == "__main__":
    main()
