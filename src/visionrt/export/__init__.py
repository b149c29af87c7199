"""Export: model file → optimized artifact (FP16/INT8 ONNX, OpenVINO IR, TensorRT), cached."""

from visionrt.export.artifacts import TARGETS, ExportResult, Target, export_model

__all__ = ["TARGETS", "ExportResult", "Target", "export_model"]
