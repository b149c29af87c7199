"""How long the command line takes to answer before it does any work: `visionrt --help` (the
list of commands), `visionrt run --help` and a mistyped command, each its own process, wall
time from start to exit. With `--before SRC` (an older checkout's src, e.g. from
`git worktree add`), that tree runs through PYTHONPATH in the same rounds, alternating which
goes first; median (min–max) in ms.

Usage: .venv/bin/python scripts/bench_cli_start.py [--runs 15] [--before SRC] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from visionrt.hardware import cpu_model

ROOT = Path(__file__).resolve().parent.parent
# The console script's entry, as pip writes it (`python -m` would import cli.main twice).
ENTRY = "from visionrt.cli.entry import main; main()"
CASES = {"--help": ["--help"], "run --help": ["run", "--help"], "a typo": ["rnu"]}


def once(src: Path, args: list[str]) -> float:
    env = {**os.environ, "PYTHONPATH": str(src)}
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", ENTRY, *args], env=env, capture_output=True)
    return (time.perf_counter() - started) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--before", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    trees = {"after": ROOT / "src"} | ({"before": args.before} if args.before else {})
    times: dict[str, dict[str, list[float]]] = {t: {c: [] for c in CASES} for t in trees}
    for case in CASES.values():  # warm-up: files in the page cache, bytecode compiled
        for src in trees.values():
            once(src, case)
    for round_ in range(args.runs):
        order = list(trees) if round_ % 2 == 0 else list(reversed(trees))
        for case, case_args in CASES.items():
            for tree in order:
                times[tree][case].append(once(trees[tree], case_args))
    print(f"CPU: {cpu_model()}; {args.runs} rounds alternating; wall ms, median (min–max)")
    print("| command | " + " | ".join(trees) + " |")
    print("|---|" + "---|" * len(trees))
    for case in CASES:
        cells = []
        for tree in trees:
            values = times[tree][case]
            cells.append(f"{statistics.median(values):.0f} ({min(values):.0f}–{max(values):.0f})")
        print(f"| `visionrt {case}` | " + " | ".join(cells) + " |")
    if args.json:
        record = {"cpu": cpu_model(), "runs": args.runs, "ms": times}
        args.json.write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()
