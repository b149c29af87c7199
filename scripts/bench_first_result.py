"""Issue #32's time to a first result: how long after set-up a `make demo` recipe gives its first
annotated frame and its first complete results, on a machine with nothing cached.

The recipe (a shell command; `{out}` stands for its output folder) runs in a fresh HOME, so the
plan cache, INT8 artifacts and reshaped models start empty as on a new machine (the virtual
environment, the demo model and the demo video are the set-up's and stay). Every 0.2 s the
output folder is looked at: the first JSONL line written (the first annotated frame), and each
summary.json a run finishes (its complete results: which runtime and precision it ran, its
first note) with the seconds since the start; then when a plan was cached, and the end.

Usage (from the repository root; `before` a source tree such as `git archive HEAD src`):
  PYTHONPATH=/tmp/before/src .venv/bin/python scripts/bench_first_result.py --label before \\
      --json before.json -- 'visionrt tune --if-missing && visionrt run --out {out} --overwrite'
  PYTHONPATH=$PWD/src .venv/bin/python scripts/bench_first_result.py --label after \\
      --json after.json -- 'visionrt demo --out {out}'
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from visionrt.hardware import cpu_model

BIN = str(Path(sys.executable).parent)


def first_line_written(out: Path) -> bool:
    return any(p.stat().st_size > 0 for p in out.glob("*.jsonl"))


def finished_results(summary: Path) -> dict[str, Any] | None:
    """What a finished run's summary.json says it ran, or None (absent, or being written)."""
    try:
        data = json.loads(summary.read_text())
    except (OSError, ValueError):
        return None
    backend = data.get("backend") or {}
    notes = data.get("notes") or [""]
    return {
        "runtime": backend.get("runtime"),
        "precision": backend.get("precision"),
        "fps": round(float(data.get("fps") or 0), 2),
        "frames": data.get("frames_out"),
        "note": notes[0][:160],
    }


def watch(command: str, label: str, log: Path) -> dict[str, Any]:
    home = Path(tempfile.mkdtemp(prefix=f"first-result-{label}-"))
    out, plans = home / "out" / "demo", home / "plans"
    env = {**os.environ, "HOME": str(home), "VISIONRT_PLANS": str(plans),
           "PATH": f"{BIN}:{os.environ['PATH']}"}  # fmt: skip
    figures: dict[str, Any] = {"label": label, "command": command, "cpu": cpu_model(),
                               "cpus": os.cpu_count(), "load_before": os.getloadavg()[0],
                               "results": []}  # fmt: skip
    started = time.monotonic()
    seen_mtime = 0.0
    with log.open("w") as handle:
        proc = subprocess.Popen(command.format(out=out), shell=True, env=env, stdout=handle,
                                stderr=subprocess.STDOUT)  # fmt: skip
        while True:
            done = proc.poll() is not None
            now = round(time.monotonic() - started, 1)
            if "first_frame_s" not in figures and out.is_dir() and first_line_written(out):
                figures["first_frame_s"] = now
            summary = out / "summary.json"
            mtime = summary.stat().st_mtime if summary.is_file() else 0.0
            if mtime and mtime != seen_mtime and (found := finished_results(summary)):
                seen_mtime = mtime
                figures["results"].append({"at_s": now, **found})
            if "plan_cached_s" not in figures and any(plans.glob("*.yaml")):
                figures["plan_cached_s"] = now
            if done:
                break
            time.sleep(0.2)
    figures.update(total_s=round(time.monotonic() - started, 1), rc=proc.returncode,
                   load_after=os.getloadavg()[0], log=str(log))  # fmt: skip
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--label", required=True)
    parser.add_argument("--json", type=Path, help="append the figures here (one line each)")
    parser.add_argument("command", help="the recipe, a shell command; {out}: its output folder")
    args = parser.parse_args()
    log = Path(tempfile.gettempdir()) / f"first-result-{args.label}.log"
    figures = watch(args.command, args.label, log)
    print(json.dumps(figures, indent=1))
    if args.json is not None:
        with args.json.open("a") as handle:
            handle.write(json.dumps(figures) + "\n")
    return 0 if figures["rc"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
