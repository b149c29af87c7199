"""What `tune` may try on this machine: backend × precision × input size × request settings,
pruned by what the hardware and the installed runtimes support."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from visionrt.preprocess.letterbox import aligned_sizes

GPU_DEVICES = ("cuda", "tensorrt")
# How a label names the precision of an artifact that is more than its precision says.
EXPORT_PRECISIONS = {"openvino-int8-ac": "int8+float"}


@dataclass(frozen=True, slots=True)
class Candidate:
    """One configuration `run` can reproduce. `export` names the artifact target it needs
    (built and cached by `visionrt export`), "" when it runs the model file as it is."""

    backend: str
    precision: str
    input_size: tuple[int, int] | None = None  # None: the model's own size
    fold: bool = False
    settings: tuple[tuple[str, str], ...] = ()
    export: str = ""
    reference: bool = False
    device: str = "cpu"
    batch: int = 1

    @property
    def label(self) -> str:
        size = f"{self.input_size[0]}×{self.input_size[1]}" if self.input_size else "native"
        precision = EXPORT_PRECISIONS.get(self.export, self.precision)
        extras = [f"{k}={v}" for k, v in self.settings] + (["fold"] if self.fold else [])
        extras += [f"batch {self.batch}"] if self.batch > 1 else []
        where = [] if self.device == "cpu" else [f"@{self.device}"]
        return " ".join([self.backend, *where, precision, size, *extras])

    @property
    def on_gpu(self) -> bool:
        return self.device.split(":")[0] in GPU_DEVICES

    def options(self) -> dict[str, Any]:
        """The `inference` section of a run config for this candidate."""
        return {
            "device": self.device,
            "precision": self.precision,
            "input_size": list(self.input_size) if self.input_size else None,
            "fold_preprocess": self.fold,
            "batch": self.batch,
            "settings": dict(self.settings),
        }


@dataclass(frozen=True, slots=True)
class Machine:
    """What the search may use: installed runtimes and the CPU's instruction sets."""

    runtimes: frozenset[str]
    cpu_features: frozenset[str] = field(default_factory=frozenset)
    int8_export: bool = False  # NNCF present: OpenVINO INT8 artifacts can be made
    # (backend, device) pairs that run on an NVIDIA GPU here: ("torch", "cuda"),
    # ("onnxruntime", "cuda"), ("onnxruntime", "tensorrt"), ("tensorrt", "cuda").
    gpu: frozenset[tuple[str, str]] = field(default_factory=frozenset)

    @property
    def bf16(self) -> bool:
        return bool({"avx512_bf16", "amx_bf16"} & self.cpu_features)

    @property
    def int8(self) -> bool:
        # VNNI (or AMX) makes INT8 pay; without it INT8 convolutions are barely faster.
        return bool({"avx512_vnni", "avx_vnni", "amx_int8"} & self.cpu_features)


def candidates(
    machine: Machine,
    model_hw: tuple[int, int],
    source_hw: tuple[int, int],
    objective: str = "throughput",
) -> list[Candidate]:
    """The search space for a detector, reference first: CPU runtimes, then GPU ones."""
    found = [Candidate("onnxruntime", "fp32", reference=True)]
    sizes: list[tuple[int, int] | None] = [None, *aligned_sizes(source_hw, model_hw)]
    found += gpu_candidates(machine, sizes)
    if "openvino" not in machine.runtimes:
        return found
    hint = (("hint", objective),)
    precisions = ["fp32"] + (["bf16"] if machine.bf16 else [])
    for precision in precisions:
        for size in sizes:
            found.append(Candidate("openvino", precision, size, fold=True, settings=hint))
    if machine.int8_export and machine.int8:
        for size in sizes:
            found.append(
                Candidate(
                    "openvino", "int8", size, fold=True, settings=hint, export="openvino-int8"
                )
            )
    return found


def gpu_candidates(machine: Machine, sizes: list[tuple[int, int] | None]) -> list[Candidate]:
    """FP16 on every GPU runtime present (FP32 on ONNX Runtime's CUDA provider; torch also BF16,
    and FP16 without CUDA graphs, its preprocessing folded), and TensorRT INT8 from a symmetric
    QDQ export calibrated on the video, each at the model's size and the grid-aligned smaller
    ones; all at batch 1: the batch is searched for the winner afterwards (`tune.batch`)."""
    found: list[Candidate] = []
    for size in sizes:
        if ("tensorrt", "cuda") in machine.gpu:
            found.append(Candidate("tensorrt", "fp16", size, device="cuda"))
            found.append(Candidate("tensorrt", "int8", size, device="cuda", export="onnx-int8-sym"))
        if ("onnxruntime", "tensorrt") in machine.gpu:
            found.append(Candidate("onnxruntime", "fp16", size, device="tensorrt"))
        if ("onnxruntime", "cuda") in machine.gpu:
            found.append(Candidate("onnxruntime", "fp32", size, device="cuda"))
            found.append(Candidate("onnxruntime", "fp16", size, device="cuda", export="onnx-fp16"))
        if ("torch", "cuda") in machine.gpu:  # frames prepared and decoded on the device
            # At batch 1 (the host path: a live camera) folded: the host letterboxes in uint8
            # and the device converts and scales (in the graph); batches take whole frames.
            graphs = (("cuda_graphs", "true"),)
            for precision in ("fp16", "bf16"):
                found.append(Candidate("torch", precision, size, True, graphs, device="cuda"))
            found.append(Candidate("torch", "fp16", size, True, device="cuda"))  # eager
    return found


def labels(items: Iterable[Candidate]) -> list[str]:
    return [c.label for c in items]
