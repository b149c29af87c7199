"""Issue #3's benchmark: every backend/precision/input size usable here against the peer.

For each variant: fidelity (mAP50 against the ONNX Runtime FP32 reference on the first
--fidelity-frames frames), model-only ms and end-to-end FPS over the whole video. The peer
(Ultralytics with its OpenVINO export, scripts/peer/) runs in the same rounds, alternating with
our variants, so machine drift hits both alike. Ratios are taken within a round.

Usage: .venv/bin/python scripts/bench_vs_peer.py [--runs 3] [--peer-python .peer-venv/bin/python]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

from rich.console import Console

from visionrt.backends import BackendOptions
from visionrt.bench import run_bench
from visionrt.bench.reference import collect_detections
from visionrt.cli.bench import parse_variant
from visionrt.export import export_model
from visionrt.fidelity import fidelity
from visionrt.models import demo_model_path
from visionrt.paths import DEMO_VIDEO

ROOT = Path(__file__).resolve().parent.parent


def other_variants(model: str, video: str) -> list[str]:
    """The backends and artifacts outside the main comparison: torch, ONNX Runtime INT8 and
    ONNX Runtime at 512×640."""
    int8 = export_model(model, "onnx-int8", video, 300, fidelity_frames=0, progress=False).path
    return [
        "onnxruntime:fp32:512x640",
        f"onnxruntime:int8:native:{int8}",
        "torch:fp32",
        "torch:bf16",
    ]


def variants(int8_640: Path, int8_512: Path) -> list[str]:
    return [
        "onnxruntime:fp32",
        "openvino:fp32",
        "openvino:bf16+fold",
        "openvino:bf16:512x640+fold",
        "openvino:bf16:512x640+fold+hint=throughput",
        f"openvino:int8:native:{int8_640}+fold+hint=throughput",
        f"openvino:int8:native:{int8_512}+fold+hint=throughput",
    ]


def spread(values: list[float], fmt: str = ".1f") -> str:
    if not values:
        return "—"
    return f"{statistics.median(values):{fmt}} ({min(values):{fmt}}–{max(values):{fmt}})"


def run_peer(python: str, fmt: str, frames: int = 0, f32: bool = False) -> float | None:
    """The peer's end-to-end FPS over the video (its first `frames` frames when > 0); `f32`
    keeps OpenVINO from running bf16 (the peer as on a CPU without BF16)."""
    script = ROOT / "scripts" / "peer" / "ultralytics_e2e.py"
    command = [python, str(script), "--format", fmt, "--workdir", str(ROOT / ".cache" / "peer")]
    command += ["--f32"] if f32 else []
    proc = subprocess.run(
        [*command, "--max-frames", str(frames)],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        print(f"peer failed: {proc.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
        return None
    return float(json.loads(proc.stdout.strip().splitlines()[-1])["fps"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--calls", type=int, default=60, help="model-only calls per round")
    parser.add_argument("--fidelity-frames", type=int, default=200)
    parser.add_argument("--peer-python", default=str(ROOT / ".peer-venv" / "bin" / "python"))
    parser.add_argument("--only", nargs="*", help="variant labels to keep (default: all)")
    parser.add_argument(
        "--others", action="store_true", help="measure torch, ONNX Runtime INT8 and 512×640 instead"
    )
    parser.add_argument("--no-peer", action="store_true")
    parser.add_argument("--json", type=Path, default=ROOT / "docs" / "results" / "vs_peer.json")
    args = parser.parse_args()
    console = Console(stderr=True)
    model, video = str(demo_model_path()), str(DEMO_VIDEO)

    console.print("artifacts: INT8 OpenVINO IRs calibrated on 300 frames of the video")
    int8_640 = export_model(
        model, "openvino-int8", video, 300, fidelity_frames=0, progress=False
    ).path
    int8_512 = export_model(
        model, "openvino-int8", video, 300, imgsz=(512, 640), fidelity_frames=0, progress=False
    ).path
    texts = other_variants(model, video) if args.others else variants(int8_640, int8_512)
    chosen = [parse_variant(v, BackendOptions(), model) for v in texts]
    if args.only:
        chosen = [v for v in chosen if v.label in args.only]

    console.print(f"fidelity on the first {args.fidelity_frames} frames")
    reference = collect_detections(video, model, frames=args.fidelity_frames)
    scores = {}
    for variant in chosen:
        candidate = collect_detections(
            video, variant.model, variant.backend, variant.options, args.fidelity_frames
        )
        scores[variant.label] = fidelity(reference, candidate)
        console.print(f"  {variant.label}: mAP50 {scores[variant.label].map50:.3f}")

    peer_ok = Path(args.peer_python).exists() and not args.no_peer
    peer_fps: list[float] = []
    rounds = []
    for index in range(args.runs):
        console.print(f"round {index + 1}/{args.runs}")
        if peer_ok and (fps := run_peer(args.peer_python, "openvino")) is not None:
            peer_fps.append(fps)
        rounds.append(run_bench(chosen, video, 1, args.calls, 0))

    table = [
        "| variant | fidelity mAP50 | mAP50-95 | model-only ms p50 | end-to-end FPS"
        " | efficiency | vs peer |",
        "|---|---|---|---|---|---|---|",
    ]
    results = []
    for i, variant in enumerate(chosen):
        e2e = [r[i].end_to_end_fps[0] for r in rounds]
        ms = [r[i].model_only_ms_p50[0] for r in rounds]
        eff = [r[i].efficiency.median for r in rounds]
        ratio = [e / p for e, p in zip(e2e, peer_fps, strict=False)] if peer_fps else []
        score = scores[variant.label]
        row = {
            "variant": variant.label,
            "fidelity_map50": score.map50,
            "fidelity_map50_95": score.map50_95,
            "count_match": score.count_match,
            "model_only_ms_p50": ms,
            "end_to_end_fps": e2e,
            "efficiency": eff,
            "vs_peer": ratio,
            "details": rounds[-1][i].details,
        }
        results.append(row)

        table.append(
            f"| {variant.label} | {score.map50:.3f} | {score.map50_95:.3f} |"
            f" {spread(ms)} | {spread(e2e)} | {spread(eff, '.3f')} |"
            f" {spread(ratio, '.2f')}× |"
        )
    table.append(f"| peer: Ultralytics OpenVINO export | — | — | — | {spread(peer_fps)} | — | 1× |")
    print("\n".join(table))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"peer_fps": peer_fps, "variants": results}, indent=2))


if __name__ == "__main__":
    main()
