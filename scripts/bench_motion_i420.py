"""Motion gating on I420 frames (decoded in worker processes): the gate's time per frame when it
converts the frame to BGR first (before) and when it measures the Y plane
(`preprocess.motion.i420_grey`, now), alternating within each round, on the demo video's
frames held as I420; and how far the two measured shares of change are apart (same reference,
kept every 5th frame).

Usage: .venv/bin/python scripts/bench_motion_i420.py [--frames 200] [--runs 7]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import cv2
import numpy as np
import numpy.typing as npt
from bench_plan import spread  # scripts/ is on the path of a script run from it

from visionrt.hardware import cpu_model
from visionrt.paths import DEMO_VIDEO
from visionrt.preprocess.motion import MotionGate, MotionOptions, i420_grey

Picture = Callable[[npt.NDArray[np.uint8]], npt.NDArray[np.uint8]]
WAYS: dict[str, Picture] = {
    "bgr (before)": lambda i420: cv2.cvtColor(i420, cv2.COLOR_YUV2BGR_I420),
    "luma (now)": i420_grey,
}


def one_pass(frames: list[npt.NDArray[np.uint8]], picture: Picture) -> tuple[float, list[float]]:
    """ms per frame of picture + measure (regions mode's boxes too), and each frame's share."""
    gate, shares = MotionGate(MotionOptions(mode="regions")), []
    started = time.perf_counter()
    for index, i420 in enumerate(frames):
        shares.append(gate.measure(picture(i420), boxes=True).share)
        if index % 5 == 0:
            gate.keep()
    return (time.perf_counter() - started) / len(frames) * 1e3, shares


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=200)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    capture = cv2.VideoCapture(str(DEMO_VIDEO))
    frames = []
    while len(frames) < args.frames:
        ok, bgr = capture.read()
        if not ok:
            break
        frames.append(np.asarray(cv2.cvtColor(bgr, cv2.COLOR_BGR2YUV_I420)))
    capture.release()
    times: dict[str, list[float]] = {name: [] for name in WAYS}
    shares: dict[str, list[float]] = {}
    one_pass(frames[:10], WAYS["bgr (before)"])  # warm-up
    for run in range(args.runs):
        order = list(WAYS) if run % 2 == 0 else list(reversed(WAYS))
        for name in order:
            ms, shares[name] = one_pass(frames, WAYS[name])
            times[name].append(ms)
    height, width = frames[0].shape[0] * 2 // 3, frames[0].shape[1]
    print(f"{cpu_model()} · {len(frames)} frames {width}×{height} of {DEMO_VIDEO.name} as I420")
    for name in WAYS:
        print(f"  {name}: {spread(times[name], '.3f')} ms per frame")
    before, now = (np.array(shares[name]) for name in WAYS)
    ratio = [b / n for b, n in zip(times["bgr (before)"], times["luma (now)"], strict=True)]
    print(f"  before / now per round: {spread(ratio)}×")
    print(f"  share of change, |before − now|: max {np.abs(before - now).max():.5f},"
          f" mean share {before.mean():.4f}")  # fmt: skip


if __name__ == "__main__":
    main()
