"""The backend contract: load a model, run prepared arrays through it, close it."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol

import numpy as np
import numpy.typing as npt

from visionrt.errors import ConfigError
from visionrt.types import BackendInfo, TensorSpec

PRECISIONS = ("fp32", "fp16", "bf16", "int8")
# BackendInfo.input_form: host arrays for `infer`, or frames prepared on the device (below).
ARRAYS, FRAMES = "arrays", "frames"
DEVICES = ("cpu", "cuda", "tensorrt", "gpu", "npu")

Array = npt.NDArray[np.generic]


@dataclass(frozen=True, slots=True)
class BackendOptions:
    """What the caller asks of a runtime; `info` says what it actually got."""

    device: str = "cpu"
    """Where the model runs: cpu, cuda (an NVIDIA GPU), tensorrt (ONNX Runtime's TensorRT
    provider), gpu or npu (OpenVINO's Intel devices); any of them :INDEX (cuda:1)."""
    precision: str = "fp32"
    """fp32, fp16, bf16 or int8 (a quantized model: `visionrt export`)."""
    threads: int = 0
    """The runtime's inference threads (0: its default)."""
    batch: int = 1
    """Frames per inference call (1 or more)."""
    # The task resolves a static file of another size before loading.
    input_size: tuple[int, int] | None = None
    """The (height, width) to run at (None: the model's own): a model static in H and W must
    already have it, one dynamic in H and W is fixed to it."""
    fold_preprocess: bool = False
    """The model takes uint8 BGR frames and converts, scales and lays them out itself
    (OpenVINO; torch with host arrays)."""
    cache_dir: Path | None = None
    """Where resized and rebatched models and TensorRT engines are kept (None:
    ~/.cache/visionrt)."""
    settings: Mapping[str, str] = field(default_factory=dict)
    """Runtime-specific KEY: VALUE strings, checked by the backend that reads them (e.g.
    OpenVINO's hint: throughput; each runtime's are in docs/backends.md)."""
    pin_threads: bool = True
    """Let the runtime pin its threads to cores (OpenVINO does, from the first core); a process
    that shares the machine with others (a cluster's workers) must not, or they all run on the
    same cores."""

    def __post_init__(self) -> None:
        if self.precision not in PRECISIONS:
            raise ConfigError(
                f"inference.precision: expected one of {', '.join(PRECISIONS)},"
                f" got '{self.precision}'"
            )
        kind, sep, index = self.device.partition(":")
        # isascii: str.isdigit() also accepts '²', which int() then refuses.
        if kind not in DEVICES or (sep and not (index.isascii() and index.isdigit())):
            raise ConfigError(
                f"inference.device: expected one of {', '.join(DEVICES)} (optionally :INDEX,"
                f" a number), got '{self.device}'"
            )
        if self.threads < 0:
            raise ConfigError(f"inference.threads: expected >= 0, got {self.threads}")
        if self.batch < 1:
            raise ConfigError(f"inference.batch: expected >= 1, got {self.batch}")
        # Positive only: what else a size must be is the model's to say (a detector's stride,
        # 32; a ViT's patch, 14), checked by the task that runs it.
        if self.input_size is not None and any(d < 1 for d in self.input_size):
            raise ConfigError(
                f"inference.input_size: expected a positive height and width, got"
                f" {list(self.input_size)}"
            )


def flag_setting(settings: Mapping[str, str], key: str, default: bool) -> bool:
    """A true/false backend setting (`inference.settings.KEY`), with a one-line error."""
    value = settings.get(key, str(default)).strip().lower()
    if value not in ("true", "false", "1", "0", "yes", "no", "on", "off"):
        raise ConfigError(f"inference.settings.{key}: expected true or false, got '{value}'")
    return value in ("true", "1", "yes", "on")


def check_input_size(model: Path, image: TensorSpec, options: BackendOptions) -> None:
    """ConfigError when `options.input_size` differs from the static size of `model`'s image
    input (NCHW, or NHWC uint8 when preprocessing is folded in): backends load a file of the
    right shape and reshape nothing."""
    hw = image.shape[1:3] if image.dtype == "uint8" else image.shape[2:4]
    if options.input_size is None or not all(isinstance(d, int) and d > 0 for d in hw):
        return
    if tuple(hw) != tuple(options.input_size):
        raise ConfigError(
            f"inference.input_size {list(options.input_size)}: {model.name} runs at"
            f" {hw[0]}x{hw[1]}; load a file of that size (a task rewrites a detector for it)"
        )


class Backend(ABC):
    """One runtime. `infer` must be safe to call from `concurrency` threads at once."""

    name: ClassVar[str]
    info: BackendInfo
    # How many `infer` calls the runtime can usefully overlap (OpenVINO throughput streams).
    concurrency: int = 1

    @abstractmethod
    def load(self, model: Path, options: BackendOptions) -> None:
        """Load `model` so that `infer` can run; raise ModelLoadError or BackendUnavailable."""

    @abstractmethod
    def infer(self, inputs: Mapping[str, Array]) -> list[Array]:
        """Run one batch; outputs in the order of `info.outputs`."""

    def close(self) -> None:  # noqa: B027 - most runtimes free on garbage collection
        """Release the runtime's resources."""

    def __enter__(self) -> Backend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class FramesBackend(Protocol):
    """What a backend whose `info.input_form` is FRAMES adds: torch tensors on its device in
    and out, so a task uploads decoded frames once, prepares them there and brings back only
    its results. A thread does one batch's device work inside `device_scope()` (on CUDA, a
    stream of its own): `device_input(rows)` is the (rows, 3, H, W) tensor to fill, in the
    model's dtype and memory format, `device_buffer` any other named input its `then` step
    (or its preparing) reads; `device_rows(rows)` the rows those are made with for a batch of
    `rows` (a CUDA graph's size: the rows past `rows` are not read); `prepare_device(key,
    call)` runs a batch's preparing, replayed as a CUDA graph per `key` where graphs are on;
    `infer_device` runs the model and `then(outputs, buffers)` after it (in the same
    CUDA graph where graphs are on), results left on the device and valid until the scope's
    next batch. `stand_in` (the null backend on the CPU): no device is there, so the task
    stages frames as for one and skips the preparing and decoding a device would take off the
    host: a run then measures the host's share alone."""

    stand_in: bool

    def device_scope(self) -> AbstractContextManager[None]: ...

    def device_input(self, rows: int) -> Any: ...

    def device_buffer(self, name: str, rows: int, shape: tuple[int, ...], dtype: Any) -> Any: ...

    def device_rows(self, rows: int) -> int: ...

    def prepare_device(self, key: Any, call: Any) -> None: ...

    def infer_device(self, images: Any, then: Any = None) -> list[Any]: ...
