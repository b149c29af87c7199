"""What two device-side changes cost on CPU tensors (the same torch code the GPU runs; the GPU's
own figures come from scripts/gpu_check.py), each against its before in alternating rounds:

- `letterbox`: a batch of N I420 frames of the demo video (768×576) into the detector's 640×640
  input — `letterbox_slots` against `--before`'s `upload` + `letterbox_batch` (a checkout's
  src/visionrt/preprocess/device.py, e.g. a git worktree of an earlier commit). Same values.
- `attention`: Depth Anything v2-S (architecture-only weights) converted at the sizes given,
  its attention as one `scaled_dot_product_attention` against the exported nodes (`fuse`).

Usage: .venv/bin/python scripts/bench_device_prep.py [--before DEVICE_PY] [--batch 32]
       [--sides 266,518] [--runs 5] [--threads 2]
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import torch
from bench_plan import spread  # scripts/ is on the path of a script run from it

from visionrt.hardware import cpu_model
from visionrt.paths import DEMO_VIDEO


def alternate(runs: int, cases: dict[str, Callable[[], Any]]) -> dict[str, list[float]]:
    """Milliseconds per call of each case, the cases alternating within each round."""
    for call in cases.values():
        call()  # warm-up
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(runs):
        for name, call in cases.items():
            started = time.perf_counter()
            call()
            times[name].append((time.perf_counter() - started) * 1e3)
    return times


def letterbox(before: Path, batch: int, runs: int) -> dict[str, list[float]]:
    from visionrt.preprocess import compute_letterbox
    from visionrt.preprocess import device as now

    spec = importlib.util.spec_from_file_location("device_before", before)
    assert spec is not None
    assert spec.loader is not None
    old = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(old)
    capture = cv2.VideoCapture(str(DEMO_VIDEO))
    _, image = capture.read()
    capture.release()
    planes = cv2.cvtColor(image, cv2.COLOR_BGR2YUV_I420)
    box = compute_letterbox(image.shape[:2], (640, 640))

    def slots(module: Any) -> list[Any]:
        made = [module.FrameSlot(stage=True) for _ in range(batch)]
        for slot in made:
            slot.hold(planes, box)
        return made

    old_slots, new_slots = slots(old), slots(now)
    old_out, new_out = (torch.empty((batch, 3, 640, 640)) for _ in range(2))
    cpu = torch.device("cpu")

    def before_call() -> None:
        old.letterbox_batch(old.upload(old_slots, cpu), [box] * batch, old_out)

    times = alternate(
        runs, {"before": before_call, "now": lambda: now.letterbox_slots(new_slots, new_out)}
    )
    assert torch.equal(old_out, new_out), "the two give other values"
    return times


def attention(sides: list[int], runs: int) -> dict[str, list[float]]:
    import onnx

    from visionrt.backends.onnx_to_torch import convert_onnx
    from visionrt.export.depth import depth_export_size
    from visionrt.models import depth_model_target

    path = Path(depth_model_target())
    proto = onnx.load(str(path))
    times: dict[str, list[float]] = {}
    for side in sides:
        hw = depth_export_size(path, side, DEMO_VIDEO)
        x = torch.from_numpy(np.random.default_rng(0).standard_normal((1, 3, *hw), np.float32))
        modules = {fuse: convert_onnx(proto, [1, 3, *hw], fuse=fuse) for fuse in (False, True)}
        with torch.inference_mode():
            found = alternate(
                runs,
                {
                    f"{side} nodes": lambda m=modules[False], x=x: m(x),
                    f"{side} fused": lambda m=modules[True], x=x: m(x),
                },
            )
        times.update(found)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, help="an earlier preprocess/device.py")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--sides", default="266,518")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"CPU: {cpu_model()}; torch {torch.__version__}, {args.threads} threads;", end=" ")
    print(f"{args.runs} rounds alternating; ms per call, median (min–max)")
    results: dict[str, list[float]] = {}
    if args.before:
        results.update(
            {f"letterbox b{args.batch} {k}": v for k, v in letterbox(args.before, args.batch,
                                                                      args.runs).items()}
        )  # fmt: skip
    results.update(attention([int(s) for s in args.sides.split(",")], args.runs))
    print("| case | ms |\n|---|---|")
    for name, values in results.items():
        print(f"| {name} | {spread(values, '.0f')} |")
    medians = {name: statistics.median(values) for name, values in results.items()}
    for name in medians:
        if name.endswith(" now"):
            print(f"letterbox: {medians[name.replace(' now', ' before')] / medians[name]:.2f}x")
        if name.endswith(" fused"):
            print(f"{name}: {medians[name.replace(' fused', ' nodes')] / medians[name]:.2f}x")


if __name__ == "__main__":
    main()
