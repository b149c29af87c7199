"""CPU an embedded Ray takes while idle, per process: `ray.init` as `visionrt run --ray` calls it,
one 2-CPU actor started, then 20 s of nothing. Optional: a JSON `_system_config` to try.

    python scripts/dev/ray_idle_cpu.py '{"enable_metrics_collection": false}'
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time

import psutil

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
import ray  # after the settings it reads at import

WINDOW = 20.0


def main() -> None:
    config = json.loads(sys.argv[1]) if len(sys.argv) > 1 else None
    ray.init(
        address="local",
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        logging_level=logging.WARNING,
        _system_config=config,
    )
    actor = ray.remote(num_cpus=2)(Idle).remote()
    ray.get(actor.pid.remote())
    time.sleep(3)  # start-up over
    me = psutil.Process()
    processes = [me, *me.children(recursive=True)]
    before = {p.pid: _cpu(p) for p in processes}
    time.sleep(WINDOW)
    total = 0.0
    for process in processes:
        spent = _cpu(process) - before[process.pid]
        total += spent
        name = "driver" if process is me else " ".join(process.cmdline())[:90]
        print(f"{spent / WINDOW * 100:5.2f} %  {name}")
    print(f"{total / WINDOW * 100:5.2f} %  of one core in all")
    ray.shutdown()


class Idle:
    def pid(self) -> int:
        return os.getpid()


def _cpu(process: psutil.Process) -> float:
    try:
        times = process.cpu_times()
    except psutil.Error:
        return 0.0
    return times.user + times.system


if __name__ == "__main__":
    main()
