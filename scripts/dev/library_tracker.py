"""Runs the `trackers` package's ByteTrack (Apache-2.0) over detections given as JSON on stdin and
prints each frame's track ids as JSON: the reference side of tests/test_tracker_vs_library.py.

Runs in an environment that has `trackers` (it needs opencv-python, which clashes with our
opencv-python-headless: the peer venv, `.peer-venv/bin/python -m pip install trackers`).
Input: {"fps": F, "frames": [{"t": seconds, "xyxy": [[…]], "conf": […]}, …]}
Output: [[id or -1 per input box, in input order], …]
"""

from __future__ import annotations

import json
import sys

import numpy as np
import supervision as sv
from trackers import ByteTrackTracker


def main() -> None:
    data = json.load(sys.stdin)
    tracker = ByteTrackTracker(
        lost_track_buffer=int(data["fps"]),  # one second, as visionrt's lost_seconds 1.0
        frame_rate=data["fps"],
        track_activation_threshold=0.5,
        minimum_consecutive_frames=1,
        minimum_iou_threshold=0.3,
        high_conf_det_threshold=0.5,
    )
    out = []
    for frame in data["frames"]:
        xyxy = np.asarray(frame["xyxy"], np.float32).reshape(-1, 4)
        conf = np.asarray(frame["conf"], np.float32)
        detections = sv.Detections(xyxy=xyxy, confidence=conf, data={"row": np.arange(len(conf))})
        tracked = tracker.update(detections, timestamp=frame["t"])
        ids = [-1] * len(conf)
        for row, track_id in zip(tracked.data["row"], tracked.tracker_id, strict=True):
            ids[int(row)] = int(track_id)
        out.append(ids)
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
