"""Issue #48's figure: the pipeline process's own CPU time per frame, and its wall FPS, on the
null frames path (`--backend null --set inference.settings.input=frames`, decoders in worker
processes, no sinks) at 1, 8, 32 and 64 streams of a 768×576 H.264 clip cut from vtest.avi.

The CPU is getrusage(RUSAGE_SELF) of one process around each of its `visionrt run` calls (every
thread of it; the decoder processes are its children and not counted), after a warm-up call,
taken as the marginal between a short and a long run (`--short`, `--long` frames per stream;
few streams run longer, `lengths`): what every run costs once (sources opened, workers started,
outputs written) cancels, what is left is what each further frame costs. Each stage thread's
own CPU is taken the same way. Batches are min(streams, 32) frames.

`--device cuda` stages the frames for the GPU as the frames path does there (the GPU check's
`process_cpu` step). With `--before SRC` (an older checkout's src, e.g. from `git worktree
add`) each round runs that tree too, through PYTHONPATH with the same virtual environment,
alternating with this one; every figure is the median (min–max) of the rounds.

Usage: .venv/bin/python scripts/bench_process_cpu.py [--streams 1,8,32,64] [--short 30]
       [--long 150] [--runs 3] [--before SRC] [--device cpu|cuda] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from visionrt.hardware import cpu_model
from visionrt.paths import DEMO_VIDEO

CLIP_FRAMES = 780  # of vtest.avi's 795

# Runs the command lines it is given (JSON on stdin) one after another in this one process, and
# prints each one's CPU seconds (getrusage of the process: all its threads, not its children),
# and each stage thread's and the caller's own (time.thread_time: the stage threads at their end,
# by name, a reader or inference worker's number left out). The first is a warm-up: imports and
# first-call costs are paid before anything is counted.
WRAPPER = """
import json, re, resource, sys, threading, time
from visionrt.cli.main import main
from visionrt.pipeline import graph
threads, lock = {}, threading.Lock()
guard = graph.Graph._guard
def timed(self, stage, *args):
    try:
        guard(self, stage, *args)
    finally:
        name = re.sub(r"-[0-9]+$", "", threading.current_thread().name)
        with lock:
            threads[name] = threads.get(name, 0.0) + time.thread_time()
graph.Graph._guard = timed
def cpu():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime
found = []
for argv in json.load(sys.stdin):
    time.sleep(1)  # what the last run left running (worker processes ending) ends first
    threads.clear()
    before, caller = cpu(), time.thread_time()
    main(argv)
    mine = time.thread_time() - caller
    found.append({"cpu": cpu() - before, "threads": {**threads, "caller": mine}})
print(json.dumps(found))
"""


def make_clip(folder: Path, frames: int) -> Path:
    """vtest.avi's first `frames` frames as H.264 (yuv420p), the decoders' usual work."""
    import av

    path = folder / "vtest_h264.mp4"
    with av.open(str(DEMO_VIDEO)) as source, av.open(str(path), "w") as target:
        stream = target.add_stream("libx264", rate=10)
        stream.width, stream.height, stream.pix_fmt = 768, 576, "yuv420p"
        for index, frame in enumerate(source.decode(video=0)):
            if index == frames:
                break
            for packet in stream.encode(frame.reformat(format="yuv420p")):
                target.mux(packet)
        for packet in stream.encode():
            target.mux(packet)
    return path


def run(
    clip: Path, streams: int, lengths: list[int], tree: Path | None, device: str = "cpu"
) -> list[tuple[float, float, dict[str, float]]]:
    """(process CPU seconds, FPS, CPU seconds by thread) of a `visionrt run` of `streams`
    copies of `clip` for each of `lengths` frames per stream, in one process after a warm-up
    run of the first length."""
    env = dict(os.environ)
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
    with tempfile.TemporaryDirectory() as out:
        argvs = []
        for index, frames in enumerate([lengths[0], *lengths]):
            command = ["run", *(f"s{i}={clip}" for i in range(streams))]
            command += ["--backend", "null", "--batch", str(min(streams, 32))]
            command += ["--set", "inference.settings.input=frames"]
            command += ["--set", "source.workers=process", "--device", device]
            command += ["--no-plan", "--no-video", "--no-jsonl", "-q"]
            command += ["-o", str(Path(out) / str(index)), "--max-frames", str(frames)]
            argvs.append(command)
        proc = subprocess.run(
            [sys.executable, "-c", WRAPPER],
            input=json.dumps(argvs),
            capture_output=True,
            text=True,
            env=env,
        )
        if proc.returncode:
            sys.exit(f"visionrt run failed: {proc.stderr.strip().splitlines()[-1:]}")
        measured = json.loads(proc.stdout.strip().splitlines()[-1])[1:]
        found = []
        for index, frames in enumerate(lengths, start=1):
            summary = json.loads((Path(out) / str(index) / "summary.json").read_text())
            if not summary["accounted"] or summary["frames_out"] != streams * frames:
                sys.exit(f"frames lost: {summary['frames_in']} in, {summary['frames_out']} out")
            taken = measured[index - 1]
            found.append((float(taken["cpu"]), float(summary["fps"]), taken["threads"]))
        return found


def lengths(streams: int, long: int) -> int:
    """The long run's frames per stream: at least `long`, and for few streams enough that the
    marginal spans ~4,800 frames (at 1 stream, 120 frames' difference was within what one run
    costs more or less than another), up to the clip's CLIP_FRAMES."""
    return min(CLIP_FRAMES, max(long, 4800 // streams))


def spread(values: list[float], digits: int) -> str:
    low, middle, high = min(values), statistics.median(values), max(values)
    return f"{middle:.{digits}f} ({low:.{digits}f}–{high:.{digits}f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", default="1,8,32,64")
    parser.add_argument("--short", type=int, default=30, help="frames per stream, short run")
    parser.add_argument("--long", type=int, default=150, help="frames per stream, long run")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--before", type=Path, default=None, help="an older checkout's src")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--device", default="cpu", help="cuda: the frames go to the GPU")
    args = parser.parse_args()
    if not 0 < args.short < args.long:
        sys.exit("--short must be positive and under --long")
    counts = [int(c) for c in args.streams.split(",")]
    trees: dict[str, Path | None] = {"this tree": None}
    if args.before is not None:
        trees = {"before": args.before.resolve(), **trees}
    cpu_ms: dict[tuple[str, int], list[float]] = {(t, c): [] for t in trees for c in counts}
    fps: dict[tuple[str, int], list[float]] = {(t, c): [] for t in trees for c in counts}
    by_thread: dict[tuple[str, int], dict[str, list[float]]] = {}
    with tempfile.TemporaryDirectory() as folder:
        clip = make_clip(Path(folder), max(args.long, CLIP_FRAMES))
        for index in range(args.runs):
            for count in counts:
                for name, tree in trees.items():
                    long = lengths(count, args.long)
                    (short_cpu, _, short_threads), (long_cpu, long_fps, long_threads) = run(
                        clip, count, [args.short, long], tree, args.device
                    )
                    frames = count * (long - args.short)
                    marginal = (long_cpu - short_cpu) / frames
                    cpu_ms[name, count].append(1000 * marginal)
                    fps[name, count].append(long_fps)
                    for thread, seconds in long_threads.items():
                        extra = seconds - short_threads.get(thread, 0.0)
                        by_thread.setdefault((name, count), {}).setdefault(thread, [])
                        by_thread[name, count][thread].append(1000 * extra / frames)
                    print(
                        f"round {index + 1}: {name} ×{count}: {1000 * marginal:.3f} ms a frame,"
                        f" {long_fps:.0f} FPS",
                        file=sys.stderr,
                    )
    print(f"CPU: {cpu_model()}, {os.cpu_count()} logical; {args.runs} rounds alternating;")
    spans = ", ".join(f"{c}: {args.short}–{lengths(c, args.long)}" for c in counts)
    print(f"null frames path, H.264 768×576, marginal between frames per stream ({spans});")
    print("median (min–max)")
    print("| tree | streams | pipeline process CPU per frame (ms) | FPS |")
    print("|---|---|---|---|")
    for name in trees:
        for count in counts:
            print(
                f"| {name} | {count} | {spread(cpu_ms[name, count], 3)}"
                f" | {spread(fps[name, count], 0)} |"
            )
    print("\nBy thread (ms a frame, median; the caller joins, fuses and writes):")
    for (name, count), threads in by_thread.items():
        cells = ", ".join(
            f"{thread} {statistics.median(values):.3f}"
            for thread, values in sorted(threads.items())
        )
        print(f"- {name}, {count} streams: {cells}")
    if args.json:
        data = {
            "cpu": cpu_model(),
            "short": args.short,
            "long": args.long,
            "before": str(args.before or ""),
            "device": args.device,
            "cpu_ms_per_frame": {f"{t}x{c}": v for (t, c), v in cpu_ms.items()},
            "fps": {f"{t}x{c}": v for (t, c), v in fps.items()},
            "cpu_ms_by_thread": {f"{t}x{c}": v for (t, c), v in by_thread.items()},
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(data, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
