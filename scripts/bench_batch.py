"""Model-only ms per frame at batch 1, 2 and 4 of the demo detector (its batch axis fixed at 1,
run at batch N from the copy `visionrt.models.batch` rewrites), ONNX Runtime and OpenVINO fp32.

Usage: .venv/bin/python scripts/bench_batch.py [--rounds 5] [--calls 3] [--batches 1,2,4] [--json]
Every configuration is loaded first; then each round runs `--calls` timed calls of every
configuration in turn (after one warm-up call each), so the machine's drift between its fast and
slow states falls on all of them alike. Reported: median and min-max of ms per frame (a call's
time over its batch) over all timed calls. "batch 1 (rewritten)" runs the rewritten copy at batch
1, to show the rewrite itself costs nothing.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from visionrt.backends import Backend, BackendOptions, load_backend
from visionrt.backends.registry import find_row, unavailable_reason
from visionrt.bench import prepared_inputs
from visionrt.hardware import cpu_model
from visionrt.models import batched_model, demo_model_path
from visionrt.paths import DEMO_VIDEO
from visionrt.preprocess import InputLayout


def _configs(batches: list[int], cache: Path) -> list[tuple[str, str, int, Path]]:
    """(label, runtime, batch, model) for every runtime installed here."""
    original = demo_model_path()
    rewritten = batched_model(original, cache)
    rows = []
    for runtime in ("onnxruntime", "openvino"):
        reason = unavailable_reason(find_row(runtime))
        if reason:
            print(f"skipping {runtime}: {reason}")
            continue
        for batch in batches:
            model = original if batch == 1 else rewritten
            rows.append((f"{runtime} fp32 batch {batch}", runtime, batch, model))
            if batch == 1:
                rows.append((f"{runtime} fp32 batch 1 (rewritten)", runtime, 1, rewritten))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=3, help="timed calls per round and config")
    parser.add_argument("--batches", default="1,2,4")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    frames = prepared_inputs(str(DEMO_VIDEO), (640, 640), InputLayout.NCHW_FLOAT, frames=8)

    with tempfile.TemporaryDirectory() as cache:
        loaded: list[tuple[str, int, Backend, list[np.ndarray]]] = []
        for label, runtime, batch, model in _configs(batches, Path(cache)):
            options = BackendOptions(precision="fp32", batch=batch, cache_dir=Path(cache))
            backend = load_backend(runtime, model, options)
            # Different frames in every row of a batch, cycling through the 8 prepared ones.
            tensors = [
                np.concatenate([frames[(i + r) % 8] for r in range(batch)]) for i in range(8)
            ]
            loaded.append((label, batch, backend, tensors))
        times: dict[str, list[float]] = {label: [] for label, *_ in loaded}
        for _, _, backend, tensors in loaded:
            backend.infer({backend.info.inputs[0].name: tensors[0]})  # warm-up
        for round_index in range(args.rounds):
            for label, batch, backend, tensors in loaded:
                name = backend.info.inputs[0].name
                for call in range(args.calls):
                    tensor = tensors[(round_index * args.calls + call) % len(tensors)]
                    started = time.perf_counter()
                    backend.infer({name: tensor})
                    times[label].append((time.perf_counter() - started) * 1e3 / batch)
        for _, _, backend, _ in loaded:
            backend.close()

    results: list[dict[str, Any]] = [
        {
            "config": label,
            "ms_per_frame_median": round(statistics.median(values), 1),
            "ms_per_frame_min": round(min(values), 1),
            "ms_per_frame_max": round(max(values), 1),
            "timed_calls": len(values),
        }
        for label, values in times.items()
    ]
    if args.json:
        print(json.dumps({"cpu": cpu_model(), "results": results}, indent=2))
        return
    print(f"CPU: {cpu_model()}; demo model 640x640, model only, {args.rounds} interleaved rounds")
    print(f"{'config':<36} {'ms/frame median':>16} {'min-max':>14}")
    for row in results:
        spread = f"{row['ms_per_frame_min']}-{row['ms_per_frame_max']}"
        print(f"{row['config']:<36} {row['ms_per_frame_median']:>16} {spread:>14}")


if __name__ == "__main__":
    main()
