"""What decoding costs on the host in each form a decoder can hand a frame over: PyAV alone, no
pipeline — FFmpeg's BGR conversion (`to_ndarray("bgr24")`, the host path), the I420 planes as
decoded (the frames path with `source.pixels` auto), and the planes converted by OpenCV (what
`Frame.image` does on first use). N threads each decode their own copy of the video, as N
sources' readers do; rounds alternate the forms, FPS median (min–max).

Usage: .venv/bin/python scripts/bench_decode.py [--video V] [--streams 1,32] [--frames 300]
       [--runs 3]
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time

import av
import cv2
from bench_plan import spread  # scripts/ is on the path of a script run from it

from visionrt.hardware import cpu_model
from visionrt.paths import DEMO_VIDEO

FORMS = ("bgr24", "i420", "i420+opencv")


def decode(video: str, form: str, frames: int, counts: list[int]) -> None:
    container = av.open(video)
    stream = container.streams.video[0]
    stream.thread_type, stream.thread_count = "AUTO", 1
    done = 0
    for frame in container.decode(stream):
        if form == "bgr24":
            frame.to_ndarray(format="bgr24")
        elif form == "i420":
            frame.to_ndarray()
        else:
            cv2.cvtColor(frame.to_ndarray(), cv2.COLOR_YUV2BGR_I420)
        done += 1
        if done == frames:
            break
    container.close()
    counts.append(done)


def once(video: str, form: str, streams: int, frames: int) -> float:
    counts: list[int] = []
    threads = [
        threading.Thread(target=decode, args=(video, form, frames, counts)) for _ in range(streams)
    ]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(counts) / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--video", default=str(DEMO_VIDEO))
    parser.add_argument("--streams", default="1,32")
    parser.add_argument("--frames", type=int, default=300, help="frames per stream")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    counts = [int(c) for c in args.streams.split(",")]
    fps: dict[tuple[str, int], list[float]] = {(f, c): [] for f in FORMS for c in counts}
    once(args.video, "i420", 1, 30)  # warm-up: codec and OpenCV loaded
    for _ in range(args.runs):
        for count in counts:
            for form in FORMS:
                frames = args.frames if count == 1 else max(30, args.frames // 5)
                fps[form, count].append(once(args.video, form, count, frames))
    print(f"CPU: {cpu_model()}; {args.video}; {args.runs} rounds; FPS median (min–max)")
    print("| form | " + " | ".join(f"{c} thread{'s' * (c > 1)}" for c in counts) + " |")
    print("|---|" + "---|" * len(counts))
    for form in FORMS:
        print(f"| {form} | " + " | ".join(spread(fps[form, c], ".0f") for c in counts) + " |")
    one = {f: statistics.median(fps[f, counts[0]]) for f in FORMS}
    convert = 1e3 / one["i420+opencv"] - 1e3 / one["i420"]
    ffmpeg = 1e3 / one["bgr24"] - 1e3 / one["i420"]
    print(f"conversion per frame at {counts[0]} thread(s): OpenCV {convert:.2f} ms,", end=" ")
    print(f"FFmpeg {ffmpeg:.2f} ms")


if __name__ == "__main__":
    main()
