"""Frame ranges of a long file: how fast a reader reaches frame N by seeking against decoding
every frame before it, and a `--ray local` run of one long file split over two workers against
the same run unsplit (`cluster.range_frames=0`) and a plain run, alternating.

    python scripts/bench_ranges.py --copies 4 --runs 3            # both parts
    python scripts/bench_ranges.py --copies 4 --runs 3 --only seek

The long file is vtest.avi `--copies` times over, encoded once to H.264 (a keyframe every 250
frames, as a camera's recorder writes) in a temporary folder. On a 2-core machine the two
1-CPU workers share its cores with the driver and Ray: the split run is compared with the
unsplit run of the same workers (one of them idle), not claimed as a speed-up over one
process, which overlaps decoding and inference on both cores.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from fractions import Fraction
from pathlib import Path

from visionrt.hardware import cpu_model

ROOT = Path(__file__).resolve().parent.parent
VIDEO = "/usr/share/doc/opencv-doc/examples/data/vtest.avi"


def long_video(folder: Path, copies: int) -> Path:
    import av

    path = folder / f"vtest_x{copies}.mp4"
    with av.open(str(path), mode="w") as out:
        stream = out.add_stream("libx264", rate=Fraction(10))
        stream.width, stream.height, stream.pix_fmt = 768, 576, "yuv420p"
        stream.options = {"g": "250", "preset": "veryfast", "crf": "23"}
        for _ in range(copies):
            with av.open(VIDEO) as source:
                for frame in source.decode(video=0):
                    frame.pts = None
                    out.mux(stream.encode(frame.reformat(format="yuv420p")))
        out.mux(stream.encode(None))
    return path


def first_frame_seconds(path: Path, start: int, seek: bool) -> float:
    """Seconds from opening the file to holding frame `start` (seeking, or decoding there)."""
    import visionrt.sources.frame_index as frame_index
    from visionrt.sources.base import SourceOptions
    from visionrt.sources.video import VideoSource

    saved = frame_index.index_frames
    if not seek:
        frame_index.index_frames = lambda *_args: "decoding, for the comparison"  # type: ignore[assignment]
    try:
        began = time.perf_counter()
        source = VideoSource(str(path), 0, SourceOptions(start_frame=start), "file")
        frame = next(iter(source.frames()))
        seconds = time.perf_counter() - began
        source.close()
    finally:
        frame_index.index_frames = saved
    assert frame.index == start, (frame.index, start)
    return seconds


def bench_seek(path: Path, frames: int, runs: int) -> dict[str, dict[str, list[float]]]:
    from visionrt.sources.frame_index import index_frames

    began = time.perf_counter()
    index = index_frames(str(path))
    print(f"index of {frames} frames: {time.perf_counter() - began:.3f} s", flush=True)
    assert not isinstance(index, str), index
    rows: dict[str, dict[str, list[float]]] = {}
    for start in (frames // 4, frames // 2, frames - 10):
        row: dict[str, list[float]] = {"seek": [], "decode": []}
        for run in range(runs):
            for seek in (True, False) if run % 2 == 0 else (False, True):
                row["seek" if seek else "decode"].append(first_frame_seconds(path, start, seek))
        rows[str(start)] = row
        print(start, {k: [round(v, 3) for v in vs] for k, vs in row.items()}, flush=True)
    return rows


def run_once(path: Path, mode: str, out: Path) -> dict[str, object]:
    extra = {
        "plain": [],
        "split": ["--ray", "local", "--workers", "2", "--worker-cpus", "1"],
        "unsplit": ["--ray", "local", "--workers", "2", "--worker-cpus", "1",
                    "--set", "cluster.range_frames=0"],
    }[mode]  # fmt: skip
    command = [
        sys.executable, "-m", "visionrt.cli.main", "run", f"long={path}", *extra, "--no-video",
        "--out", str(out), "--quiet",
    ]  # fmt: skip
    began = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ})
    wall = time.perf_counter() - began
    if done.returncode:
        raise SystemExit(done.stderr)
    summary = json.loads((out / "summary.json").read_text())
    numbers = [json.loads(line)["frame"] for line in (out / "long.jsonl").open()]
    return {
        "wall_s": round(wall, 2),
        "frames_out": summary["frames_out"],
        "in_order_once": numbers == list(range(len(numbers))),
        "accounted": summary["accounted"],
        "notes": [n for n in summary.get("notes", []) if n.startswith("long")],
        "frames_by_worker": summary.get("cluster", {}).get("frames_by_worker", {}),
    }


def bench_cluster(path: Path, runs: int, work: Path) -> dict[str, list[dict[str, object]]]:
    modes = ["plain", "split", "unsplit"]
    rows: dict[str, list[dict[str, object]]] = {mode: [] for mode in modes}
    for run in range(runs):
        for mode in modes[run % 3 :] + modes[: run % 3]:  # rotate the order
            row = run_once(path, mode, work / f"{mode}{run}")
            rows[mode].append(row)
            print(mode, run, row, flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=4, help="vtest.avi's 795 frames, N times")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--only", choices=["seek", "cluster"], default=None)
    parser.add_argument("--result", default=str(ROOT / "docs/results/frame_ranges.json"))
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="visionrt-ranges-"))
    path = long_video(work, args.copies)
    frames = 795 * args.copies
    report: dict[str, object] = {
        "machine": f"{cpu_model()}, {os.cpu_count()} vCPU",
        "video": f"vtest.avi x{args.copies}, H.264 768x576, keyframe every 250, {frames} frames",
    }
    if args.only in (None, "seek"):
        seek = bench_seek(path, frames, args.runs)
        report["first_frame_s"] = {
            start: {k: statistics.median(v) for k, v in row.items()} for start, row in seek.items()
        }
        report["first_frame_runs_s"] = seek
    if args.only in (None, "cluster"):
        cluster = bench_cluster(path, args.runs, work)
        report["wall_s_median"] = {
            mode: statistics.median(float(r["wall_s"]) for r in rows)  # type: ignore[arg-type]
            for mode, rows in cluster.items()
        }
        report["runs"] = cluster
    Path(args.result).write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps({k: v for k, v in report.items() if k != "runs"}, indent=1))


if __name__ == "__main__":
    main()
