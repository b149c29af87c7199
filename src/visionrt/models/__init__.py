"""Models: model files → model files (facts read from a model, resize and batch rewrites, the
file a backend loads resolved before it loads)."""

from visionrt.models.batch import BATCH_AXIS, rebatch_onnx
from visionrt.models.known import (
    DEPTH_MODEL_NAME,
    demo_model_path,
    depth_model_path,
    depth_model_target,
)
from visionrt.models.reshape import constant_tensors, make_anchors, reshape_detector_onnx
from visionrt.models.resolve import ResolvedModel, batched_model, resolve_model, sized_model
from visionrt.models.spec import (
    IMAGE_INPUT_TYPES,
    IR_METADATA_KEYS,
    SELF_DESCRIBING,
    ModelSpec,
    is_architecture_only,
    is_quantized,
    model_metadata,
    read_model_spec,
    spec_from_backend,
)

__all__ = [
    "BATCH_AXIS",
    "DEPTH_MODEL_NAME",
    "IMAGE_INPUT_TYPES",
    "IR_METADATA_KEYS",
    "SELF_DESCRIBING",
    "ModelSpec",
    "ResolvedModel",
    "batched_model",
    "constant_tensors",
    "demo_model_path",
    "depth_model_path",
    "depth_model_target",
    "is_architecture_only",
    "is_quantized",
    "make_anchors",
    "model_metadata",
    "read_model_spec",
    "rebatch_onnx",
    "reshape_detector_onnx",
    "resolve_model",
    "sized_model",
    "spec_from_backend",
]
