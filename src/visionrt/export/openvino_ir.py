"""OpenVINO IR artifacts: FP32 IR, and INT8 IR quantized by NNCF with the head kept in float; the
same two for a depth model, fixed at one input size."""

from __future__ import annotations

import importlib.util
import logging
from pathlib import Path
from typing import Any

from visionrt.errors import BackendUnavailable
from visionrt.export.calibration import CalibrationSet
from visionrt.export.graph import fused_silu_count, head_nodes, openvino_view, silu_multiplies


def require_openvino(int8: bool = False) -> None:
    for module in ("openvino", "nncf") if int8 else ("openvino",):
        if importlib.util.find_spec(module) is None:
            raise BackendUnavailable(
                f"exporting to OpenVINO{' INT8' if int8 else ''} needs the '{module}' package:"
                " pip install 'visionrt[openvino]'"
            )


def runtime_version(int8: bool = False) -> str:
    import openvino as ov

    version = "ov" + ov.get_version().split("-")[0]
    if int8:
        import nncf

        version += "-nncf" + nncf.__version__
    return version


def export_ir(source: Path, target: Path) -> dict[str, Any]:
    """ONNX → IR with FP32 weights (the runtime still picks bf16 on CPUs that have it)."""
    require_openvino()
    import openvino as ov

    ov.save_model(ov.convert_model(source), target, compress_to_fp16=False)
    return {"weights": "fp32", "kept_in_float": []}


def export_ir_int8(source: Path, target: Path, frames: CalibrationSet) -> dict[str, Any]:
    """ONNX → IR → NNCF post-training quantization (preset MIXED: symmetric weights, asymmetric
    activations), calibrated on `frames`.

    Ignored: the detection head (box decoding loses precision in int8 and gains no speed) and
    `x * sigmoid(x)` multiplies the converter has not already fused into Swish."""
    require_openvino(int8=True)
    import nncf
    import openvino as ov
    from nncf.common.logging import nncf_logger

    model = ov.convert_model(source)
    view = openvino_view(model)
    head = head_nodes(view)
    silu = silu_multiplies(view)
    ignored = nncf.IgnoredScope(names=[*head, *silu], validate=False)
    previous = nncf_logger.level
    nncf_logger.setLevel(logging.WARNING)  # one INFO line per ignored node otherwise
    try:
        quantized = nncf.quantize(
            model,
            nncf.Dataset(frames),
            preset=nncf.QuantizationPreset.MIXED,
            subset_size=len(frames),
            ignored_scope=ignored,
        )
    finally:
        nncf_logger.setLevel(previous)
    ov.save_model(quantized, target, compress_to_fp16=False)
    return {
        "quantizer": "nncf",
        "preset": "mixed",
        "kept_in_float": [*head, *silu],
        "silu_fused_by_converter": fused_silu_count(view),
    }


def export_depth_ir(
    source: Path, target: Path, input_hw: tuple[int, int], frames: CalibrationSet | None = None
) -> dict[str, Any]:
    """A depth model (ONNX) → IR with its input fixed to [1, 3, *input_hw]; INT8 by NNCF when
    `frames` are given (calibration tensors at that size), FP32 weights otherwise.

    Fixed, because the OpenVINO backend does not reshape an IR and the CPU plugin runs static
    shapes faster; the quantizer's ranges are then also those of the size that runs. INT8 uses
    NNCF's transformer recipe (ModelType.TRANSFORMER: SmoothQuant, the weight MatMuls and
    convolutions quantized; LayerNorm, Softmax, GELU, residual adds and the attention MatMuls
    left in float), preset MIXED as for the detector; nothing else is ignored: a DPT head has
    no box decoding to protect. The ONNX metadata (architecture_only, depth units) survives in
    the IR's rt_info, where DepthTask reads it."""
    require_openvino(int8=frames is not None)
    import openvino as ov

    model = ov.convert_model(source)
    model.reshape([1, 3, *input_hw])
    built: dict[str, Any] = {
        "weights": "fp32",
        "kept_in_float": [],
        "static_input": [1, 3, *input_hw],
    }
    if frames is not None:
        import nncf
        from nncf.common.logging import nncf_logger

        previous = nncf_logger.level
        nncf_logger.setLevel(logging.WARNING)
        try:
            model = nncf.quantize(
                model,
                nncf.Dataset(frames),
                preset=nncf.QuantizationPreset.MIXED,
                model_type=nncf.ModelType.TRANSFORMER,
                subset_size=len(frames),
            )
        finally:
            nncf_logger.setLevel(previous)
        built.update(
            quantizer="nncf",
            preset="mixed",
            model_type="transformer",
            weights="int8",
            # Checked on the Depth Anything v2-Small IR: 72 of 96 MatMuls and 27 of 31
            # convolutions take FakeQuantize inputs; these stay float.
            kept_in_float_by_recipe="LayerNorm, Softmax, GELU, residual adds, attention"
            " MatMuls (NNCF's transformer recipe)",
        )
    ov.save_model(model, target, compress_to_fp16=False)
    return built
