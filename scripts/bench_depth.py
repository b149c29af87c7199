"""Issue #7's depth benchmark: model-only latency of the Depth Anything v2-Small ONNX at input
short sides 266/364/518 for each CPU runtime and precision available here (ONNX Runtime FP32,
OpenVINO FP32, OpenVINO BF16 when the CPU has BF16), as a markdown table naming the CPU.

Model-only: `backend.infer` on a prepared frame (one call in flight, batch 1) through the same
DepthTask the pipeline uses, after `--warmup` calls; median and min–max of `--runs` calls. The
input keeps the source's aspect (default 480×640, so 266 → 266×350). The default model is the
architecture-only build (random weights): the latency is the real architecture's, the depth is
meaningless.

Flicker mode (`--flicker N`): the model on N consecutive frames of `--video` (default
vtest.avi) at the first of `--sizes`, then `DepthSmoother` at each `--alphas` (0 = off) over the
same maps; flicker is `depth_flicker` (mean |frame-to-frame change| of the scale-and-shift
aligned depth over pixels where the picture did not change, relative to the mean depth), and
the table gives each alpha's flicker and its ratio to alpha 0, and its lag: the same relative
difference between the smoothed and the raw current map over the pixels that moved (what
smoothing costs: a trail behind moving objects).

Usage: .venv/bin/python scripts/bench_depth.py [--runs 20] [--warmup 5] [--sizes 266,364,518]
       [--source-hw 480x640] [--variant openvino:bf16 ...] [--threads 0] [--model FILE] [--json]
       .venv/bin/python scripts/bench_depth.py --flicker 60 --sizes 266 [--alphas 0,0.3,0.5]
"""

from __future__ import annotations

import argparse
import itertools
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
from visionrt.fidelity.depth import depth_flicker
from visionrt.fuse.depth import DepthSmoother
from visionrt.hardware import cpu_has_bf16, cpu_model
from visionrt.models import depth_model_path, is_architecture_only
from visionrt.paths import DEMO_VIDEO
from visionrt.tasks.depth import DepthTask
from visionrt.types import DepthMap

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


# A pixel counts as still when its grey level changed by at most this between two frames, and
# no changed pixel lies within STILL_MARGIN pixels (the depth model sees a neighbourhood).
STILL_LEVELS = 8
STILL_MARGIN = 7


def still_mask(previous: np.ndarray, current: np.ndarray) -> np.ndarray:
    """(H, W) bool: where nothing moved between two BGR frames."""
    import cv2

    grey = [
        cv2.GaussianBlur(cv2.cvtColor(f, cv2.COLOR_BGR2GRAY), (5, 5), 0)
        for f in (previous, current)
    ]
    moved = (cv2.absdiff(grey[0], grey[1]) > STILL_LEVELS).astype(np.uint8)
    kernel = np.ones((2 * STILL_MARGIN + 1, 2 * STILL_MARGIN + 1), np.uint8)
    return ~cv2.dilate(moved, kernel).astype(bool)


def flicker(
    model: Path,
    runtime: str,
    precision: str,
    short_side: int,
    video: Path,
    count: int,
    alphas: list[float],
    threads: int,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Flicker of the raw maps of `count` consecutive frames and of each alpha's smoothing."""
    from visionrt.sources import SourceOptions, open_source

    source = open_source(str(video), 0, SourceOptions(mode="file", max_frames=count))
    images = [frame.image for frame in source.frames()]
    source.close()
    options = BackendOptions(precision=precision, threads=threads)
    task = DepthTask(model, runtime, options, short_side=short_side, source_hw=images[0].shape[:2])
    maps: list[DepthMap] = []
    started = time.perf_counter()
    try:
        buffer = task.new_buffer()
        for image in images:
            geometry = task.prepare(image, buffer, None)
            maps.append(task.decode(task.infer([buffer])[0], geometry))
    finally:
        task.close()
    infer_s = time.perf_counter() - started
    still = [still_mask(a, b) for a, b in itertools.pairwise(images)]
    rows = []
    for alpha in alphas:
        smoother = DepthSmoother(alpha)
        smoothed = [
            smoother.smooth(0, depth, index / 25).values for index, depth in enumerate(maps)
        ]
        steps = [
            depth_flicker(a, b, mask)
            for a, b, mask in zip(smoothed, smoothed[1:], still, strict=False)
        ]
        # The price: on pixels that moved, how far the output strays from the current frame.
        lag = [
            depth_flicker(depth.values, out, ~mask)
            for depth, out, mask in zip(maps[1:], smoothed[1:], still, strict=True)
        ]
        rows.append(
            {"alpha": alpha, "flicker": float(np.nanmean(steps)), "lag": float(np.nanmean(lag))}
        )
    for row in rows:
        row["ratio"] = row["flicker"] / rows[0]["flicker"]
    facts = {
        "video": str(video),
        "frames": len(images),
        "input_hw": list(task.input_hw),
        "runtime": runtime,
        "precision": precision,
        "infer_s": round(infer_s, 1),
        "still_share": float(np.mean([m.mean() for m in still])),
    }
    return rows, facts


def flicker_table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| alpha | flicker on still pixels | vs off | lag on moving pixels |",
        "|---:|---:|---:|---:|",
    ]
    for row in rows:
        label = f"{row['alpha']:g}" + (" (off)" if row["alpha"] == 0 else "")
        lines.append(f"| {label} | {row['flicker']:.4f} | {row['ratio']:.2f}× | {row['lag']:.4f} |")
    return "\n".join(lines)


def main_flicker(args: argparse.Namespace, model: Path, label: str) -> int:
    runtime, precision = args.variant[0].split(":", 1) if args.variant else ("onnxruntime", "fp32")
    size = int(args.sizes.split(",")[0])
    alphas = [float(a) for a in args.alphas.split(",")]
    if alphas[0] != 0:
        alphas.insert(0, 0.0)  # the ratio is against smoothing off
    rows, facts = flicker(
        model, runtime, precision, size, args.video, args.flicker, alphas, args.threads
    )
    print(f"# Depth flicker with temporal smoothing: {model.name}{label}\n")
    print(f"CPU: {cpu_model() or 'unknown'} · {facts['frames']} consecutive frames of")
    height, width = facts["input_hw"]
    print(f"{args.video.name} at {height}×{width} · {runtime} {precision}")
    print(
        f"· still pixels {facts['still_share']:.0%} of the frame · inference {facts['infer_s']} s\n"
    )
    print(flicker_table(rows))
    if args.json:
        print(json.dumps({"rows": rows, **facts}, indent=2))
    return 0


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
    parser.add_argument("--flicker", type=int, default=0, help="N frames: measure flicker")
    parser.add_argument("--alphas", default="0,0.3,0.5", help="smoothing alphas (flicker)")
    parser.add_argument("--video", type=Path, default=DEMO_VIDEO, help="video (flicker)")
    args = parser.parse_args(argv)
    model = args.model or depth_model_path()
    if args.flicker:
        label = " — architecture-only (random weights)" if is_architecture_only(model) else ""
        return main_flicker(args, model, label)
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
