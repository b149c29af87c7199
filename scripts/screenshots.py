"""The docs' pictures, made rather than taken by hand: the `serve` live view of the README's service
example (headless Chromium, as the test set-up installs it), and one annotated
frame of the seed scenario's rgb camera beside its depth map (the architecture-only depth model:
the colours show plumbing, not real depth). Written to docs/images/.

Usage: .venv/bin/python scripts/screenshots.py [--port 8765]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import av
import cv2
import numpy as np

from visionrt.models import depth_model_path
from visionrt.paths import DEMO_VIDEO

ROOT = Path(__file__).resolve().parent.parent
IMAGES = ROOT / "docs" / "images"
VISIONRT = str(Path(sys.executable).parent / "visionrt")
CHROMIUM = ("chromium", "chromium-browser", "google-chrome")


def _chromium() -> str:
    for name in CHROMIUM:
        if path := shutil.which(name):
            return path
    sys.exit("no Chromium on PATH: `make setup-test` installs Debian's")


def _wait_for(url: str, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(0.5)
    sys.exit(f"{url} did not answer within {seconds:.0f} s")


# The README's service example (a camera with a zone, tracking), less its MQTT broker: the live
# view's events table shows the zone's events all the same.
EXAMPLE = """pipeline: {tracking: {enabled: true}}
analytics:
  door: {zones: {entrance: [[0, 200], [384, 200], [384, 576], [0, 576]]}}
"""


def _zone_events(url: str) -> int:
    try:
        with urllib.request.urlopen(f"{url}events?limit=50", timeout=2) as answer:
            events = json.loads(answer.read())
    except OSError:
        return 0
    return sum(1 for event in events if str(event.get("kind", "")).startswith("zone"))


def live_view(port: int, out: Path) -> Path:
    """The live view of `visionrt serve` running the README's example (one camera, a zone),
    once its preview came and the zone has events to show."""
    video = str(DEMO_VIDEO)
    with tempfile.TemporaryDirectory() as folder:
        config = Path(folder) / "serve.yaml"
        config.write_text(EXAMPLE, encoding="utf-8")
        serve = subprocess.Popen(
            [
                VISIONRT,
                "serve",
                f"door={video}",
                "--config",
                str(config),
                "--port",
                str(port),
                "--out",
                str(Path(folder) / "out"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            url = f"http://127.0.0.1:{port}/"
            _wait_for(url, 120)
            deadline = time.monotonic() + 120
            while _zone_events(url) < 3 and time.monotonic() < deadline:
                time.sleep(1)
            with tempfile.TemporaryDirectory() as profile:
                subprocess.run(
                    [
                        _chromium(),
                        "--headless=new",
                        "--no-sandbox",
                        "--disable-gpu",
                        "--disable-dev-shm-usage",
                        "--hide-scrollbars",
                        f"--user-data-dir={profile}",
                        "--virtual-time-budget=4000",
                        f"--screenshot={out}",
                        "--window-size=1280,900",
                        url,
                    ],
                    check=True,
                    capture_output=True,
                    timeout=120,
                )
        finally:
            serve.terminate()
            serve.wait(timeout=60)
    return out


def _frame(path: Path, index: int) -> np.ndarray:
    with av.open(str(path)) as container:
        for i, frame in enumerate(container.decode(video=0)):
            if i == index:
                return frame.to_ndarray(format="bgr24")
    raise SystemExit(f"{path}: fewer than {index + 1} frames")


def depth_frame(out: Path, index: int = 40) -> Path:
    """Frame `index` of the seed scenario's rgb camera, annotated (boxes with track ids and
    distances), beside its colourised depth map."""
    video = str(DEMO_VIDEO)
    with tempfile.TemporaryDirectory() as folder:
        subprocess.run(
            [
                VISIONRT,
                "run",
                f"rgb={video}",
                f"slam1={video}",
                "--depth",
                str(depth_model_path()),
                "--depth-on",
                "rgb",
                "--depth-size",
                "266",
                "--track",
                "--max-frames",
                str(index + 1),
                "--out",
                folder,
                "-q",
                "--no-plan",
            ],
            check=True,
            capture_output=True,
            timeout=900,
        )
        annotated = _frame(Path(folder) / "rgb.mp4", index)
        depth = _frame(Path(folder) / "rgb.depth.mp4", index)
    depth = cv2.resize(depth, (annotated.shape[1], annotated.shape[0]))
    cv2.imwrite(str(out), np.hstack([annotated, depth]), [cv2.IMWRITE_JPEG_QUALITY, 85])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8765)
    args = parser.parse_args()
    IMAGES.mkdir(parents=True, exist_ok=True)
    for made in (
        live_view(args.port, IMAGES / "serve-live-view.png"),
        depth_frame(IMAGES / "seed-depth.jpg"),
    ):
        print(f"wrote {made.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
