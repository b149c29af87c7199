"""ONNX artifacts for ONNX Runtime: FP16 weights with FP32 IO, static INT8 QDQ; `.pt` → ONNX."""

from __future__ import annotations

import importlib.util
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from visionrt.errors import BackendUnavailable, ModelLoadError
from visionrt.export.calibration import CalibrationSet, OrtCalibrationReader
from visionrt.export.graph import head_nodes, onnx_view

# MinMax keeps every intermediate tensor of every calibration frame (~100 MB a frame for YOLOv8s
# at 640) unless ranges are merged in strides. Not `CalibMaxIntermediateOutputs`: in onnxruntime
# 1.31 it drops each full chunk without merging its ranges (calibrate.py, collect_data).
_MAX_STRIDE = 8


def _stride(count: int) -> int:
    """The largest stride up to _MAX_STRIDE that divides `count` (ONNX Runtime requires it)."""
    return next(s for s in range(min(_MAX_STRIDE, count), 0, -1) if count % s == 0)


def check_loads(path: Path) -> list[str]:
    """Open `path` in ONNX Runtime (CPU) and return its providers; ModelLoadError if it fails."""
    import onnxruntime as ort

    try:
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    except Exception as err:
        raise ModelLoadError(f"exported model {path} does not load in ONNX Runtime: {err}") from err
    return list(session.get_providers())


def export_fp16(source: Path, target: Path) -> dict[str, Any]:
    """Convert weights and compute to float16, keeping the float32 input and output so the
    pipeline's preprocessing and decoding are unchanged. ONNX Runtime's CPU provider has few
    float16 kernels (it casts around the rest): this artifact is for GPUs, not for speed here."""
    import onnx
    from onnxruntime.transformers.float16 import convert_float_to_float16

    model = onnx.load(str(source))
    converted = convert_float_to_float16(model, keep_io_types=True)
    onnx.save(converted, str(target))
    check_loads(target)
    return {"keep_io_types": True, "kept_in_float": []}


def export_int8(
    source: Path,
    target: Path,
    input_name: str,
    frames: CalibrationSet,
    on_calibrated: Callable[[], None] | None = None,
    symmetric: bool = False,
) -> dict[str, Any]:
    """Static QDQ quantization: per-channel int8 weights, uint8 activations (the u8s8 kernels
    that VNNI runs fastest), MinMax ranges from `frames`; the detection head stays float.

    Unlike OpenVINO, SiLU is quantized too: ONNX Runtime runs it as QLinearSigmoid + QLinearMul,
    and keeping it float costs a dequantize/quantize pair per activation (measured on the demo
    model, 2 cores: 57 ms vs 35 ms; int8 activations instead of uint8: 181 ms).

    `symmetric`: the form TensorRT's explicit quantization takes (ONNX Runtime's recipe for its
    TensorRT provider): int8 activations and weights with zero points 0, and only convolution
    inputs quantized (not their outputs), so SiLU and the head stay float around them."""
    import onnx
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    with tempfile.TemporaryDirectory(prefix="visionrt-quant-") as tmp:
        prepared = Path(tmp) / "prepared.onnx"
        quant_pre_process(str(source), str(prepared), skip_symbolic_shape=False)
        graph = onnx.load(str(prepared)).graph
        kept = head_nodes(onnx_view(graph))
        quantize_static(
            str(prepared),
            str(Path(tmp) / "quantized.onnx"),
            OrtCalibrationReader(input_name, frames, on_calibrated),
            quant_format=QuantFormat.QDQ,
            per_channel=True,
            activation_type=QuantType.QInt8 if symmetric else QuantType.QUInt8,
            weight_type=QuantType.QInt8,
            nodes_to_exclude=kept,
            op_types_to_quantize=["Conv"] if symmetric else None,
            calibrate_method=CalibrationMethod.MinMax,
            extra_options={
                "CalibStridedMinMax": _stride(len(frames)),
                # Convolution inputs only: their outputs stay float, so SiLU runs unquantized
                # (a residual Add or Concat reading a convolution's input reads it quantized).
                **(
                    {
                        "ActivationSymmetric": True,
                        "WeightSymmetric": True,
                        "OpTypesToExcludeOutputQuantization": ["Conv"],
                    }
                    if symmetric
                    else {}
                ),
            },
        )
        shutil.move(str(Path(tmp) / "quantized.onnx"), target)
    check_loads(target)
    return {
        "format": "QDQ",
        "activations": "int8 symmetric, convolution inputs only" if symmetric else "uint8",
        "weights": "int8 per-channel" + (" symmetric" if symmetric else ""),
        "calibration_method": "MinMax",
        "kept_in_float": kept,
    }


def require_ultralytics(source: Path) -> None:
    if importlib.util.find_spec("ultralytics") is None:
        raise BackendUnavailable(
            f"{source} is a PyTorch checkpoint: exporting it needs ultralytics"
            " (pip install ultralytics), or pass the ONNX file it exports"
        )


def export_from_pytorch(source: Path, target: Path, imgsz: tuple[int, int] | None) -> Path:
    """An Ultralytics `.pt` checkpoint → ONNX through Ultralytics' own exporter."""
    require_ultralytics(source)
    from ultralytics import YOLO

    try:
        exported = YOLO(str(source)).export(
            format="onnx", imgsz=list(imgsz) if imgsz else 640, opset=13, simplify=True
        )
    except Exception as err:
        raise ModelLoadError(f"Ultralytics could not export {source} to ONNX: {err}") from err
    shutil.move(str(exported), target)
    return target
