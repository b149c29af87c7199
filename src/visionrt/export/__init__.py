"""Export: model file → optimized artifact (FP16/INT8 ONNX, OpenVINO IR, TensorRT), cached."""

from visionrt.export.artifacts import TARGETS, ExportResult, Target, export_model
from visionrt.export.depth import DEPTH_TARGETS, DepthFidelityReport, is_depth_model

__all__ = [
    "DEPTH_TARGETS",
    "TARGETS",
    "DepthFidelityReport",
    "ExportResult",
    "Target",
    "export_model",
    "is_depth_model",
]
