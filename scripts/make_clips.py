"""Footage for issue #17's figures, cut from Debian's vtest.avi (768×576, 10 FPS, 795 frames):

- pan: a 640×480 window that pans across the frame and back (a moving camera, the same people);
- drift: vtest.avi as it is until frame `--drift-at`, then darkened to a quarter of its
  brightness and blurred (lights dimmed, focus lost), for the live audit's drift figure.

Written losslessly enough for detection (MJPG, quality 95) to ~/.cache/visionrt/clips/.

Usage: .venv/bin/python scripts/make_clips.py [--out DIR] [--drift-at 400]
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator
from pathlib import Path

import cv2
import numpy as np
import numpy.typing as npt

from visionrt.paths import DEMO_VIDEO, cache_root

Image = npt.NDArray[np.uint8]
CLIPS = cache_root() / "clips"


def frames(video: Path = DEMO_VIDEO) -> Iterator[Image]:
    capture = cv2.VideoCapture(str(video))
    try:
        while True:
            ok, image = capture.read()
            if not ok:
                return
            yield image
    finally:
        capture.release()


def pan(image: Image, index: int, total: int, hw: tuple[int, int] = (480, 640)) -> Image:
    """The `hw` window at frame `index` of a pan from the top-left corner to the bottom-right
    one and back over `total` frames."""
    room_y, room_x = image.shape[0] - hw[0], image.shape[1] - hw[1]
    phase = 1 - abs(2 * index / max(total - 1, 1) - 1)  # 0 → 1 → 0
    y, x = round(room_y * phase), round(room_x * phase)
    return np.ascontiguousarray(image[y : y + hw[0], x : x + hw[1]])


def drift(image: Image, index: int, start: int) -> Image:
    """The frame as it is before `start`, then a quarter as bright and blurred."""
    if index < start:
        return image
    dark = (image.astype(np.float32) * 0.25).astype(np.uint8)
    return cv2.GaussianBlur(dark, (9, 9), 3.0)


def write(path: Path, edit: Callable[[Image, int], Image], fps: float = 10.0) -> Path:
    total = int(cv2.VideoCapture(str(DEMO_VIDEO)).get(cv2.CAP_PROP_FRAME_COUNT))
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f"{path.stem}.partial{path.suffix}")
    writer: cv2.VideoWriter | None = None
    try:
        for index, image in enumerate(frames()):
            out = edit(image, index) if total else image
            if writer is None:
                writer = cv2.VideoWriter(
                    str(partial), cv2.VideoWriter_fourcc(*"MJPG"), fps, out.shape[1::-1]
                )
                writer.set(cv2.VIDEOWRITER_PROP_QUALITY, 95)
            writer.write(out)
    finally:
        if writer is not None:
            writer.release()
    partial.replace(path)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=CLIPS)
    parser.add_argument("--drift-at", type=int, default=400)
    args = parser.parse_args()
    total = int(cv2.VideoCapture(str(DEMO_VIDEO)).get(cv2.CAP_PROP_FRAME_COUNT))
    print(write(args.out / "vtest_pan_640x480.avi", lambda im, i: pan(im, i, total)))
    name = f"vtest_drift_at{args.drift_at}.avi"
    print(write(args.out / name, lambda im, i: drift(im, i, args.drift_at)))


if __name__ == "__main__":
    main()
