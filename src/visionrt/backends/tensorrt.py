"""NVIDIA TensorRT: build an engine from ONNX (cached on disk), then run it with execute_async_v3.

`build_engine` is separate from running so that `export`/`tune` can build ahead of time; `load`
reads a `.engine` file directly, or builds (or reuses) the cached engine for an `.onnx`. Buffers
are torch CUDA tensors, so torch (a CUDA build) is needed alongside TensorRT.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from visionrt.backends.base import Array, Backend, BackendOptions
from visionrt.errors import BackendUnavailable, ConfigError, ModelLoadError
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


def _import() -> tuple[Any, Any]:
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


def _workspace_bytes(options: BackendOptions) -> int:
    raw = options.settings.get("workspace_mb", str(DEFAULT_WORKSPACE_MB))
    if not raw.isdigit() or int(raw) < 1:
        raise ConfigError(
            f"inference.settings.workspace_mb: expected a positive integer, got {raw}"
        )
    return int(raw) << 20


def qdq_problem(proto: Any) -> str:
    """Why an ONNX model is not one TensorRT's explicit quantization takes ("" when it is):
    TensorRT needs QuantizeLinear nodes whose zero points are int8 zeros."""
    from onnx import TensorProto, numpy_helper

    quantize = [n for n in proto.graph.node if n.op_type == "QuantizeLinear"]
    if not quantize:
        return "has no QuantizeLinear nodes"
    constants = {t.name: t for t in proto.graph.initializer}
    for node in quantize:
        zero = constants.get(node.input[2]) if len(node.input) > 2 else None
        if zero is None:
            continue  # no zero point: int8 zeros by the operator's default (uint8 needs one)
        if zero.data_type != TensorProto.INT8:
            return f"quantizes to {TensorProto.DataType.Name(zero.data_type).lower()} ({node.name})"
        if numpy_helper.to_array(zero).any():
            return f"has a non-zero zero point ({node.name})"
    return ""


def build_engine(model: Path, options: BackendOptions) -> Path:
    """Build (or find in the cache) the engine for `model` with `options`; returns its path."""
    trt, torch = _import()
    if options.precision not in ("fp32", "fp16", "int8"):
        raise ConfigError(f"tensorrt precision '{options.precision}': expected fp32, fp16 or int8")
    import onnx

    proto = onnx.load(str(model), load_external_data=False)
    if options.precision == "int8" and (problem := qdq_problem(proto)):
        raise ConfigError(
            f"tensorrt int8 needs a symmetric int8 QDQ ONNX, and {model.name} {problem}: make one"
            " with `visionrt export --to onnx-int8-sym`"
        )
    gpu = torch.cuda.get_device_name()
    folder = cache_dir(options)
    folder.mkdir(parents=True, exist_ok=True)
    engine_path = folder / f"{engine_key(file_sha256(model), trt.__version__, gpu, options)}.engine"
    if engine_path.is_file():
        return engine_path
    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    network = builder.create_network(0)  # explicit batch is the only mode in TensorRT 10
    parser = trt.OnnxParser(network, logger)
    if not parser.parse_from_file(str(model)):
        errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
        raise ModelLoadError(f"TensorRT cannot parse {model}: {errors}")
    config = builder.create_builder_config()
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, _workspace_bytes(options))
    if options.precision in ("fp16", "int8"):
        config.set_flag(trt.BuilderFlag.FP16)  # INT8 layers fall back to FP16, not FP32
    if options.precision == "int8":
        config.set_flag(trt.BuilderFlag.INT8)
    timing_path = folder / f"timing-trt{trt.__version__}-{gpu.replace(' ', '_')}.cache"
    timing = config.create_timing_cache(timing_path.read_bytes() if timing_path.is_file() else b"")
    config.set_timing_cache(timing, ignore_mismatch=False)
    tensor = network.get_input(0)
    if any(d < 0 for d in tensor.shape):
        dims = tuple(tensor.shape)
        static = len(dims) == 4 and min(dims[2:4]) > 0
        height, width = dims[2:4] if static else options.input_size or (-1, -1)
        if height < 0:
            raise ConfigError(
                f"tensorrt: {model.name} is dynamic in H and W; set inference.input_size to"
                " build an engine for one size"
            )
        profile = builder.create_optimization_profile()
        fixed = (options.batch, tensor.shape[1] if tensor.shape[1] > 0 else 3, height, width)
        smallest = (1, *fixed[1:]) if tensor.shape[0] < 0 else fixed
        profile.set_shape(tensor.name, smallest, fixed, fixed)
        config.add_optimization_profile(profile)
    blob = builder.build_serialized_network(network, config)
    if blob is None:
        raise ModelLoadError(f"TensorRT failed to build an engine for {model} (see log above)")
    timing_path.write_bytes(memoryview(config.get_timing_cache().serialize()))
    partial = engine_path.with_suffix(".partial")
    partial.write_bytes(memoryview(blob))
    partial.replace(engine_path)  # atomic: a crashed build never leaves a truncated engine
    return engine_path


class TensorRTBackend(Backend):
    name = "tensorrt"

    def load(self, model: Path, options: BackendOptions) -> None:
        trt, torch = _import()
        self._torch = torch
        index = int(options.device.split(":")[1]) if ":" in options.device else 0
        device = torch.device("cuda", index)
        torch.cuda.set_device(device)
        engine_path = model if model.suffix == ".engine" else build_engine(model, options)
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
