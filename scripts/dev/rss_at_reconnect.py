"""Dev probe: where the main process's memory goes when a stream reconnects.

One paced camera and soak.py's TCP stream (killed at 45 s and 95 s, back at 60 s and 110 s) run
through the cached plan with tracking; at 40, 90 and 140 s it prints RSS split by mapping kind
from /proc/self/smaps (shared libraries, anonymous, heap, shared memory, files) and, when run with
PYTHONTRACEMALLOC=1, the memory Python and NumPy allocations hold.

Usage: .venv/bin/python scripts/dev/rss_at_reconnect.py [thread|process]
(where the sources decode; with one live source `workers: auto` means thread, in this process)
"""

from __future__ import annotations

import multiprocessing
import sys
import time
import tracemalloc
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from soak import free_port, long_clip, serve

from visionrt.backends import BackendOptions
from visionrt.config import pipeline_options
from visionrt.models import demo_model_path
from visionrt.pipeline import Pipeline
from visionrt.sources import SourceOptions
from visionrt.tune import cached_plan

SCHEDULE = [(40, "mark"), (45, "kill"), (60, "restart"), (90, "mark"), (95, "kill"),
            (110, "restart"), (140, "mark")]  # fmt: skip


def rss_by_kind() -> dict[str, int]:
    """Resident KiB per mapping kind of this process."""
    kinds: dict[str, int] = {}
    kind = ""
    with open("/proc/self/smaps", encoding="utf-8") as smaps:
        for line in smaps:
            parts = line.split()
            if parts[0].count("-") == 1 and ":" not in parts[0]:  # a mapping's header line
                path = parts[5] if len(parts) > 5 else "[anon]"
                if path.startswith("/dev/shm"):
                    kind = "shm"
                elif ".so" in path:
                    kind = "libs"
                else:
                    kind = "file" if path.startswith("/") else path
            elif parts[0] == "Rss:":
                kinds[kind] = kinds.get(kind, 0) + int(parts[1])
    return kinds


def children(server: int | None) -> float:
    """Resident MB of this process's children but the stream server: the source workers."""
    total = 0
    for child in psutil.Process().children(recursive=True):
        try:
            if child.pid != server and psutil.Process(child.ppid()).pid != server:
                total += child.memory_info().rss
        except psutil.Error:
            pass
    return total / 2**20


def main() -> None:
    found = cached_plan(demo_model_path())
    if found is None:
        sys.exit("no cached plan: run `visionrt tune` first")
    plan = found[0]
    inference = plan.run["inference"]
    options = BackendOptions(
        precision=inference["precision"],
        fold_preprocess=inference["fold_preprocess"],
        settings=inference["settings"],
    )
    clip, port = long_clip(3), free_port()
    context = multiprocessing.get_context("spawn")
    server = context.Process(target=serve, args=(port, str(clip)), daemon=True)
    server.start()
    time.sleep(3)  # the server listening
    workers = sys.argv[1] if len(sys.argv) > 1 else "thread"
    pipeline = Pipeline(
        [f"cam1={clip}", f"stream=tcp://127.0.0.1:{port}"],
        plan.run["model"],
        plan.run["backend"],
        options,
        source_options=SourceOptions(
            realtime=True,
            max_frames=1500,
            reconnect_attempts=50,
            reconnect_max_backoff=2,
            workers=workers,
        ),
        options=pipeline_options(track=True, detect_every=3),
    )
    process, started, schedule = psutil.Process(), time.monotonic(), list(SCHEDULE)
    for _ in pipeline:
        elapsed = time.monotonic() - started
        while schedule and elapsed > schedule[0][0]:
            what = schedule.pop(0)[1]
            if what == "kill":
                server.kill()
            elif what == "restart":
                server = context.Process(target=serve, args=(port, str(clip)), daemon=True)
                server.start()
            else:
                kinds = sorted(rss_by_kind().items(), key=lambda kv: -kv[1])
                traced = tracemalloc.get_traced_memory()[0] / 2**20
                print(
                    f"{elapsed:.0f} s: RSS {process.memory_info().rss / 2**20:.1f} MB ("
                    + ", ".join(f"{k} {v / 1024:.1f}" for k, v in kinds[:6])
                    + f"); traced {traced:.1f} MB; worker processes {children(server.pid):.1f} MB",
                    flush=True,
                )
                continue
            print(f"{elapsed:.0f} s: stream server {what}", flush=True)
        if not schedule:
            break
    pipeline.close()
    server.kill()


if __name__ == "__main__":
    main()
