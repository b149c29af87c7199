"""The FP32 reference on this machine's NVIDIA GPU: what a run with no plan (and no backend,
device or precision of the user's) runs when torch can use a CUDA GPU here and convert the
model — torch fp32 on CUDA, its calls replayed as CUDA graphs, instead of ONNX Runtime on the
CPU. A plan or a flag naming the CPU wins; a model the converter cannot take stays on the CPU,
and the line says why."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from visionrt.backends.base import BackendOptions
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
        # CUDA graphs replay the same kernels (the same figures) without launching each from
        # Python: Depth Anything v2-S launches ~525 a frame, 14.7 ms eager in fp16 on an H200
        # against 6.4 replayed (2026-11-28).
        "inference": {
            "device": GPU_DEVICE,
            "precision": "fp32",
            "settings": {"cuda_graphs": "true"},
        },
    }
    return GpuReference(sections, f"on the GPU ({_gpu_name()}, torch fp32)")


# The most frames of several sources one GPU call takes by default: 32 streams of the demo
# detector ran 3,437 FPS model-only at batch 32 on an H200 against 3,566 at 64 (2026-11-28).
SOURCES_BATCH_MAX = 32


def batch_across_sources(options: BackendOptions, sources: int) -> tuple[BackendOptions, str]:
    """On a CUDA device, several sources at batch 1 become one call for their frames (as many
    as there are, up to SOURCES_BATCH_MAX): a GPU runs three cameras' frames together in about
    the time of one, and at batch > 1 the frames go up as decoded and are letterboxed there
    (the torch backend's frames path). A batch only bounds a call: it takes the frames that
    are there and waits for none (`pipeline.batch_wait_ms`). Returns the options to run and
    the line that says so ("" where nothing changed). Tiles are a batch of their own."""
    if not options.device.startswith("cuda") or options.batch != 1 or sources < 2:
        return options, ""
    batch = min(sources, SOURCES_BATCH_MAX)
    return replace(options, batch=batch), (
        f"{sources} sources on the GPU: their frames go to the detector {batch} a call"
        " (--batch sets another)"
    )


def _gpu_name() -> str:
    import torch

    return str(torch.cuda.get_device_name(0))
