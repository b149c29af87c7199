"""TensorRT engines built from ONNX (FP16), for the machine and TensorRT version that build them."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from visionrt.errors import BackendUnavailable, ModelLoadError

_WORKSPACE = 4 << 30  # bytes of GPU scratch TensorRT may use while choosing tactics


def require_tensorrt() -> None:
    if importlib.util.find_spec("tensorrt") is None:
        raise BackendUnavailable(
            "exporting a TensorRT engine needs the 'tensorrt' package and an NVIDIA GPU:"
            " pip install 'visionrt[tensorrt]'"
        )


def runtime_version() -> str:
    import tensorrt as trt

    return "trt" + str(trt.__version__)


def gpu_name() -> str:
    """The GPU the engine is built for (engines do not move between GPU models)."""
    try:
        import torch

        if torch.cuda.is_available():
            return str(torch.cuda.get_device_name(0))
    except ImportError:
        pass
    return "cuda:0"


def export_engine(source: Path, target: Path) -> dict[str, Any]:
    """Parse the ONNX, build an FP16 engine and serialize it to `target`."""
    require_tensorrt()
    import tensorrt as trt

    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    network = builder.create_network(0)  # explicit batch is the only mode in TensorRT 10
    parser = trt.OnnxParser(network, logger)
    if not parser.parse_from_file(str(source)):
        errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
        raise ModelLoadError(f"TensorRT cannot parse {source}: {errors}")
    config = builder.create_builder_config()
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, _WORKSPACE)
    fp16 = builder.platform_has_fast_fp16
    if fp16:
        config.set_flag(trt.BuilderFlag.FP16)
    engine = builder.build_serialized_network(network, config)
    if engine is None:
        raise ModelLoadError(f"TensorRT failed to build an engine from {source} (see its log)")
    target.write_bytes(bytes(engine))
    return {"precision": "fp16" if fp16 else "fp32", "gpu": gpu_name(), "kept_in_float": []}
