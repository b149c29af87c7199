"""CPU-seconds each process of a command spends, itself and every process it starts (Ray's
included), sampled every 0.2 s: where a run's cores go besides its Pipeline.

    python scripts/dev/run_cpu.py -- visionrt run a.avi --ray local --no-video --quiet
"""

from __future__ import annotations

import subprocess
import sys
import time

import psutil


def main() -> None:
    command = sys.argv[sys.argv.index("--") + 1 :] if "--" in sys.argv else sys.argv[1:]
    started = time.perf_counter()
    child = subprocess.Popen(command)
    root = psutil.Process(child.pid)
    spent: dict[int, tuple[str, float]] = {}
    while child.poll() is None:
        try:
            processes = [root, *root.children(recursive=True)]
        except psutil.Error:
            processes = []
        for process in processes:
            try:
                times = process.cpu_times()
                name = spent.get(process.pid, (_name(process), 0.0))[0]
            except psutil.Error:
                continue
            spent[process.pid] = (name, times.user + times.system)
        time.sleep(0.2)
    wall = time.perf_counter() - started
    total = sum(cpu for _, cpu in spent.values())
    for name, cpu in sorted(spent.values(), key=lambda row: -row[1]):
        if cpu >= 0.05:
            print(f"{cpu:8.2f} s  {name}")
    print(f"{total:8.2f} s  CPU in all over {wall:.2f} s wall (exit {child.returncode})")


def _name(process: psutil.Process) -> str:
    line = " ".join(process.cmdline())
    return line[:100] if line else process.name()


if __name__ == "__main__":
    main()
