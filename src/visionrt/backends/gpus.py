"""Which runtimes can run on an NVIDIA GPU here: (backend, device) pairs, found without
importing any runtime on a machine whose driver shows no GPU (the seam tests fake). Each
runtime is the module of its own name (`registry.ROWS` requires): the registry asks this
module, not the other way round."""

from __future__ import annotations

import importlib.util
from pathlib import Path

NVIDIA_GPUS = Path("/proc/driver/nvidia/gpus")  # one folder per GPU the driver sees


def gpu_seen() -> bool:
    """Whether the NVIDIA driver shows a GPU (no runtime imported)."""
    return NVIDIA_GPUS.is_dir() and any(NVIDIA_GPUS.iterdir())


def gpu_runtimes() -> frozenset[tuple[str, str]]:
    """(backend, device) pairs that can run on an NVIDIA GPU here: ("torch", "cuda"),
    ("onnxruntime", "cuda"), ("onnxruntime", "tensorrt"), ("tensorrt", "cuda")."""
    if not gpu_seen():
        return frozenset()
    pairs: set[tuple[str, str]] = set()
    if _installed("torch"):
        import torch

        if torch.cuda.is_available():
            pairs.add(("torch", "cuda"))
    if _installed("onnxruntime"):
        import onnxruntime as ort

        providers = ort.get_available_providers()
        if "CUDAExecutionProvider" in providers:
            pairs.add(("onnxruntime", "cuda"))
        if "TensorrtExecutionProvider" in providers:
            pairs.add(("onnxruntime", "tensorrt"))
    if _installed("tensorrt"):
        pairs.add(("tensorrt", "cuda"))
    return frozenset(pairs)


def torch_cannot_convert(model: Path) -> list[str]:
    """The ops of ONNX `model` the torch backend's converter lacks (empty: it converts)."""
    import onnx

    from visionrt.backends.onnx_ops import SUPPORTED_OPS

    graph = onnx.load(str(model), load_external_data=False).graph
    return sorted({n.op_type for n in graph.node if n.domain in ("", "ai.onnx")} - SUPPORTED_OPS)


def torch_build() -> str:
    """The installed torch's build: "cuda 13.0", "cpu" (a CPU-only wheel), or "" (none)."""
    if not _installed("torch"):
        return ""
    import torch

    cuda = torch.version.cuda
    return f"cuda {cuda}" if cuda else "cpu"


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None
