"""TensorRT engines built from ONNX (FP16), for the machine and TensorRT version that build them."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from visionrt.errors import BackendUnavailable


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
    """Build an FP16 engine with the backend's builder (same caches) and copy it to `target`."""
    require_tensorrt()
    import shutil

    from visionrt.backends.base import BackendOptions
    from visionrt.backends.tensorrt import build_engine
    from visionrt.models import read_model_spec

    spec = read_model_spec(source)  # a model dynamic in H and W: built at its metadata's size
    size = spec.input_size if spec.dynamic_hw else None
    engine = build_engine(source, BackendOptions(device="cuda", precision="fp16", input_size=size))
    shutil.copyfile(engine, target)
    return {"precision": "fp16", "gpu": gpu_name(), "kept_in_float": []}
