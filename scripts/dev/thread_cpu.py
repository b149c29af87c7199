"""CPU time a running process's threads take over a window, by niceness and scheduling policy
(Linux, /proc): how a Pipeline's stages, its helpers (niceness +10) and the audit lane (idle
policy) share the cores, in a plain run or inside a Ray worker (Ray starts those at niceness 15).

    python scripts/dev/thread_cpu.py PID 20
"""

from __future__ import annotations

import argparse
import os
import time
from collections import Counter
from pathlib import Path

POLICIES = {0: "normal", 3: "batch", 5: "idle"}


def ticks(pid: int) -> dict[str, tuple[str, int]]:
    """Each thread's (niceness and policy, user + system clock ticks so far)."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
        except OSError:  # the thread ended
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        policy = POLICIES.get(int(fields[38]), fields[38])
        out[tid] = (f"niceness {fields[16]}, {policy}", int(fields[11]) + int(fields[12]))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pid", type=int)
    parser.add_argument("seconds", type=float)
    args = parser.parse_args()
    before = ticks(args.pid)
    time.sleep(args.seconds)
    after = ticks(args.pid)
    spent: Counter[str] = Counter()
    for tid, (kind, now) in after.items():
        spent[kind] += now - before.get(tid, (kind, 0))[1]
    hz = os.sysconf("SC_CLK_TCK")
    for kind, count in spent.most_common():
        print(f"{count / hz:7.2f} s  {kind}")
    print(f"{sum(spent.values()) / hz:7.2f} s  in {args.seconds:g} s")


if __name__ == "__main__":
    main()
