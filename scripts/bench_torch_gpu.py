"""Model-only FPS of the torch backend on a CUDA GPU: fp32, fp16, fp16+compile, fp16+CUDA graphs.

Usage: python scripts/bench_torch_gpu.py [--model M.onnx] [--video V] [--batches 1,8,32]
       [--runs 50] [--reps 3]

Each configuration is loaded once per batch size and warmed up (compile and graph capture happen
there); then the repetitions alternate between configurations so that they share the same
minutes of the machine. A repetition's FPS is frames / wall time of `runs` calls; the table
shows the median over repetitions with the min–max spread, and the median latency per call.
Times include the host-to-device and device-to-host copies, as the pipeline sees them.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

CONFIGS: dict[str, tuple[str, dict[str, str]]] = {
    "fp32": ("fp32", {}),
    "fp16": ("fp16", {}),
    "fp16 + compile": ("fp16", {"compile": "default"}),
    "fp16 + CUDA graphs": ("fp16", {"cuda_graphs": "true"}),
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=None, help="ONNX detector (demo model)")
    parser.add_argument("--video", type=Path, default=None, help="video for real frames")
    parser.add_argument("--batches", default="1,8,32")
    parser.add_argument("--runs", type=int, default=50, help="infer calls per repetition")
    parser.add_argument("--reps", type=int, default=3, help="repetitions (>= 3)")
    parser.add_argument("--warmup", type=int, default=10)
    args = parser.parse_args()
    try:
        import torch
    except ImportError:
        print("torch is not installed: pip install 'visionrt[torch]'")
        return 0
    if not torch.cuda.is_available():
        print(f"no CUDA device visible to torch {torch.__version__}: nothing to measure")
        return 0

    from visionrt.backends import BackendOptions, load_backend
    from visionrt.bench import prepared_inputs
    from visionrt.models import demo_model_path
    from visionrt.paths import DEMO_VIDEO
    from visionrt.preprocess import InputLayout

    model = args.model or demo_model_path()
    video = args.video or DEMO_VIDEO
    batches = [int(b) for b in args.batches.split(",")]
    reps = max(3, args.reps)
    frames = prepared_inputs(str(video), (640, 640), InputLayout.NCHW_FLOAT, frames=32)
    print(f"# torch {torch.__version__} on {torch.cuda.get_device_name()}, {model.name}")
    rows = []
    for batch in batches:
        stacked = np.concatenate([frames[i % len(frames)] for i in range(batch)])
        inputs = [np.roll(stacked, shift, axis=0) for shift in range(min(4, batch))]
        backends: dict[str, Any] = {}
        for label, (precision, settings) in CONFIGS.items():
            options = BackendOptions("cuda", precision, batch=batch, settings=settings)
            started = time.perf_counter()
            backend = load_backend("torch", model, options)
            name = backend.info.inputs[0].name
            for i in range(args.warmup):
                backend.infer({name: inputs[i % len(inputs)]})
            print(f"  loaded {label} batch {batch} in {time.perf_counter() - started:.1f} s")
            backends[label] = (backend, name)
        fps: dict[str, list[float]] = {label: [] for label in backends}
        latency: dict[str, list[float]] = {label: [] for label in backends}
        for _ in range(reps):
            for label, (backend, name) in backends.items():
                times = []
                for i in range(args.runs):
                    started = time.perf_counter()
                    backend.infer({name: inputs[i % len(inputs)]})
                    times.append(time.perf_counter() - started)
                fps[label].append(batch * args.runs / sum(times))
                latency[label].extend(times)
        for label in backends:
            values = fps[label]
            rows.append((label, batch, statistics.median(values), min(values), max(values),
                         1000 * statistics.median(latency[label])))  # fmt: skip
        for backend, _ in backends.values():
            backend.close()
        backends.clear()
        torch.cuda.empty_cache()
    print()
    print("| config | batch | FPS median | FPS min–max | ms per call (p50) |")
    print("|---|---:|---:|---:|---:|")
    for label, batch, median, low, high, ms in rows:
        print(f"| {label} | {batch} | {median:.0f} | {low:.0f}–{high:.0f} | {ms:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
