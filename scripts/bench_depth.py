"""Issue #7's depth benchmark: model-only latency of the Depth Anything v2-Small ONNX at input
short sides 266/364/518 for each CPU runtime and precision available here (ONNX Runtime FP32,
OpenVINO FP32, OpenVINO BF16 when the CPU has BF16), as a markdown table naming the CPU.

Model-only: `backend.infer` on a prepared frame (one call in flight, batch 1) through the same
DepthTask the pipeline uses, after `--warmup` calls; median and min–max of `--runs` calls. The
input keeps the source's aspect (default 480×640, so 266 → 266×350). The default model is the
architecture-only build (random weights): the latency is the real architecture's, the depth is
meaningless.

Usage: .venv/bin/python scripts/bench_depth.py [--runs 20] [--warmup 5] [--sizes 266,364,518]
       [--source-hw 480x640] [--variant openvino:bf16 ...] [--threads 0] [--model FILE] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from visionrt.backends import BackendOptions
from visionrt.backends.registry import find_row, unavailable_reason
from visionrt.bench.measure import Spread
from visionrt.errors import VisionRTError
from visionrt.hardware import cpu_has_bf16, cpu_model
from visionrt.model import depth_model_path, is_architecture_only
from visionrt.tasks.depth import DepthTask

VARIANTS = (("onnxruntime", "fp32"), ("openvino", "fp32"), ("openvino", "bf16"))


def available_variants() -> tuple[list[tuple[str, str]], list[str]]:
    """The variants this machine runs, and a line for each one skipped."""
    chosen, skipped = [], []
    for runtime, precision in VARIANTS:
        reason = unavailable_reason(find_row(runtime))
        if reason is None and precision == "bf16" and not cpu_has_bf16():
            reason = "no BF16 instructions (AVX512_BF16 or AMX) on this CPU"
        if reason:
            skipped.append(f"{runtime} {precision}: {reason}")
        else:
            chosen.append((runtime, precision))
    return chosen, skipped


def frame(source_hw: tuple[int, int]) -> np.ndarray:
    """A smooth synthetic BGR frame (gradients), so resizing and the model see real structure."""
    height, width = source_hw
    ys, xs = np.mgrid[0:height, 0:width]
    image = np.stack([xs * 255 // width, ys * 255 // height, (xs + ys) * 127 // (height + width)])
    return np.ascontiguousarray(image.transpose(1, 2, 0).astype(np.uint8))


def measure(
    model: Path,
    runtime: str,
    precision: str,
    short_side: int,
    source_hw: tuple[int, int],
    runs: int,
    warmup: int,
    threads: int,
) -> dict[str, Any]:
    options = BackendOptions(precision=precision, threads=threads)
    task = DepthTask(model, runtime, options, short_side=short_side, source_hw=source_hw)
    try:
        buffer = task.new_buffer()
        task.prepare(frame(source_hw), buffer, None)
        inputs = {task.input_name: buffer}
        for _ in range(warmup):
            task.backend.infer(inputs)
        times = []
        for _ in range(runs):
            started = time.perf_counter()
            output = task.backend.infer(inputs)[0]
            times.append((time.perf_counter() - started) * 1e3)
        spread = Spread.of(times)
        return {
            "runtime": runtime,
            "precision": task.backend.info.precision,
            "short_side": short_side,
            "input_hw": list(task.input_hw),
            "median_ms": spread.median,
            "min_ms": spread.low,
            "max_ms": spread.high,
            "runs": runs,
            "finite": bool(np.isfinite(output).all()),
        }
    finally:
        task.close()


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| runtime | precision | short side | input (h×w) | median ms | min–max ms | FPS |",
        "|---|---|---:|---|---:|---|---:|",
    ]
    for row in rows:
        height, width = row["input_hw"]
        lines.append(
            f"| {row['runtime']} | {row['precision']} | {row['short_side']} | {height}×{width}"
            f" | {row['median_ms']:.1f} | {row['min_ms']:.1f}–{row['max_ms']:.1f}"
            f" | {1e3 / row['median_ms']:.1f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--sizes", default="266,364,518", help="short sides, multiples of 14")
    parser.add_argument("--source-hw", default="480x640", help="source HEIGHTxWIDTH")
    parser.add_argument(
        "--variant", action="append", default=[], help="RUNTIME:PRECISION (default: all here)"
    )
    parser.add_argument("--threads", type=int, default=0, help="0: the runtime's default")
    parser.add_argument("--model", type=Path, default=None)
    parser.add_argument("--json", action="store_true", help="print the rows as JSON too")
    args = parser.parse_args(argv)
    model = args.model or depth_model_path()
    height, width = (int(v) for v in args.source_hw.lower().split("x"))
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    variants, skipped = available_variants()
    if args.variant:
        variants = [tuple(v.split(":", 1)) for v in args.variant]  # type: ignore[misc]
    label = " — architecture-only (random weights)" if is_architecture_only(model) else ""
    print(f"# Depth model-only latency: {model.name}{label}\n")
    print(f"CPU: {cpu_model() or 'unknown'} · {os.cpu_count()} logical CPUs · batch 1 ·")
    print(f"source {height}×{width} · {args.warmup} warm-up + {args.runs} timed calls each\n")
    rows = []
    for runtime, precision in variants:
        for size in sizes:
            try:
                rows.append(
                    measure(
                        model,
                        runtime,
                        precision,
                        size,
                        (height, width),
                        args.runs,
                        args.warmup,
                        args.threads,
                    )
                )
            except VisionRTError as err:
                skipped.append(f"{runtime} {precision} at {size}: {err}")
            print(f"  measured {runtime} {precision} at {size}", file=sys.stderr)
    print(table(rows))
    for line in skipped:
        print(f"\nskipped: {line}")
    if any(not row["finite"] for row in rows):
        print("\nwarning: some outputs had NaN/Inf:", [r for r in rows if not r["finite"]])
    if args.json:
        print(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
