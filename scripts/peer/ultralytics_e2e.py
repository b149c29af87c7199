"""The peer's end-to-end FPS: Ultralytics `predict` over a video, model load excluded.

Runs inside the peer's environment (scripts/peer/setup.sh). Prints one JSON line.
Usage: python ultralytics_e2e.py --format openvino|onnx|pt [--video V] [--workdir DIR] [--f32]

`--f32` makes OpenVINO run float32 where it would pick bf16 by itself: the peer as it runs on a
CPU without BF16 (what `VISIONRT_HIDE_CPU_FEATURES=avx512_bf16,amx_bf16` does for visionrt).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import time
from pathlib import Path

VIDEO = "/usr/share/doc/opencv-doc/examples/data/vtest.avi"


def force_openvino_f32() -> None:
    """Every model Ultralytics compiles with OpenVINO gets INFERENCE_PRECISION_HINT f32."""
    import openvino as ov

    compile_model = ov.Core.compile_model

    def compile_f32(self, model, device_name=None, config=None, **kwargs):  # type: ignore[no-untyped-def]
        config = {**(config or {}), "INFERENCE_PRECISION_HINT": "f32"}
        compiled = compile_model(self, model, device_name, config, **kwargs)
        assert compiled.get_property("INFERENCE_PRECISION_HINT").get_type_name() == "f32"
        return compiled

    ov.Core.compile_model = compile_f32


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--format", default="openvino", choices=["openvino", "onnx", "pt"])
    parser.add_argument("--video", default=VIDEO)
    parser.add_argument("--workdir", default=".cache/peer")
    parser.add_argument(
        "--threads", type=int, default=0, help="torch threads for .pt (0: its default)"
    )
    parser.add_argument("--max-frames", type=int, default=0, help="stop after N frames (0: all)")
    parser.add_argument("--f32", action="store_true", help="OpenVINO in float32, not bf16")
    args = parser.parse_args()
    if args.f32:
        force_openvino_f32()

    import torch
    from ultralytics import YOLO

    if args.threads:
        torch.set_num_threads(args.threads)
    spec = importlib.util.find_spec("fall_detection")
    assert spec is not None
    assert spec.submodule_search_locations
    source = Path(next(iter(spec.submodule_search_locations))) / "models" / "best.pt"
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    weights = work / "best.pt"
    if not weights.exists():
        shutil.copy(source, weights)
    if args.format == "pt":
        target = str(weights)
    elif args.format == "onnx":
        target = str(work / "best.onnx")
        if not Path(target).exists():
            YOLO(str(weights)).export(format="onnx")
    else:
        target = str(work / "best_openvino_model")
        if not Path(target).exists():
            YOLO(str(weights)).export(format="openvino")
    model = YOLO(target, task="detect")
    model.predict(source=args.video, max_det=300, verbose=False, stream=False, vid_stride=200)
    frames = 0
    started = time.perf_counter()
    for _ in model.predict(source=args.video, stream=True, verbose=False):
        frames += 1
        if frames == args.max_frames:
            break
    seconds = time.perf_counter() - started
    print(
        json.dumps(
            {
                "peer": f"ultralytics-{args.format}",
                "frames": frames,
                "seconds": seconds,
                "fps": frames / seconds,
            }
        )
    )


if __name__ == "__main__":
    main()
