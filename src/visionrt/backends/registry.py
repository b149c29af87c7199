"""The table of backends: which file serves which runtime, what it needs, how to get it."""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from visionrt.backends import gpus
from visionrt.backends.base import Backend, BackendOptions
from visionrt.errors import BackendUnavailable, ConfigError, ModelLoadError


@dataclass(frozen=True, slots=True)
class BackendRow:
    """One runtime: its name, the class to import, the files it reads, what it needs."""

    name: str
    target: str
    suffixes: tuple[str, ...]
    requires: tuple[str, ...]
    extra: str
    devices: tuple[str, ...]
    summary: str
    # Files it builds an engine from as it loads them (minutes; `export` builds them ahead): what
    # a run must not hand it implicitly.
    builds_from: tuple[str, ...] = ()


ROWS: tuple[BackendRow, ...] = (
    BackendRow(
        "openvino",
        "visionrt.backends.openvino:OpenVINOBackend",
        (".onnx", ".xml"),
        ("openvino",),
        "openvino",
        ("cpu", "gpu", "npu"),
        "Intel OpenVINO; bf16 on CPUs that have it, INT8 IR, throughput streams",
    ),
    BackendRow(
        "onnxruntime",
        "visionrt.backends.onnxruntime:OnnxRuntimeBackend",
        (".onnx",),
        ("onnxruntime",),
        "",
        ("cpu", "cuda", "tensorrt"),
        "ONNX Runtime; CPU provider, CUDA/TensorRT providers with onnxruntime-gpu",
    ),
    BackendRow(
        "torch",
        "visionrt.backends.torch:TorchBackend",
        (".onnx", ".pt"),
        ("torch",),
        "torch",
        ("cpu", "cuda"),
        "PyTorch eager/compile/CUDA graphs on the ONNX graph (visionrt's converter) or a .pt",
    ),
    BackendRow(
        "tensorrt",
        "visionrt.backends.tensorrt:TensorRTBackend",
        (".onnx", ".engine"),
        ("tensorrt",),
        "tensorrt",
        ("cuda",),
        "NVIDIA TensorRT engines built from ONNX (FP16/INT8)",
        builds_from=(".onnx",),
    ),
    BackendRow(
        "null",
        "visionrt.backends.null:NullBackend",
        (".onnx",),
        (),
        "",
        ("cpu", "cuda"),
        "does nothing: shape-correct zero outputs, for plumbing tests and overhead baselines"
        " (cuda: with input frames, the device work of that path, no model)",
    ),
)

# `auto` tries these in order: the fastest runtime first for each device (docs/backends.md).
AUTO_ORDER: dict[str, tuple[str, ...]] = {
    "cpu": ("openvino", "onnxruntime"),
    "cuda": ("tensorrt", "onnxruntime", "torch"),
}


# Which runtime reads a model file when none is named: the first row in this order that lists its
# suffix (ONNX Runtime for .onnx: the FP32 reference every other configuration is checked against).
FILE_ORDER = ("onnxruntime", "openvino", "torch", "tensorrt")


# Why an installed runtime cannot use the GPU, and what adds it.
GPU_UNUSABLE = {
    "onnxruntime": "this onnxruntime is a CPU build (the GPU's: pip install 'visionrt[gpu]')",
    "torch": "this torch sees no GPU (a CPU build, or a driver older than its CUDA)",
    "tensorrt": "TensorRT sees no GPU (check the driver: nvidia-smi)",
}


def _on_gpu(device: str) -> frozenset[tuple[str, str]]:
    """The (runtime, device) pairs that can use the GPU here; no GPU is one line."""
    if not gpus.gpu_seen():
        raise BackendUnavailable(
            f"device '{device}': no NVIDIA GPU is visible here (the driver lists none under"
            f" {gpus.NVIDIA_GPUS}): leave --device out to run on the CPU"
        )
    return gpus.gpu_runtimes()


def _unusable_on(device: str) -> Callable[[BackendRow], str | None]:
    """Why a row cannot run on `device` in this install (None: it can): it does not list the
    device, or on CUDA it cannot use the GPU here."""
    kind = device.split(":")[0]
    on_gpu = _on_gpu(device) if kind == "cuda" else None

    def reason(row: BackendRow) -> str | None:
        if kind not in row.devices:
            return f"{row.name} does not run on '{kind}'"
        if on_gpu is not None and (row.name, "cuda") not in on_gpu:
            return f"{row.name}: {unavailable_reason(row) or GPU_UNUSABLE[row.name]}"
        return None

    return reason


def _readers(suffix: str) -> list[str]:
    return [r.name for r in ROWS if suffix in r.suffixes and r.name != "null"]


def row_for_file(model: Path, device: str = "cpu") -> BackendRow:
    """The backend that reads `model` when none is named, chosen by its suffix: the first in
    FILE_ORDER that runs on `device` (on a CUDA device: that can use the GPU in this install,
    so a machine with ONNX Runtime's CPU build and a CUDA torch runs torch there)."""
    unusable = _unusable_on(device)
    passed = []
    for name in FILE_ORDER:
        row = find_row(name)
        if model.suffix not in row.suffixes:
            continue
        reason = unusable(row)
        if reason is None:
            return row
        passed.append(reason)
    if passed:
        raise BackendUnavailable(
            f"no runtime here runs {model.name} on device '{device}': {'; '.join(passed)}"
        )
    known = sorted({s for r in ROWS for s in r.suffixes})
    readers = ", ".join(f"{s} ({' or '.join(_readers(s))})" for s in known)
    raise ModelLoadError(
        f"{model}: no backend reads {model.suffix or 'a file without a suffix'}: expected {readers}"
    )


def check_reads(row: BackendRow, model: Path) -> None:
    """A one-line error when the named backend cannot read `model`, naming those that can."""
    if model.suffix in row.suffixes:
        return
    readers = _readers(model.suffix)
    if not readers:
        row_for_file(model)  # raises: nothing reads it
    raise ConfigError(
        f"backend '{row.name}' cannot read {model.name}: {model.suffix} files are read by"
        f" {' or '.join(readers)} (use --backend {readers[0]}, or leave --backend out)"
    )


def find_row(name: str) -> BackendRow:
    for row in ROWS:
        if row.name == name:
            return row
    names = ", ".join(["auto", *(r.name for r in ROWS)])
    raise ConfigError(f"unknown backend '{name}': expected one of {names}")


def missing_requirement(row: BackendRow) -> str | None:
    """The first required module that cannot be imported, or None when all are present."""
    for module in row.requires:
        if importlib.util.find_spec(module) is None:
            return module
    return None


def unavailable_reason(row: BackendRow) -> str | None:
    missing = missing_requirement(row)
    if missing is None:
        return None
    hint = f"pip install 'visionrt[{row.extra}]'" if row.extra else f"pip install {missing}"
    return f"backend '{row.name}' needs the '{missing}' package: {hint}"


def choose_auto(device: str, model: Path) -> tuple[BackendRow, str]:
    """The first available backend in AUTO_ORDER for `device`, with a sentence saying why. On a
    CUDA device, available means able to use the GPU in this install: ONNX Runtime's CPU build
    is passed over for torch (an H200 machine has exactly those two)."""
    order = AUTO_ORDER.get(device.split(":")[0], ("onnxruntime",))
    unusable = _unusable_on(device)
    skipped: list[str] = []
    for name in order:
        row = find_row(name)
        reason = unavailable_reason(row) or unusable(row)
        if reason is None and model.suffix in row.suffixes:
            why = f"first available for device '{device}' in the order {' > '.join(order)}"
            if skipped:
                why += f" ({'; '.join(skipped)})"
            return row, why
        skipped.append(reason or f"{name} does not read {model.suffix}")
    raise BackendUnavailable(f"no backend available for device '{device}': {'; '.join(skipped)}")


def load_backend(name: str, model: str | Path, options: BackendOptions | None = None) -> Backend:
    """Import the runtime named `name` and load `model` into it. `name` "" picks the runtime
    that reads the file (by suffix), 'auto' the fastest one available for the device."""
    model = Path(model)
    options = options or BackendOptions()
    if name == "auto":
        row = choose_auto(options.device, model)[0]
    else:
        row = find_row(name) if name else row_for_file(model, options.device)
        check_reads(row, model)
    if row.name != "null" and not model.exists():  # before a runtime's own traceback
        raise ModelLoadError(f"model file not found: {model}")
    reason = unavailable_reason(row)
    if reason is not None:
        raise BackendUnavailable(reason)
    if options.device.split(":")[0] not in row.devices:
        raise ConfigError(
            f"backend '{row.name}' does not run on device '{options.device}':"
            f" expected one of {', '.join(row.devices)}"
        )
    module_name, class_name = row.target.split(":")
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except ImportError as err:
        raise BackendUnavailable(f"backend '{row.name}' failed to import: {err}") from err
    backend: Backend = cls()
    backend.load(model, options)
    return backend
