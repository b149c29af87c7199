"""Dev experiment: the tracker's first-association IoU gate (`match_iou`) against identity errors
on synthetic scenes whose true identities are known (vtest.avi has none labelled).

Scenes: `--objects` boxes moving at constant velocity (up to `--speed` px/s, so paths cross),
1.5 px noise, 8 % missed detections, low-confidence clutter, seen at `--fps`; the detector runs
on every Nth frame (the tracker predicts between). Per gate and N, over `--seeds` scenes:
switches (a true object's track id changes between detector frames), transfers (a track id that
ends up on a second true object) and coverage (true boxes given an id; the worst scene).

Usage: .venv/bin/python scripts/dev/track_gate_sweep.py [--seeds 20] [--objects 12]
"""

from __future__ import annotations

import argparse

import numpy as np

from visionrt.fidelity import IdentityErrors, identity_errors
from visionrt.fuse.track_options import TrackOptions
from visionrt.fuse.tracking import make_tracker
from visionrt.types import Detections


def scene(seed: int, frames: int, objects: int, speed: float, fps: float):
    rng = np.random.default_rng(seed)
    things = [
        {
            "start": int(rng.integers(0, frames // 2)),
            "length": int(rng.integers(frames // 3, frames)),
            "origin": rng.uniform([80, 80], [700, 500]),
            "velocity": rng.uniform(-speed, speed, 2),
            "size": rng.uniform([30, 70], [50, 120]),
        }
        for _ in range(objects)
    ]
    out = []
    for index in range(frames):
        t = index / fps
        boxes, conf, ids = [], [], []
        for identity, obj in enumerate(things):
            if not obj["start"] <= index < obj["start"] + obj["length"] or rng.random() < 0.08:
                continue
            centre = obj["origin"] + obj["velocity"] * (t - obj["start"] / fps)
            centre = centre + rng.normal(0, 1.5, 2)
            half = obj["size"] / 2
            boxes.append([*(centre - half), *(centre + half)])
            conf.append(float(rng.uniform(0.55, 0.95)))
            ids.append(identity)
        for _ in range(int(rng.integers(0, 3))):
            corner = rng.uniform([0, 0], [760, 560])
            boxes.append([*corner, *(corner + 40)])
            conf.append(float(rng.uniform(0.12, 0.3)))
            ids.append(-1)
        out.append(
            (t, np.asarray(boxes, np.float32).reshape(-1, 4), np.asarray(conf, np.float32), ids)
        )
    return out


def errors(frames, kind: str, match_iou: float, every: int) -> IdentityErrors:
    """The tracker's identity errors on the detector frames of one scene."""
    tracker = make_tracker(TrackOptions(kind, 0.5, 0.1, match_iou, 1.0))
    truth, tracked = [], []
    for index, (t, xyxy, conf, ids) in enumerate(frames):
        if index % every:
            tracker.predict(t)
            continue
        out = tracker.update(Detections(xyxy, conf, np.zeros(len(conf), np.int32)), t)
        given = [-1] * len(ids)
        for box, track_id in zip(out.detections.xyxy, out.track_id, strict=True):
            given[int(np.argmin(np.abs(xyxy - box).sum(axis=1)))] = int(track_id)
        truth.append(ids)
        tracked.append(given)
    return identity_errors(truth, tracked)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--objects", type=int, default=12)
    parser.add_argument("--speed", type=float, default=60.0, help="most px/s per axis")
    parser.add_argument("--fps", type=float, default=10.0)
    parser.add_argument("--frames", type=int, default=200)
    parser.add_argument("--every", default="1,3,5")
    parser.add_argument("--gates", default="0.1,0.2,0.3")
    parser.add_argument("--tracker", default="bytetrack")
    args = parser.parse_args()
    scenes = [scene(s, args.frames, args.objects, args.speed, args.fps) for s in range(args.seeds)]
    print(f"{args.seeds} scenes × {args.frames} frames at {args.fps:g} FPS, {args.objects} objects"
          f" up to {args.speed:g} px/s, tracker {args.tracker}")  # fmt: skip
    print("| N | match_iou | switches | transfers | coverage |")
    print("|---:|---:|---:|---:|---:|")
    for every in (int(x) for x in args.every.split(",")):
        for gate in (float(x) for x in args.gates.split(",")):
            found = [errors(f, args.tracker, gate, every) for f in scenes]
            switches = sum(e.switches for e in found)
            transfers = sum(e.transfers for e in found)
            coverage = min(e.coverage for e in found)
            print(f"| {every} | {gate:g} | {switches} | {transfers} | {coverage:.3f} |")


if __name__ == "__main__":
    main()
