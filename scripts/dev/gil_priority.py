"""Whether a low-priority Python thread holding the GIL stalls the others: two busy native
threads (the runtime's), a pure-Python thread at niceness 19 or under SCHED_IDLE (the audit
lane), and a probe that wakes every 5 ms and needs the GIL (a stage). Prints the probe's
lateness. Run it under `nice -n 15` for a Ray worker's case.

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python scripts/dev/gil_priority.py idle
"""

from __future__ import annotations

import os
import sys
import threading
import time

import numpy as np

SECONDS = 10.0
stop = threading.Event()


def native() -> None:
    """Busy with the GIL released, at the process's priority."""
    matrix = np.random.default_rng(0).random((600, 600))
    while not stop.is_set():
        matrix @ matrix


def low(mode: str) -> None:
    """Pure Python at the lane's priority: holds the GIL while it runs."""
    tid = threading.get_native_id()
    if mode == "idle":
        os.sched_setscheduler(tid, os.SCHED_IDLE, os.sched_param(0))
    else:
        os.setpriority(os.PRIO_PROCESS, tid, 19)
    total = 0
    while not stop.is_set():
        for i in range(1000):
            total += i


def probe(late: list[float]) -> None:
    while not stop.is_set():
        started = time.perf_counter()
        time.sleep(0.005)
        late.append(time.perf_counter() - started - 0.005)


def main() -> None:
    mode = sys.argv[1] if len(sys.argv) > 1 else "idle"
    late: list[float] = []
    threads = [threading.Thread(target=native) for _ in range(2)]
    threads += [
        threading.Thread(target=low, args=(mode,)),
        threading.Thread(target=probe, args=(late,)),
    ]
    for thread in threads:
        thread.start()
    time.sleep(SECONDS)
    stop.set()
    for thread in threads:
        thread.join()
    late.sort()
    p50, p99 = late[len(late) // 2], late[int(len(late) * 0.99)]
    figures = f"p50 {p50 * 1e3:.2f} ms, p99 {p99 * 1e3:.1f} ms, max {late[-1] * 1e3:.1f} ms"
    print(f"{mode}: {len(late)} wakes, late {figures}")


if __name__ == "__main__":
    main()
