"""Dev-only: visionrt's clean-room ByteTrack against the `trackers` package's (Apache-2.0) on one
synthetic scene with known identities — noisy boxes, missed detections, low-confidence clutter,
objects entering and leaving. The library cannot be a dependency (it installs opencv-python over
our opencv-python-headless), so it runs in the peer's environment (`scripts/peer/setup.sh`, then
`.peer-venv/bin/python -m pip install trackers`); without it this test is skipped with that
reason. Both trackers must keep the true identities about as well, and agree with each other."""

from __future__ import annotations

import json
import subprocess
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

# Collecting this file (skipped outside a dev machine) costs no imports beyond conftest's:
# visionrt's tracker and fidelity code (scipy) load when the test runs.

ROOT = Path(__file__).resolve().parent.parent
PEER_PYTHON = ROOT / ".peer-venv" / "bin" / "python"
FPS = 30.0


@pytest.fixture(scope="module")
def peer_python() -> Path:
    """The peer's Python with `trackers`; the probe runs when the test does, not at collection."""
    reason = (
        "dev-only: needs the `trackers` package in .peer-venv (scripts/peer/setup.sh, then"
        " .peer-venv/bin/python -m pip install trackers)"
    )
    if not PEER_PYTHON.exists():
        pytest.skip(reason)
    probe = subprocess.run(
        [str(PEER_PYTHON), "-c", "import trackers, supervision"], capture_output=True, timeout=120
    )
    if probe.returncode != 0:
        pytest.skip(reason)
    return PEER_PYTHON


def _scene(seed: int = 3, frames: int = 150) -> tuple[list[dict[str, object]], list[list[int]]]:
    """Per frame: detections (boxes, confidences) and each box's true identity (-1: clutter)."""
    rng = np.random.default_rng(seed)
    objects = []
    for identity in range(10):
        start = int(rng.integers(0, frames // 2))
        objects.append(
            {
                "id": identity,
                "start": start,
                "end": int(min(frames, start + rng.integers(40, frames))),
                "origin": rng.uniform([50, 50], [550, 400]),
                "velocity": rng.uniform(-60, 60, 2),  # pixels per second
                "size": rng.uniform([30, 60], [50, 110]),
            }
        )
    scene, truth = [], []
    for index in range(frames):
        t = index / FPS
        boxes, conf, ids = [], [], []
        for obj in objects:
            if not obj["start"] <= index < obj["end"] or rng.random() < 0.08:  # 8 % missed
                continue
            centre = obj["origin"] + obj["velocity"] * t + rng.normal(0, 1.5, 2)
            half = obj["size"] / 2
            boxes.append([*(centre - half), *(centre + half)])
            conf.append(float(rng.uniform(0.55, 0.95)))
            ids.append(obj["id"])
        for _ in range(int(rng.integers(0, 3))):  # low-confidence clutter, never a track
            corner = rng.uniform([0, 0], [600, 440])
            boxes.append([*corner, *(corner + 40)])
            conf.append(float(rng.uniform(0.12, 0.3)))
            ids.append(-1)
        scene.append({"t": t, "xyxy": boxes, "conf": conf})
        truth.append(ids)
    return scene, truth


def _ours(scene: list[dict[str, object]]) -> list[list[int]]:
    from visionrt.fuse.bytetrack import Tracker
    from visionrt.fuse.track_options import TrackOptions
    from visionrt.types import Detections

    tracker = Tracker(TrackOptions(high=0.5, low=0.1))
    out = []
    for frame in scene:
        xyxy = np.asarray(frame["xyxy"], np.float32).reshape(-1, 4)
        conf = np.asarray(frame["conf"], np.float32)
        detections = Detections(xyxy, conf, np.zeros(len(conf), np.int32))
        tracked = tracker.update(detections, float(frame["t"]))  # type: ignore[arg-type]
        ids = [-1] * len(conf)
        for box, track_id in zip(tracked.detections.xyxy, tracked.track_id, strict=True):
            row = int(np.argmin(np.abs(xyxy - box).sum(axis=1)))  # the detector's own box
            ids[row] = int(track_id)
        out.append(ids)
    return out


def _library(python: Path, scene: list[dict[str, object]]) -> list[list[int]]:
    run = subprocess.run(
        [str(python), str(ROOT / "scripts" / "dev" / "library_tracker.py")],
        input=json.dumps({"fps": FPS, "frames": scene}),
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    result: list[list[int]] = json.loads(run.stdout)
    return result


def test_clean_room_bytetrack_keeps_identities_like_the_library(peer_python: Path) -> None:
    from visionrt.fidelity import identity_errors

    scene, truth = _scene()
    ours, theirs = _ours(scene), _library(peer_python, scene)
    mine, library = identity_errors(truth, ours), identity_errors(truth, theirs)
    assert mine.switches <= library.switches + 1
    assert mine.coverage >= library.coverage - 0.02
    assert mine.coverage > 0.95
    # Clutter (confidence 0.12–0.3) never starts a track; the library's second stage lets a
    # clutter box that overlaps a live track extend it (IoU ≥ 0.3), ours asks IoU ≥ 0.5.
    clutter = [(x, y) for t, a, b in zip(truth, ours, theirs, strict=True)
               for true_id, x, y in zip(t, a, b, strict=True) if true_id < 0]  # fmt: skip
    assert sum(x >= 0 for x, _ in clutter) <= sum(y >= 0 for _, y in clutter) <= 0.05 * len(clutter)
    # Where both give an id, one of ours maps to one of theirs (same partition of the boxes).
    pairs = Counter(
        (x, y)
        for a, b in zip(ours, theirs, strict=True)
        for x, y in zip(a, b, strict=True)
        if x >= 0 and y >= 0
    )
    dominant: dict[int, int] = {}
    for x, y in (pair for pair, _ in pairs.most_common()):
        dominant.setdefault(x, y)
    agreeing = sum(c for (x, y), c in pairs.items() if dominant[x] == y)
    assert agreeing / sum(pairs.values()) > 0.97
