"""NVIDIA TensorRT: run an engine with execute_async_v3.

`load` reads a `.engine` file directly, or for an `.onnx` the engine cached for it with these
options on this GPU. Building one is not a load's business: `visionrt.export.tensorrt` builds
(`export`, `tune`, and a load inside `export.building()`, which the command line opens). Buffers
are torch CUDA tensors, so torch (a CUDA build) is needed alongside TensorRT.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from visionrt.backends.base import Array, Backend, BackendOptions
from visionrt.errors import BackendUnavailable, ModelLoadError
from visionrt.paths import cache_root, file_sha256
from visionrt.types import BackendInfo, TensorSpec

DEFAULT_WORKSPACE_MB = 4096
_HINT = "pip install 'visionrt[tensorrt]'"


def cache_dir(options: BackendOptions) -> Path:
    return options.cache_dir or cache_root() / "trt"


def engine_key(model_sha256: str, trt_version: str, gpu: str, options: BackendOptions) -> str:
    """A file-name-safe key: the same model, TensorRT, GPU and build settings give the same key."""
    settings = {
        "precision": options.precision,
        "batch": options.batch,
        "input_size": list(options.input_size) if options.input_size else None,
        "workspace_mb": options.settings.get("workspace_mb", str(DEFAULT_WORKSPACE_MB)),
        "trt": trt_version,
        "gpu": gpu,
    }
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]
    return f"{model_sha256[:16]}-trt{trt_version}-{options.precision}-{digest}"


def import_runtime() -> tuple[Any, Any]:
    try:
        import tensorrt as trt
    except ImportError as err:
        raise BackendUnavailable(
            f"backend 'tensorrt' needs the 'tensorrt' package: {_HINT}"
        ) from err
    try:
        import torch
    except ImportError as err:  # buffers are torch CUDA tensors
        raise BackendUnavailable(
            "backend 'tensorrt' needs a CUDA build of torch for its buffers:"
            " pip install 'visionrt[torch]'"
        ) from err
    if not torch.cuda.is_available():
        raise BackendUnavailable(f"TensorRT needs a CUDA GPU; torch {torch.__version__} sees none")
    return trt, torch


# Who builds an engine that a load does not find cached: the builder a caller installs on
# purpose (`visionrt.export.building`, which the command line opens), else nobody. Building one
# takes minutes, so a run that only loads says what to do instead of starting one unasked.
Builder = Callable[[Path, BackendOptions], Path]
_builders: list[Builder] = []
_builders_lock = threading.Lock()


def allow_building(builder: Builder) -> Callable[[], None]:
    """Let loads in this process build the engines they do not find, with `builder`, until the
    returned function is called."""
    with _builders_lock:
        _builders.append(builder)

    def undo() -> None:
        with _builders_lock:
            _builders.remove(builder)

    return undo


def cached_engine(model: Path, options: BackendOptions, trt_version: str, gpu: str) -> Path:
    """Where the engine for `model` with `options` is kept (whether it is there or not)."""
    key = engine_key(file_sha256(model), trt_version, gpu, options)
    return cache_dir(options) / f"{key}.engine"


def engine_for(model: Path, options: BackendOptions, cached: Path) -> Path:
    """The engine a load runs: `model` itself when it is one, else the one `cached` for it, else
    one the installed builder makes; a ModelLoadError saying how to build it when none is."""
    if model.suffix == ".engine":
        return model
    if cached.is_file():
        return cached
    with _builders_lock:
        builder = _builders[-1] if _builders else None
    if builder is None:
        size = "×".join(map(str, options.input_size)) if options.input_size else "its size"
        raise ModelLoadError(
            f"tensorrt: no engine for {model.name} ({options.precision}, batch {options.batch},"
            f" {size}) is built on this GPU yet, and this load builds none: `visionrt run`"
            " builds it first (minutes, once), or from Python load it inside `with"
            " visionrt.export.building():`"
        )
    return builder(model, options)


class TensorRTBackend(Backend):
    name = "tensorrt"

    def load(self, model: Path, options: BackendOptions) -> None:
        trt, torch = import_runtime()
        self._torch = torch
        index = int(options.device.split(":")[1]) if ":" in options.device else 0
        device = torch.device("cuda", index)
        torch.cuda.set_device(device)
        gpu = torch.cuda.get_device_name(device)
        engine_path = engine_for(
            model, options, cached_engine(model, options, trt.__version__, gpu)
        )
        runtime = trt.Runtime(trt.Logger(trt.Logger.WARNING))
        self._engine = runtime.deserialize_cuda_engine(engine_path.read_bytes())
        if self._engine is None:
            raise ModelLoadError(
                f"TensorRT {trt.__version__} cannot deserialize {engine_path}: engines only run"
                " on the TensorRT version and GPU they were built with"
            )
        self._context = self._engine.create_execution_context()
        self._stream = torch.cuda.Stream(device)
        self._device, self._lock = device, threading.Lock()
        names = [self._engine.get_tensor_name(i) for i in range(self._engine.num_io_tensors)]
        is_input = {n: self._engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT for n in names}
        self._dtypes = {
            n: getattr(torch, np.dtype(trt.nptype(self._engine.get_tensor_dtype(n))).name)
            for n in names
        }

        def spec(name: str) -> TensorSpec:
            shape = tuple(d if d >= 0 else None for d in self._engine.get_tensor_shape(name))
            return TensorSpec(name, shape, str(self._dtypes[name]).removeprefix("torch."))

        self._inputs = [n for n in names if is_input[n]]
        self._outputs = [n for n in names if not is_input[n]]
        inputs = tuple(spec(n) for n in self._inputs)
        if inputs and inputs[0].shape[0] is None:  # dynamic batch: the pipeline sends `batch`
            first = inputs[0]
            inputs = (TensorSpec(first.name, (options.batch, *first.shape[1:]), first.dtype),)
        self.info = BackendInfo(
            runtime="tensorrt",
            version=trt.__version__,
            device=str(device),
            precision=options.precision if model.suffix != ".engine" else "as built",
            inputs=inputs,
            outputs=tuple(spec(n) for n in self._outputs),
            details={"engine": str(engine_path), "gpu": torch.cuda.get_device_name(device)},
        )

    def infer(self, inputs: Mapping[str, Array]) -> list[Array]:
        torch = self._torch
        keep: list[Any] = []  # device inputs stay alive until the stream has run
        with self._lock, torch.inference_mode(), torch.cuda.stream(self._stream):
            for name in self._inputs:
                host = torch.from_numpy(np.ascontiguousarray(inputs[name])).pin_memory()
                tensor = host.to(self._device, non_blocking=True).to(self._dtypes[name])
                self._context.set_input_shape(name, tuple(tensor.shape))
                self._context.set_tensor_address(name, tensor.data_ptr())
                keep += (host, tensor)
            outputs = []
            for name in self._outputs:
                shape = tuple(self._context.get_tensor_shape(name))
                out = torch.empty(shape, dtype=self._dtypes[name], device=self._device)
                self._context.set_tensor_address(name, out.data_ptr())
                outputs.append(out)
            if not self._context.execute_async_v3(self._stream.cuda_stream):
                raise RuntimeError("TensorRT execute_async_v3 failed (see the TensorRT log)")
            host_outputs = [out.float().to("cpu", non_blocking=True) for out in outputs]
            self._stream.synchronize()
        return [out.numpy() for out in host_outputs]

    def close(self) -> None:
        for key in ("_context", "_engine"):
            self.__dict__.pop(key, None)
