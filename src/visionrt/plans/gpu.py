"""The FP32 reference on this machine's NVIDIA GPU: what a run with no plan (and no backend,
device or precision of the user's) runs when torch can use a CUDA GPU here and convert the
model — torch fp32 on CUDA instead of ONNX Runtime on the CPU. A plan or a flag naming the CPU
wins; a model the converter cannot take stays on the CPU, and the line says why."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from visionrt.backends.gpus import gpu_runtimes, torch_cannot_convert

GPU_BACKEND, GPU_DEVICE = "torch", "cuda"


@dataclass(frozen=True, slots=True)
class GpuReference:
    """`sections` (model, backend, inference) to run `model` in fp32 on the GPU (None: stay on
    the CPU); `where` names the GPU, or says why the model stays on the CPU ("" with no GPU)."""

    sections: dict[str, Any] | None
    where: str


def gpu_reference(model: Path) -> GpuReference:
    if (GPU_BACKEND, GPU_DEVICE) not in gpu_runtimes():
        return GpuReference(None, "")
    missing = torch_cannot_convert(model)
    if missing:
        return GpuReference(
            None,
            f"on the CPU: the torch backend cannot convert {model.name} for the GPU (lacks"
            f" {', '.join(missing)})",
        )
    sections = {
        "model": str(model),
        "backend": GPU_BACKEND,
        "inference": {"device": GPU_DEVICE, "precision": "fp32"},
    }
    return GpuReference(sections, f"on the GPU ({_gpu_name()}, torch fp32)")


def _gpu_name() -> str:
    import torch

    return str(torch.cuda.get_device_name(0))
