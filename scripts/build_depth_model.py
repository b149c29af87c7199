"""Build the Depth Anything v2-Small architecture with random weights and export it to ONNX.

No pretrained Depth Anything can be downloaded here, so this builds the v2-Small layout from a
config written in code (transformers' `DepthAnythingForDepthEstimation` on a `Dinov2Config`:
12 layers, hidden 384, 6 heads, patch 14, out_indices [3, 6, 9, 12], neck [48, 96, 192, 384],
fusion 64, reassemble factors [4, 2, 1, 0.5], relative depth), fills it with deterministic random
weights (torch.manual_seed; the last convolution scaled so the output has a trained model's
order of magnitude, see `scale_output`) and exports it: opset 18 (native LayerNormalization;
lower opsets split it into ops that overflow in FP16), input `pixel_values` [batch, 3, 14*ph,
14*pw] float32 with dynamic batch, height and width (multiples of 14; exported for 28 to 3584),
output `predicted_depth` [batch, H, W] relative inverse depth. Nothing is downloaded.

The result is ARCHITECTURE-ONLY (RANDOM WEIGHTS): right shapes, ops and cost, meaningless depth.
Its ONNX metadata says so (`architecture_only=true`), and visionrt labels it wherever it shows
it. Users bring real weights (an export of a trained checkpoint); the code path is the same.

Usage: .venv/bin/python scripts/build_depth_model.py [--out FILE] [--force] [--seed 0]
Default output: ~/.cache/visionrt/models/depth_anything_v2_small_arch_only.onnx; an existing
file is kept unless --force. Needs the `depth-build` extra: pip install -e '.[depth-build]'.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from visionrt.models import depth_model_target

OPSET = 18
PATCH = 14
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
# Sizes the export is checked at against torch: non-square and square (the position-embedding
# interpolation has a square shortcut in eager mode; the export must take the general path).
CHECK_SIZES = ((266, 350), (364, 364))
TOLERANCE = 1e-4  # max |ORT - torch|, relative to max |torch|
OUTPUT_MAX = 10.0  # the order of a trained model's relative inverse depth


def build_model(seed: int) -> Any:
    """The v2-Small architecture (values of depth-anything/Depth-Anything-V2-Small-hf's
    config.json), eager attention (plain MatMul/Softmax in the graph), random weights."""
    import torch
    from transformers import DepthAnythingConfig, DepthAnythingForDepthEstimation, Dinov2Config

    backbone = Dinov2Config(
        hidden_size=384,
        num_hidden_layers=12,
        num_attention_heads=6,
        mlp_ratio=4,
        patch_size=PATCH,
        image_size=518,
        out_indices=[3, 6, 9, 12],
        reshape_hidden_states=False,
    )
    config = DepthAnythingConfig(
        backbone_config=backbone,
        patch_size=PATCH,
        reassemble_hidden_size=384,
        reassemble_factors=[4, 2, 1, 0.5],
        neck_hidden_sizes=[48, 96, 192, 384],
        fusion_hidden_size=64,
        head_in_index=-1,
        head_hidden_size=32,
        depth_estimation_type="relative",
    )
    torch.manual_seed(seed)
    model = DepthAnythingForDepthEstimation(config).eval()
    model.set_attn_implementation("eager")
    scale_output(model)
    return model


def scale_output(model: Any) -> float:
    """Scale the last convolution (weights and bias) so the output's max is OUTPUT_MAX on a
    fixed random input; returns the factor.

    transformers' initialization (std 0.02) leaves the output near 1e-4, most of it below
    FP16's smallest normal number (6e-5) and rounded to 0 in the JSONL's 4 decimals; a trained
    model's relative output reaches ~10. ReLU is positively homogeneous, so this changes only
    the output's scale: still the same architecture with random weights."""
    import torch

    pixels = torch.from_numpy(
        np.random.default_rng(0).standard_normal((1, 3, 266, 350), np.float32)
    )
    with torch.no_grad():
        peak = float(model(pixel_values=pixels).predicted_depth.max())
        factor = OUTPUT_MAX / peak
        model.head.conv3.weight.mul_(factor)
        model.head.conv3.bias.mul_(factor)
    return factor


def exportable(model: Any) -> Any:
    """`model` as a module from pixel values to depth whose output size follows the input.

    transformers' head computes the upsampling size with `int(patch_height * patch_size)`, which
    torch.export bakes into a constant (the exported output then keeps the example's size for
    every input); this forward is the same computation with the size kept symbolic. The
    backbone, neck and weights are the model's own, and the export is checked against the
    unmodified model's output."""
    import torch
    import torch.nn.functional as F

    class DepthAnythingExport(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
            net = self.model
            features = net.backbone.forward_with_filtered_kwargs(pixel_values).feature_maps
            patch_h, patch_w = pixel_values.shape[2] // PATCH, pixel_values.shape[3] // PATCH
            hidden = net.neck(features, patch_h, patch_w)
            head = net.head
            depth = head.conv1(hidden[head.head_in_index])
            depth = F.interpolate(
                depth, size=(patch_h * PATCH, patch_w * PATCH), mode="bilinear", align_corners=True
            )
            depth = head.conv3(head.activation1(head.conv2(depth)))
            return (head.activation2(depth) * head.max_depth).squeeze(1)

    return DepthAnythingExport().eval()


def export(model: Any, out: Path, seed: int) -> None:
    import onnx
    import torch
    import transformers

    module = exportable(model)
    # Batch 2 in the example: torch.export specializes axes of size 0 or 1.
    example = torch.randn(2, 3, 266, 350)
    patch_h = torch.export.Dim("ph", min=2, max=256)
    patch_w = torch.export.Dim("pw", min=2, max=256)
    dynamic = {
        "pixel_values": {
            0: torch.export.Dim("batch", min=1, max=64),
            2: PATCH * patch_h,
            3: PATCH * patch_w,
        }
    }
    program = torch.onnx.export(
        module,
        (example,),
        input_names=["pixel_values"],
        output_names=["predicted_depth"],
        dynamic_shapes=dynamic,
        opset_version=OPSET,
        dynamo=True,
    )
    tmp = out.with_name(f".{out.name}.tmp")
    program.save(str(tmp), external_data=False)  # one file: ~99 MB, far below protobuf's 2 GB
    proto = onnx.load(str(tmp))
    meta = {
        "architecture_only": "true",
        "weights": f"random (torch.manual_seed({seed}); last convolution scaled to an output max"
        f" of {OUTPUT_MAX:g}): not a trained model",
        "model": "Depth Anything v2-Small architecture (DINOv2-S + DPT head)",
        "depth": "relative inverse depth",
        "patch_size": str(PATCH),
        "mean": str(list(MEAN)),
        "std": str(list(STD)),
        "short_side": "518",
        # visionrt's spec reader takes a dynamic export's default size from `imgsz`.
        "imgsz": "[518, 518]",
        "built_with": f"transformers {transformers.__version__}, torch {torch.__version__}",
    }
    del proto.metadata_props[:]
    for key, value in meta.items():
        proto.metadata_props.add(key=key, value=value)
    proto.doc_string = "Depth Anything v2-Small: architecture-only (random weights)"
    onnx.checker.check_model(proto)
    opset = next(o.version for o in proto.opset_import if o.domain in ("", "ai.onnx"))
    ops = {node.op_type for node in proto.graph.node}
    if opset < 17 or "LayerNormalization" not in ops:
        raise SystemExit(f"export has opset {opset} without native LayerNormalization")
    onnx.save(proto, str(tmp))
    tmp.replace(out)


def verify(model: Any, out: Path) -> float:
    """Max |ONNX Runtime - torch| over CHECK_SIZES, relative to max |torch|; prints each."""
    import onnxruntime as ort
    import torch

    session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    worst = 0.0
    for height, width in CHECK_SIZES:
        pixels = np.random.default_rng(0).standard_normal((1, 3, height, width), np.float32)
        with torch.no_grad():
            reference = model(pixel_values=torch.from_numpy(pixels)).predicted_depth.numpy()
        got = session.run(None, {"pixel_values": pixels})[0]
        if got.shape != reference.shape:
            raise SystemExit(
                f"ONNX output {got.shape} at {height}x{width}: expected {reference.shape}"
            )
        diff = float(np.abs(got - reference).max())
        scale = float(np.abs(reference).max()) or 1.0
        print(
            f"  {height}x{width}: max |ORT - torch| = {diff:.3g}"
            f" (output max {scale:.3g}; relative {diff / scale:.3g})"
        )
        worst = max(worst, diff / scale)
    return worst


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None, help="ONNX file to write")
    parser.add_argument("--force", action="store_true", help="rebuild an existing file")
    parser.add_argument("--seed", type=int, default=0, help="torch.manual_seed for the weights")
    args = parser.parse_args(argv)
    out = (args.out or depth_model_target()).expanduser()
    if out.is_file() and not args.force:
        print(f"depth model present: {out} (architecture-only, random weights; --force rebuilds)")
        return 0
    out.parent.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    print(
        "building Depth Anything v2-Small: architecture-only (random weights), nothing downloaded"
    )
    model = build_model(args.seed)
    export(model, out, args.seed)
    print(
        f"exported {out} ({out.stat().st_size / 1e6:.0f} MB, opset {OPSET}) in"
        f" {time.perf_counter() - started:.0f} s; checking against torch:"
    )
    worst = verify(model, out)
    if worst > TOLERANCE:
        out.unlink()
        print(f"export differs from torch by {worst:.3g} (relative) > {TOLERANCE}: removed")
        return 1
    print(f"ok: ONNX Runtime matches torch (worst relative difference {worst:.3g})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
