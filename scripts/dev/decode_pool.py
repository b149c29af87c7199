"""Whether N sources decode faster on N threads (as the pipeline's readers do) or on a few
threads that each decode several sources in bursts: PyAV alone, one FFmpeg thread per decoder,
I420 frames as the frames path keeps them; FPS and process CPU per frame, each way in turn.
An experiment for issue #33's many-streams host ceiling, not a benchmark of the pipeline.

    .venv/bin/python scripts/dev/decode_pool.py [FRAMES_PER_SOURCE] [ROUNDS]
"""

from __future__ import annotations

import resource
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import av

from visionrt.hardware import cpu_model
from visionrt.paths import DEMO_VIDEO

VIDEO = str(DEMO_VIDEO)


def opened() -> tuple[Any, Iterator[Any]]:
    container = av.open(VIDEO)
    stream = container.streams.video[0]
    stream.thread_type, stream.thread_count = "AUTO", 1
    return container, container.decode(stream)


def one_each(sources: int, frames: int) -> list[threading.Thread]:
    """A thread per source, as the pipeline's readers."""

    def work() -> None:
        container, decoded = opened()
        for _, frame in zip(range(frames), decoded, strict=False):
            frame.to_ndarray()
        container.close()

    return [threading.Thread(target=work) for _ in range(sources)]


def pooled(sources: int, frames: int, threads: int, burst: int) -> list[threading.Thread]:
    """`threads` threads, each decoding its share of the sources `burst` frames at a time."""

    def work(share: int) -> None:
        decoders = [opened() for _ in range(share)]
        left = [frames] * share
        while any(left):
            for k, (_, decoded) in enumerate(decoders):
                for _ in range(min(burst, left[k])):
                    next(decoded).to_ndarray()
                    left[k] -= 1
        for container, _ in decoders:
            container.close()

    shares = [len(range(t, sources, threads)) for t in range(threads)]
    return [threading.Thread(target=work, args=(share,)) for share in shares]


def once(threads: list[threading.Thread], total: int) -> tuple[float, float]:
    """FPS, and the process's CPU microseconds per frame."""
    before = resource.getrusage(resource.RUSAGE_SELF)
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return total / wall, cpu / total * 1e6


def main() -> None:
    frames = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    ways: list[tuple[str, int, Callable[[], list[threading.Thread]]]] = [
        ("1 source, 1 thread", 1, lambda: one_each(1, frames)),
        ("2 sources, 2 threads", 2, lambda: one_each(2, frames)),
        ("32 sources, 32 threads", 32, lambda: one_each(32, frames)),
        ("32 sources, 2 threads, bursts of 1", 32, lambda: pooled(32, frames, 2, 1)),
        ("32 sources, 2 threads, bursts of 8", 32, lambda: pooled(32, frames, 2, 8)),
        ("32 sources, 4 threads, bursts of 4", 32, lambda: pooled(32, frames, 4, 4)),
    ]
    once(one_each(1, 30), 30)  # warm-up: the codec loaded, the file in the page cache
    print(f"CPU: {cpu_model()}; {VIDEO}, {frames} frames a source")
    for round_ in range(rounds):
        for name, sources, make in ways:
            fps, per_frame = once(make(), sources * frames)
            print(f"round {round_ + 1}: {name:36s} {fps:6.0f} FPS {per_frame:5.0f} CPU µs/frame")


if __name__ == "__main__":
    main()
