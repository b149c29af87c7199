"""Issue #8's benchmark: `tune`'s plan, the reference (`run --no-plan`) and the peer (Ultralytics'
best format here: its OpenVINO export) end to end on the same video, alternating, ≥ 3 rounds.

Each round runs the three in turn as separate processes (model load excluded from every FPS
figure: ours from the run summary, the peer's from its own timer), so drift hits all alike;
ratios are taken within a round. The plan is the cached one for the demo model on this machine
(run `visionrt tune` first; `--tune` does it and records its wall time).

`--hide-bf16` makes this CPU stand in for one without BF16: visionrt runs (and tunes) with
VISIONRT_HIDE_CPU_FEATURES=avx512_bf16,amx_bf16 (its own plan, cached under that fingerprint) and
the peer's OpenVINO runs float32 instead of bf16. Other speeds stay this CPU's: an emulation of the
instruction set, not of an Ice Lake machine.

Usage: .venv/bin/python scripts/bench_plan.py [--runs 3] [--frames 0] [--tune] [--hide-bf16]
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

from bench_vs_peer import run_peer  # scripts/ is on the path of a script run from it

from visionrt import hardware
from visionrt.hardware import cpu_model
from visionrt.models import demo_model_path
from visionrt.paths import DEMO_VIDEO
from visionrt.tune import cached_plan

ROOT = Path(__file__).resolve().parent.parent
VISIONRT = str(Path(sys.executable).parent / "visionrt")


def spread(values: list[float], fmt: str = ".2f") -> str:
    if not values:
        return "—"
    return f"{statistics.median(values):{fmt}} ({min(values):{fmt}}–{max(values):{fmt}})"


def ours(extra: list[str], frames: int) -> float:
    with tempfile.TemporaryDirectory() as out:
        command = [VISIONRT, "run", "--no-video", "-o", out, "-q", "--json", *extra]
        if frames:
            command += ["--max-frames", str(frames)]
        proc = subprocess.run(command, capture_output=True, text=True, check=True)
    return float(json.loads(proc.stdout.strip().splitlines()[-1])["fps"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--frames", type=int, default=0, help="frames per run (0: the video)")
    parser.add_argument("--tune", action="store_true", help="tune first and time it")
    parser.add_argument("--peer-python", default=str(ROOT / ".peer-venv" / "bin" / "python"))
    parser.add_argument("--json", type=Path, default=ROOT / "docs" / "results" / "plan.json")
    parser.add_argument("--hide-bf16", action="store_true", help="stand in for a no-BF16 CPU")
    args = parser.parse_args()
    if args.hide_bf16:  # inherited by every visionrt subprocess
        os.environ[hardware.HIDE_VARIABLE] = ",".join(sorted(hardware.BF16_FEATURES))
        hardware.cpu_features.cache_clear()
    model = demo_model_path()
    tune_seconds = None
    if args.tune:
        started = time.perf_counter()
        subprocess.run([VISIONRT, "tune"], check=True)
        tune_seconds = time.perf_counter() - started
    found = cached_plan(model)
    if found is None:
        sys.exit("no cached plan for the demo model on this machine: run `visionrt tune` first")
    plan, path = found
    print(f"plan {path.name}: {plan.summary_line()}", file=sys.stderr)
    figures: dict[str, list[float]] = {"plan": [], "reference": [], "peer": []}
    for index in range(args.runs):
        figures["plan"].append(ours([], args.frames))
        figures["reference"].append(ours(["--no-plan"], args.frames))
        if (
            fps := run_peer(args.peer_python, "openvino", args.frames, f32=args.hide_bf16)
        ) is not None:
            figures["peer"].append(fps)
        print(f"round {index + 1}: " + ", ".join(f"{k} {v[-1]:.2f}" for k, v in figures.items()
                                                 if v), file=sys.stderr)  # fmt: skip
    rounds = range(len(figures["peer"]))
    vs_peer = [figures["plan"][i] / figures["peer"][i] for i in rounds]
    vs_reference = [p / r for p, r in zip(figures["plan"], figures["reference"], strict=True)]
    hidden = " (BF16 hidden: visionrt without avx512_bf16/amx_bf16, peer's OpenVINO f32)"
    cpu = cpu_model() + (hidden if args.hide_bf16 else "")
    print(f"CPU: {cpu}; video {DEMO_VIDEO.name}; {args.runs} rounds; median (min–max)")
    print("| configuration | end-to-end FPS | × reference | × peer |")
    print("|---|---|---|---|")
    chosen = (plan.tuned.get("motion") or {}).get("chosen", "off")
    gating = f", gating {chosen}" if chosen != "off" else ""
    print(f"| plan: {plan.tuned.get('label')}{gating} | {spread(figures['plan'])}"
          f" | {spread(vs_reference)}× | {spread(vs_peer)}× |")  # fmt: skip
    print(f"| reference: onnxruntime fp32 (`--no-plan`) | {spread(figures['reference'])} | 1× | |")
    peer = "Ultralytics OpenVINO export" + (" (f32)" if args.hide_bf16 else "")
    print(f"| peer: {peer} | {spread(figures['peer'])} | | 1× |")
    if tune_seconds is not None:
        print(f"tune wall time: {tune_seconds:.0f} s")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(
        json.dumps(
            {
                "cpu": cpu_model(),
                "hidden_cpu_features": sorted(hardware.hidden_features()),
                "plan": {"file": str(path), **plan.tuned},
                "fps": figures,
                "plan_vs_peer": vs_peer,
                "plan_vs_reference": vs_reference,
                "tune_seconds": tune_seconds,
            },
            indent=2,
            default=str,
        )
    )


if __name__ == "__main__":
    main()
