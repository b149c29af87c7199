"""The seed scenario with depth on 1 frame in N (`--depth-every N`): what it buys and what it
costs. `rgb` (detect + depth), `slam1`, `slam2` (detect) are the demo video three times, each run
its own process with the plans this machine has cached (the detector's, and the depth model's
when `tune --depth` made one), rounds alternating the order of the N values.

Bought: FPS per camera (summary.json: each source's frames over the run's seconds). Cost: on the
rgb camera, each detection's distance against the same detection's in the N = 1 run of the same
round (same frames, same boxes: the detector is the same), relative error |d_N − d_1| / |d_1|,
over the frames whose map was held (`depth.from` in the JSONL) and over all. With the
architecture-only depth model (random weights) the distances are plumbing, not accuracy: the
error says how far a held map is from the frame's own for that model, not for a trained one.

With `--track`, a tracked object keeps the distance measured on it on the map's own frame
(the held map has other things where its box moved to).

Usage: .venv/bin/python scripts/bench_depth_every.py [--every 1,2,3,5] [--frames 150]
       [--runs 3] [--track] [--json docs/results/depth_every.json]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench_plan import spread  # scripts/ is on the path of a script run from it

from visionrt.hardware import cpu_model
from visionrt.models import depth_model_path
from visionrt.paths import DEMO_VIDEO

ROOT = Path(__file__).resolve().parent.parent
VISIONRT = str(Path(sys.executable).parent / "visionrt")


def seed_run(every: int, frames: int, track: bool) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """One run of the seed scenario with `--depth-every every` (and `--track`): its summary and
    the rgb camera's JSONL lines."""
    video = str(DEMO_VIDEO)
    with tempfile.TemporaryDirectory() as out:
        command = [
            VISIONRT, "run", f"rgb={video}", f"slam1={video}", f"slam2={video}",
            "--depth", str(depth_model_path()), "--depth-on", "rgb",
            "--depth-every", str(every), "--max-frames", str(frames),
            "--no-video", "-o", out, "-q", "--json", "--audit", "0",
            *(["--track"] if track else []),
        ]  # fmt: skip
        proc = subprocess.run(command, capture_output=True, text=True)
        if proc.returncode != 0:
            sys.exit(f"{' '.join(command)}: exit {proc.returncode}: {proc.stderr[-400:]}")
        summary = json.loads(proc.stdout[proc.stdout.index("{") :])
        with (Path(out) / "detections.jsonl").open(encoding="utf-8") as lines:
            rows = [row for line in lines if (row := json.loads(line))["source"] == "rgb"]
    return summary, rows


def distance_errors(
    rows: list[dict[str, Any]], reference: list[dict[str, Any]]
) -> tuple[list[float], list[float]]:
    """Relative distance errors against `reference`'s, detection by detection on frames whose
    boxes are the same: (on frames with a held map, on every frame)."""
    theirs = {row["frame"]: row for row in reference}
    held: list[float] = []
    every: list[float] = []
    for row in rows:
        other = theirs.get(row["frame"])
        if other is None or len(other["detections"]) != len(row["detections"]):
            continue
        stale = "from" in (row.get("depth") or {})
        for mine, ref in zip(row["detections"], other["detections"], strict=True):
            if mine["xyxy"] != ref["xyxy"]:
                continue
            got, want = mine.get("distance"), ref.get("distance")
            if got is None or want is None or not want or not math.isfinite(got):
                continue
            error = abs(got - want) / abs(want)
            every.append(error)
            if stale:
                held.append(error)
    return held, every


def camera_fps(summary: dict[str, Any]) -> dict[str, float]:
    return {row["name"]: float(row.get("fps", 0.0)) for row in summary["sources"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--every", default="1,2,3,5")
    parser.add_argument("--frames", type=int, default=150)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--track", action="store_true", help="track: a tracked object keeps its distance"
    )
    parser.add_argument("--json", type=Path, default=ROOT / "docs" / "results" / "depth_every.json")
    args = parser.parse_args()
    values = sorted({int(n) for n in args.every.split(",")})
    if values[0] != 1:
        values.insert(0, 1)  # the reference the errors are measured against
    fps: dict[int, list[dict[str, float]]] = {n: [] for n in values}
    errors: dict[int, dict[str, list[float]]] = {n: {"held": [], "all": []} for n in values}
    notes: list[str] = []
    for index in range(args.runs):
        order = values if index % 2 == 0 else values[::-1]
        rows_of: dict[int, list[dict[str, Any]]] = {}
        for every in order:
            summary, rows = seed_run(every, args.frames, args.track)
            fps[every].append(camera_fps(summary))
            rows_of[every] = rows
            notes = summary.get("notes", notes)
            per = ", ".join(f"{k} {v:.1f}" for k, v in camera_fps(summary).items())
            print(f"round {index + 1} every {every}: {per} FPS", file=sys.stderr)
        for every in values[1:]:
            held, every_frame = distance_errors(rows_of[every], rows_of[1])
            errors[every]["held"] += held
            errors[every]["all"] += every_frame
    table: dict[str, Any] = {
        "cpu": cpu_model(),
        "frames": args.frames,
        "runs": args.runs,
        "track": args.track,
        "depth_model": str(depth_model_path()),
        "notes": notes,
        "rows": {},
    }
    for every in values:
        cameras = sorted(fps[every][0])
        row: dict[str, Any] = {c: [f[c] for f in fps[every]] for c in cameras}
        line = " · ".join(f"{c} {spread(row[c], '.1f')}" for c in cameras)
        if every > 1:
            held, every_frame = errors[every]["held"], errors[every]["all"]
            row["distance_error_held"] = _quantiles(held)
            row["distance_error_all"] = _quantiles(every_frame)
            line += (
                f" · distance error, held maps: median {_q(held, 0.5)}, p90 {_q(held, 0.9)}"
                f" ({len(held)} detections); all frames: median {_q(every_frame, 0.5)}"
            )
        print(f"every {every}: FPS per camera {line}")
        table["rows"][str(every)] = row
    args.json.write_text(json.dumps(table, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {args.json}")


def _quantiles(values: list[float]) -> dict[str, float | int]:
    if not values:
        return {"count": 0}
    cuts = statistics.quantiles(values, n=10) if len(values) > 1 else [values[0]] * 9
    return {"count": len(values), "median": statistics.median(values), "p90": cuts[8]}


def _q(values: list[float], q: float) -> str:
    if not values:
        return "—"
    if q == 0.5:
        return f"{statistics.median(values):.3f}"
    return f"{statistics.quantiles(values, n=10)[8]:.3f}" if len(values) > 1 else f"{values[0]:.3f}"


if __name__ == "__main__":
    main()
