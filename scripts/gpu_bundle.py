"""Pack what the GPU check needs on a machine with no internet into `.gpu/` (ignored by git,
carried by the device call): PyAV's cp312 wheel, the demo detector with its float32 weights
stored as float16 (restored to float32 there), and the first 300 frames of vtest.avi as H.264.

Usage: .venv/bin/python scripts/gpu_bundle.py [--out .gpu] [--before COMMIT]
       (then scripts/gpu_check.sh there). `--before` adds that commit's src/ as .gpu/before/src
       (~2 MB): the check's streams steps then run it beside the checkout in the same call, the
       baseline a figure needs (machines of one kind differ by up to 3× on the host side).

64 MiB travel in all (../shared/GPU.md): the wheel is ~35 MB, the halved model ~22 MB, the
clip ~2.6 MB, the project ~3 MB.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from visionrt.models import demo_model_path
from visionrt.paths import DEMO_VIDEO


def halve_model(source: Path, target: Path) -> None:
    """float32 initializers stored as float16 (a name suffix marks them); restore_model undoes
    it. The graph itself is untouched, so the restored file runs exactly as a float32 model."""
    proto = onnx.load(str(source))
    for init in proto.graph.initializer:
        if init.data_type == onnx.TensorProto.FLOAT and init.name:
            array = numpy_helper.to_array(init).astype(np.float16)
            init.CopyFrom(numpy_helper.from_array(array, init.name + "__fp16"))
    onnx.save(proto, str(target))


def clip(source: Path, target: Path, frames: int) -> None:
    import av

    with av.open(str(source)) as reader, av.open(str(target), "w") as writer:
        stream_in = reader.streams.video[0]
        stream = writer.add_stream("libx264", rate=stream_in.average_rate or 10)
        stream.width, stream.height = stream_in.width, stream_in.height
        stream.pix_fmt = "yuv420p"
        for index, frame in enumerate(reader.decode(stream_in)):
            if index >= frames:
                break
            writer.mux(stream.encode(frame.reformat(format="yuv420p")))
        writer.mux(stream.encode(None))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(".gpu"))
    parser.add_argument("--frames", type=int, default=300)
    parser.add_argument("--before", default="", help="a commit whose src/ is the baseline")
    args = parser.parse_args()
    out: Path = args.out
    if args.before:
        before = out / "before"
        subprocess.run(["rm", "-rf", str(before)], check=True)
        before.mkdir(parents=True)
        archive = subprocess.run(
            ["git", "archive", args.before, "src"], check=True, capture_output=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(before)], input=archive, check=True)
        commit = subprocess.run(
            ["git", "rev-parse", args.before], check=True, capture_output=True, text=True
        ).stdout
        (before / "COMMIT").write_text(commit)  # the check says what its baseline was
    (out / "whl").mkdir(parents=True, exist_ok=True)
    if not list((out / "whl").glob("av-*.whl")):
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
             "--python-version", "3.12", "--implementation", "cp",
             "--platform", "manylinux_2_28_x86_64", "-d", str(out / "whl"), "av"],
            check=True,
        )  # fmt: skip
    model = out / "demo_fp16_weights.onnx"
    if not model.exists():
        halve_model(demo_model_path(), model)
    video = out / "vtest.avi"
    if not video.exists():
        clip(DEMO_VIDEO, video, args.frames)
    total = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    print(f"{out}: {total / 2**20:.1f} MiB")


if __name__ == "__main__":
    main()
