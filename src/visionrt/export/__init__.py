"""Export: model file → optimized artifact (FP16/INT8 ONNX, OpenVINO IR, TensorRT), cached.

Its names are imported when first used: the command line opens `building` (TensorRT engines a
load may build) for every command, and should not pay for the exporters it does not run."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from visionrt.export.artifacts import TARGETS, ExportResult, Target, export_model
    from visionrt.export.depth import DEPTH_TARGETS, DepthFidelityReport, is_depth_model
    from visionrt.export.tensorrt import building

_HOMES = {
    "TARGETS": "artifacts",
    "ExportResult": "artifacts",
    "Target": "artifacts",
    "export_model": "artifacts",
    "DEPTH_TARGETS": "depth",
    "DepthFidelityReport": "depth",
    "is_depth_model": "depth",
    "building": "tensorrt",
}

__all__ = [
    "DEPTH_TARGETS",
    "TARGETS",
    "DepthFidelityReport",
    "ExportResult",
    "Target",
    "building",
    "export_model",
    "is_depth_model",
]


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'visionrt.export' has no attribute {name!r}")
    return getattr(importlib.import_module(f"visionrt.export.{_HOMES[name]}"), name)
