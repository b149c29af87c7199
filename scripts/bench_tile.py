"""Tiled against full-frame inference on a 4K re-encode of vtest.avi (issue #9): recall of small
people, and cost.

Usage: .venv/bin/python scripts/bench_tile.py [--frames 6] [--tile 640] [--overlap 0.2] [--json F]

The 4K video: a 3840×2160 mosaic of vtest.avi cells (768×576 pedestrians), 5 × 3 cells at their
own size and a bottom band of 6 cells at 0.75, each cell a different moment of the video, encoded
with libx264 (CRF 18) and decoded back: people are 30-180 px tall in a 4K frame. Reference: the
demo detector (ONNX Runtime FP32) on each original cell at its native size, boxes mapped into the
mosaic. Compared with it (IoU >= 0.5, one reference box per detection, both of the model's
classes counted as people; "small" = under 64 px tall): full-frame inference on the 4K frame,
tiles alone, tiles plus the full-frame row (SAHI's default), and, as a ceiling for any tiling,
the detector on each cell cut from the decoded 4K frame. Tiles alone are decoded from the same
call's outputs without the full-frame row; their cost is that call's less one row's share.
Cost: ms per frame (prepare + infer + decode) after one warm-up call, median (min-max) over the
frames, and its ratio to full-frame inference on the same frame (median), which the machine's
drift affects less than absolute times.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import cv2
import numpy as np
import numpy.typing as npt

from visionrt.backends import BackendOptions
from visionrt.hardware import cpu_model
from visionrt.models import demo_model_path
from visionrt.paths import DEMO_VIDEO
from visionrt.preprocess.tile import TileGrid, TileOptions
from visionrt.tasks.detect import DetectTask
from visionrt.tasks.tiled import TiledDetectTask
from visionrt.types import Detections

CANVAS_HW = (2160, 3840)
CELL_HW = (576, 768)
SMALL_PX = 64  # reference boxes shorter than this in the 4K frame (under 11 px in full-frame input)
IOU = 0.5
CEILING = "cells of the 4K frame (ceiling)"


def mosaic_layout() -> list[tuple[int, int, float]]:
    """(x, y, scale) of each cell: 5 × 3 at native size, then 6 at 0.75 in the 432 rows left."""
    cells = [(col * 768, row * 576, 1.0) for row in range(3) for col in range(5)]
    left = (CANVAS_HW[1] - 6 * 576) // 2
    cells += [(left + col * 576, 3 * 576, 0.75) for col in range(6)]
    return cells


def read_vtest() -> list[npt.NDArray[np.uint8]]:
    with av.open(str(DEMO_VIDEO)) as container:
        return [f.to_ndarray(format="bgr24") for f in container.decode(video=0)]


def cell_frames(count: int, total: int) -> list[list[int]]:
    """vtest.avi frame index of each cell in each mosaic frame: cells spread over the video."""
    cells = len(mosaic_layout())
    return [
        [(cell * total // cells + 7 * t) % total for cell in range(cells)] for t in range(count)
    ]


def build_mosaic(video: list[npt.NDArray[np.uint8]], indices: list[int]) -> npt.NDArray[np.uint8]:
    canvas = np.zeros((*CANVAS_HW, 3), np.uint8)
    for (x, y, scale), index in zip(mosaic_layout(), indices, strict=True):
        cell = video[index]
        if scale != 1.0:
            size = (round(CELL_HW[1] * scale), round(CELL_HW[0] * scale))
            cell = cv2.resize(cell, size, interpolation=cv2.INTER_AREA)
        canvas[y : y + cell.shape[0], x : x + cell.shape[1]] = cell
    return canvas


def reencode(frames: list[npt.NDArray[np.uint8]], path: Path) -> list[npt.NDArray[np.uint8]]:
    """Write the 4K frames as H.264 and decode them back, as a real 4K source would arrive."""
    with av.open(str(path), mode="w") as container:
        stream = container.add_stream("libx264", rate=Fraction(10))
        stream.width, stream.height, stream.pix_fmt = CANVAS_HW[1], CANVAS_HW[0], "yuv420p"
        stream.options = {"crf": "18", "preset": "veryfast"}
        for image in frames:
            container.mux(stream.encode(av.VideoFrame.from_ndarray(image, format="bgr24")))
        container.mux(stream.encode(None))
    with av.open(str(path)) as container:
        return [f.to_ndarray(format="bgr24") for f in container.decode(video=0)]


def detect(task: DetectTask, image: npt.NDArray[np.uint8]) -> Detections:
    buffer = task.new_buffer()
    box = task.prepare(image, buffer, None)
    return task.decode(task.infer([buffer])[0], box)


def reference(task: DetectTask, video: list[npt.NDArray[np.uint8]], indices: list[int]):
    """The detector on each original cell at native size, in mosaic pixels."""
    boxes = []
    for (x, y, scale), index in zip(mosaic_layout(), indices, strict=True):
        found = detect(task, video[index])
        boxes.append(found.xyxy * np.float32(scale) + np.float32([x, y, x, y]))
    return np.concatenate(boxes)


def cells_of(task: DetectTask, image: npt.NDArray[np.uint8]) -> Detections:
    """The detector on each cell cut from the decoded 4K frame: what tiles laid exactly on the
    cells would find, a ceiling for any tiling of this mosaic."""
    parts = []
    for x, y, scale in mosaic_layout():
        height, width = round(CELL_HW[0] * scale), round(CELL_HW[1] * scale)
        found = detect(task, np.ascontiguousarray(image[y : y + height, x : x + width]))
        parts.append(
            Detections(found.xyxy + np.float32([x, y, x, y]), found.confidence, found.class_id)
        )
    return Detections(
        np.concatenate([p.xyxy for p in parts]),
        np.concatenate([p.confidence for p in parts]),
        np.concatenate([p.class_id for p in parts]),
    )


def match(truth: npt.NDArray[np.float32], found: Detections) -> npt.NDArray[np.bool_]:
    """Which reference boxes a detection matches (IoU >= 0.5, greedy, best score first)."""
    hit = np.zeros(len(truth), np.bool_)
    if not len(truth) or not len(found):
        return hit
    low = np.maximum(found.xyxy[:, None, :2], truth[None, :, :2])
    high = np.minimum(found.xyxy[:, None, 2:], truth[None, :, 2:])
    inter = np.prod(np.clip(high - low, 0, None), axis=2)
    area_f = np.prod(found.xyxy[:, 2:] - found.xyxy[:, :2], axis=1)[:, None]
    area_t = np.prod(truth[:, 2:] - truth[:, :2], axis=1)[None, :]
    iou = inter / (area_f + area_t - inter)
    for row in np.argsort(-found.confidence, kind="stable"):
        candidates = np.where(hit, -1.0, iou[row])
        best = int(candidates.argmax())
        if candidates[best] >= IOU:
            hit[best] = True
    return hit


def without_full_frame(output: npt.NDArray[np.float32], grid: TileGrid):
    """The same run's outputs and grid, the full-frame row left out."""
    tiles = TileGrid(grid.source_hw, grid.windows[:-1], grid.letterboxes[:-1], False)
    return output[:-1], tiles


class Tally:
    """Recall (all and small reference boxes), precision and ms per frame of one method."""

    def __init__(self) -> None:
        self.hits: list[npt.NDArray[np.bool_]] = []
        self.small: list[npt.NDArray[np.bool_]] = []
        self.found = self.matched = 0
        self.ms: list[float] = []
        self.ratio: list[float] = []

    def add(
        self, truth: npt.NDArray[np.float32], found: Detections, ms: float, full_ms: float
    ) -> None:
        """One frame: `ms` this method's time, `full_ms` full-frame inference's on that frame."""
        hit = match(truth, found)
        self.hits.append(hit)
        self.small.append((truth[:, 3] - truth[:, 1]) < SMALL_PX)
        self.found += len(found)
        self.matched += int(hit.sum())
        self.ms.append(ms)
        self.ratio.append(ms / full_ms)

    def summary(self) -> dict[str, Any]:
        hits, small = np.concatenate(self.hits), np.concatenate(self.small)
        return {
            "recall": float(hits.mean()),
            "recall_small": float(hits[small].mean()) if small.any() else float("nan"),
            "recall_large": float(hits[~small].mean()) if (~small).any() else float("nan"),
            "precision": self.matched / self.found if self.found else float("nan"),
            "ms_median": statistics.median(self.ms),
            "ms_min": min(self.ms),
            "ms_max": max(self.ms),
            "x_full_frame": statistics.median(self.ratio),
        }


def compare_batching(
    tiled: TiledDetectTask, plain: DetectTask, buffer: npt.NDArray[Any], rounds: int
) -> dict[str, float]:
    """ms per frame of the same prepared rows run as one batched call and as one call per row,
    alternating within each round so the machine's drift hits both."""
    one_call, per_row = [], []
    for _ in range(rounds):
        start = time.perf_counter()
        tiled.infer([buffer])
        one_call.append((time.perf_counter() - start) * 1e3)
        start = time.perf_counter()
        for row in range(len(buffer)):
            plain.infer([buffer[row : row + 1]])
        per_row.append((time.perf_counter() - start) * 1e3)
    return {
        "one_call_ms": statistics.median(one_call),
        "per_row_calls_ms": statistics.median(per_row),
        "ratio": statistics.median(a / b for a, b in zip(one_call, per_row, strict=True)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=6)
    parser.add_argument("--tile", type=int, default=640)
    parser.add_argument("--overlap", type=float, default=0.2)
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the batching A/B")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    tiling = TileOptions(tile=args.tile, overlap=args.overlap, full_frame=True)
    model = demo_model_path()
    video = read_vtest()
    plan = cell_frames(args.frames, len(video))
    with tempfile.TemporaryDirectory(prefix="bench-tile-") as tmp:
        frames = reencode([build_mosaic(video, p) for p in plan], Path(tmp) / "vtest-4k.mp4")
        options = BackendOptions(threads=args.threads, cache_dir=Path(tmp))
        plain = DetectTask(model, "onnxruntime", options)
        tiled = TiledDetectTask(model, "onnxruntime", options, tiling=tiling, source_hw=CANVAS_HW)
        plain.warm_up(1)
        tiled.warm_up(1)
        names = ("full frame", "tiles", "tiles + full frame", CEILING)
        tallies = {name: Tally() for name in names}
        buffer = tiled.new_buffer()
        grid = None
        heights: list[npt.NDArray[np.float32]] = []
        row_ms: list[float] = []
        for index, (image, cells) in enumerate(zip(frames, plan, strict=True)):
            truth = reference(plain, video, cells)
            heights.append(truth[:, 3] - truth[:, 1])
            start = time.perf_counter()
            whole = detect(plain, image)
            full_ms = (time.perf_counter() - start) * 1e3
            tallies["full frame"].add(truth, whole, full_ms, full_ms)
            start = time.perf_counter()
            grid = tiled.prepare(image, buffer, grid)
            prepared = time.perf_counter()
            output = tiled.infer([buffer])[0]
            inferred = time.perf_counter()
            found = tiled.decode(output, grid)
            done = time.perf_counter()
            tiled_ms, prepare_ms = (done - start) * 1e3, (prepared - start) * 1e3
            tallies["tiles + full frame"].add(truth, found, tiled_ms, full_ms)
            row_ms.append((inferred - prepared) * 1e3 / len(grid))
            alone = tiled.decode(*without_full_frame(output, grid))
            tallies["tiles"].add(truth, alone, tiled_ms - row_ms[-1], full_ms)
            start = time.perf_counter()
            ceiling = cells_of(plain, image)
            tallies[CEILING].add(truth, ceiling, (time.perf_counter() - start) * 1e3, full_ms)
            print(
                f"frame {index}: {len(truth)} reference people; found {len(whole)} full frame,"
                f" {len(alone)} tiles, {len(found)} tiles + full frame; full frame {full_ms:.0f}"
                f" ms; tiled prepare {prepare_ms:.0f} ms, infer"
                f" {1e3 * (inferred - prepared):.0f} ms, decode {1e3 * (done - inferred):.1f} ms",
                flush=True,
            )
        batching = compare_batching(tiled, plain, buffer, args.rounds)
        describe = tiled.describe()
        plain.close()
        tiled.close()
    rows = {name: tally.summary() for name, tally in tallies.items()}
    people = sum(len(h) for h in tallies["full frame"].hits)
    small = int(sum(s.sum() for s in tallies["full frame"].small))
    head = (
        f"{args.frames} frames of 3840x2160, {people} reference people ({small} under"
        f" {SMALL_PX} px tall); tile {args.tile}, overlap {args.overlap},"
        f" {describe['tiling']['rows_per_frame']} rows per frame in one call,"
        f" {statistics.median(row_ms):.0f} ms per row; {cpu_model()}"
    )
    print(head)
    tall = np.concatenate(heights)
    print(
        f"reference heights (px): min {tall.min():.0f}, quartiles"
        f" {' '.join(f'{q:.0f}' for q in np.percentile(tall, [25, 50, 75]))}, max {tall.max():.0f}"
    )
    lines = [
        "| method | recall | recall, small | recall, rest | precision"
        " | ms/frame median (min–max) | × full frame |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, row in rows.items():
        lines.append(
            f"| {name} | {row['recall']:.3f} | {row['recall_small']:.3f} |"
            f" {row['recall_large']:.3f} | {row['precision']:.3f} | {row['ms_median']:.0f}"
            f" ({row['ms_min']:.0f}–{row['ms_max']:.0f}) | {row['x_full_frame']:.1f} |"
        )
    print("\n".join(lines))
    print(
        f"batching A/B ({args.rounds} rounds): {len(buffer)} rows in one call"
        f" {batching['one_call_ms']:.0f} ms, one call per row {batching['per_row_calls_ms']:.0f}"
        f" ms, ratio {batching['ratio']:.2f}"
    )
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "summary": head,
                    "methods": rows,
                    "batching": batching,
                    "describe": describe,
                    "args": vars(args),
                },
                indent=2,
                default=str,
            )
        )


if __name__ == "__main__":
    main()
