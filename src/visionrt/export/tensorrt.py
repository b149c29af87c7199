"""TensorRT engines built from ONNX, for the GPU and TensorRT version that build them, into the
cache the backend loads from: by `visionrt export`, by `tune`, and for a load that finds none
while `building()` is open (the command line opens it; a library load builds nothing)."""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from visionrt.backends.base import BackendOptions
from visionrt.backends.tensorrt import (
    DEFAULT_WORKSPACE_MB,
    allow_building,
    cache_dir,
    cached_engine,
    import_runtime,
)
from visionrt.errors import BackendUnavailable, ConfigError, ModelLoadError


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

    from visionrt.models import read_model_spec

    spec = read_model_spec(source)  # a model dynamic in H and W: built at its metadata's size
    size = spec.input_size if spec.dynamic_hw else None
    engine = build_engine(source, BackendOptions(device="cuda", precision="fp16", input_size=size))
    shutil.copyfile(engine, target)
    return {"precision": "fp16", "gpu": gpu_name(), "kept_in_float": []}


@contextmanager
def building(say: Callable[[str], None] | None = None) -> Iterator[None]:
    """While open, a TensorRT load in this process that finds no engine cached for its model and
    options builds one (minutes, once: later loads find it), telling `say` before and after."""

    def build(model: Path, options: BackendOptions) -> Path:
        if say is not None:
            say(
                f"tensorrt: building the engine for {model.name} ({options.precision}, batch"
                f" {options.batch}) on this GPU: minutes, once (kept in {cache_dir(options)})"
            )
        start = time.monotonic()
        engine = build_engine(model, options)
        if say is not None:
            say(f"tensorrt: engine built in {time.monotonic() - start:.0f} s: {engine}")
        return engine

    undo = allow_building(build)
    try:
        yield
    finally:
        undo()


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
    trt, torch = import_runtime()
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
    engine_path = cached_engine(model, options, trt.__version__, gpu)
    folder = engine_path.parent
    folder.mkdir(parents=True, exist_ok=True)
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
