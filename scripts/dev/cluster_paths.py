"""Where a cluster run's running overhead goes: the same sources through a plain run's Pipeline
and sinks (`plain`), the worker code alone (`group_batches`: `local` with the threads a 2-CPU
worker sets, `local0` with the runtimes' defaults; `actor`: inside a Ray actor, its results
dropped there), `run_on_cluster` with thread workers (no Ray), and a Ray actor (`ray`, the
results streamed to the driver). Ray's modes are timed from the actor being ready. Each mode
once per round, in the order given, the order reversed every other round.

    python scripts/dev/cluster_paths.py --files 4 --frames 300 --modes plain,local --rounds 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

from visionrt.cli.outputs import start_pipeline
from visionrt.cli.run_config import configure_with_plan
from visionrt.distributed.local import ThreadExecutor
from visionrt.distributed.run import run_on_cluster, work_units, worker_settings
from visionrt.distributed.worker import group_batches, run_group
from visionrt.hardware import cpu_model
from visionrt.pipeline.outputs import make_sinks

VIDEO = "/usr/share/doc/opencv-doc/examples/data/vtest.avi"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--frames", type=int, default=0, help="per file; 0: all")
    parser.add_argument("--modes", default="local,ray,threads")
    parser.add_argument("--rounds", type=int, default=1)
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
    modes = args.modes.split(",")
    times: dict[str, list[float]] = {mode: [] for mode in modes}
    for round_ in range(args.rounds):
        for mode in modes if round_ % 2 == 0 else modes[::-1]:
            times[mode].append(once(mode, cfg, settings, units))
            print(f"{mode}: {times[mode][-1]:.2f} s", flush=True)
    for mode, seconds in times.items():
        spread = f"{min(seconds):.2f}-{max(seconds):.2f}"
        print(f"{mode}: median {statistics.median(seconds):.2f} s ({spread})")


def once(mode: str, cfg: Any, settings: dict[str, Any], units: tuple[Any, ...]) -> float:
    """Seconds for one run of `mode` over `units` (the Ray actor's from its being ready)."""
    started = time.perf_counter()
    if mode == "plain":
        pipeline = start_pipeline(cfg)
        pipeline.run(make_sinks(cfg, pipeline))
        pipeline.close()
    elif mode in ("local", "local0"):
        threads = 2 if mode == "local" else 0
        for _ in group_batches(units, settings, threads, 32):
            pass
    elif mode == "threads":
        executor = ThreadExecutor(1, lambda g, send: run_group(g, settings, send, 2))
        run_on_cluster(cfg, executor)
        executor.close()
    elif mode == "actor":
        return in_actor(settings, units)
    else:
        from visionrt.distributed.ray_executor import RayExecutor

        ray_executor = RayExecutor(None, 1, 2.0, 0.0, settings)
        started = time.perf_counter()  # the actor is ready
        run_on_cluster(cfg, ray_executor)
        seconds = time.perf_counter() - started
        ray_executor.close()
        return seconds
    return time.perf_counter() - started


def in_actor(settings: dict[str, Any], units: tuple[Any, ...]) -> float:
    """Seconds `group_batches` takes inside a 2-CPU Ray actor of an embedded Ray, its batches
    dropped there (a Ray worker's process, without the results' way to the driver)."""
    import logging

    import ray

    quiet = logging.WARNING
    ray.init(
        address="local",
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        logging_level=quiet,
    )

    @ray.remote(num_cpus=2)
    class Worker:
        def run(self) -> float:
            started = time.perf_counter()
            for _ in group_batches(units, settings, 2, 32):
                pass
            return time.perf_counter() - started

    try:
        return float(ray.get(Worker.remote().run.remote()))
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()
