"""Issue #48's figure: the pipeline process's own CPU time per frame, and its wall FPS, on the
null frames path (`--backend null --set inference.settings.input=frames`, decoders in worker
processes, no sinks) at 1, 8, 32 and 64 streams of a 768×576 H.264 clip cut from vtest.avi.

The CPU is getrusage(RUSAGE_SELF) of one process around each of its `visionrt run` calls (every
thread of it; the decoder processes are its children and not counted), after a warm-up call,
taken as the marginal between a short and a long run (`--short`, `--long` frames per stream):
what every run costs once (sources opened, workers started, outputs written) cancels, what is
left is what each further frame costs. Batches are min(streams, 32) frames.

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

# Runs the command lines it is given (JSON on stdin) one after another in this one process, and
# prints each one's CPU seconds (getrusage of the process: all its threads, not its children).
# The first is a warm-up: imports and first-call costs are paid before anything is counted.
WRAPPER = """
import json, resource, sys
from visionrt.cli.main import main
def cpu():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime
seconds = []
for argv in json.load(sys.stdin):
    before = cpu()
    main(argv)
    seconds.append(cpu() - before)
print(json.dumps(seconds))
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
) -> list[tuple[float, float]]:
    """(process CPU seconds, FPS) of a `visionrt run` of `streams` copies of `clip` for each of
    `lengths` frames per stream, in one process after a warm-up run of the first length."""
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
        seconds = json.loads(proc.stdout.strip().splitlines()[-1])[1:]
        found = []
        for index, frames in enumerate(lengths, start=1):
            summary = json.loads((Path(out) / str(index) / "summary.json").read_text())
            if not summary["accounted"] or summary["frames_out"] != streams * frames:
                sys.exit(f"frames lost: {summary['frames_in']} in, {summary['frames_out']} out")
            found.append((float(seconds[index - 1]), float(summary["fps"])))
        return found


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
    with tempfile.TemporaryDirectory() as folder:
        clip = make_clip(Path(folder), args.long)
        for index in range(args.runs):
            for count in counts:
                for name, tree in trees.items():
                    (short_cpu, _), (long_cpu, long_fps) = run(
                        clip, count, [args.short, args.long], tree, args.device
                    )
                    marginal = (long_cpu - short_cpu) / (count * (args.long - args.short))
                    cpu_ms[name, count].append(1000 * marginal)
                    fps[name, count].append(long_fps)
                    print(
                        f"round {index + 1}: {name} ×{count}: {1000 * marginal:.3f} ms a frame,"
                        f" {long_fps:.0f} FPS",
                        file=sys.stderr,
                    )
    print(f"CPU: {cpu_model()}, {os.cpu_count()} logical; {args.runs} rounds alternating;")
    print(f"null frames path, H.264 768×576, marginal between {args.short} and {args.long}")
    print("frames per stream; median (min–max)")
    print("| tree | streams | pipeline process CPU per frame (ms) | FPS |")
    print("|---|---|---|---|")
    for name in trees:
        for count in counts:
            print(
                f"| {name} | {count} | {spread(cpu_ms[name, count], 3)}"
                f" | {spread(fps[name, count], 0)} |"
            )
    if args.json:
        data = {
            "cpu": cpu_model(),
            "short": args.short,
            "long": args.long,
            "before": str(args.before or ""),
            "device": args.device,
            "cpu_ms_per_frame": {f"{t}x{c}": v for (t, c), v in cpu_ms.items()},
            "fps": {f"{t}x{c}": v for (t, c), v in fps.items()},
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(data, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
