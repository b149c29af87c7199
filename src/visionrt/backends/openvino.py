"""Intel OpenVINO: ONNX or IR on CPU/GPU/NPU, precision hints, streams, folded preprocessing."""

from __future__ import annotations

import queue
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from visionrt import hardware
from visionrt.backends.base import Array, Backend, BackendOptions, check_input_size
from visionrt.errors import BackendUnavailable, ConfigError, ModelLoadError
from visionrt.types import BackendInfo, TensorSpec

_HINTS = ("latency", "throughput")
_SETTINGS = ("hint", "streams", "requests", "cache")
# Our precision name → (OpenVINO element type for INFERENCE_PRECISION_HINT, capability to need).
_PRECISION_HINTS = {"fp32": ("f32", "FP32"), "bf16": ("bf16", "BF16"), "fp16": ("f16", "FP16")}
_EXECUTED = {"f32": "fp32", "bf16": "bf16", "f16": "fp16"}
_DTYPES = {"f32": "float32", "f16": "float16", "bf16": "bfloat16", "u8": "uint8", "i8": "int8"}


def _device_name(device: str) -> str:
    """visionrt device ('cpu', 'gpu:1') → OpenVINO device ('CPU', 'GPU.1')."""
    kind, _, index = device.partition(":")
    return kind.upper() + (f".{index}" if index else "")


def _positive_int(key: str, raw: str) -> int:
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise ConfigError(f"inference.settings.{key}: expected an integer >= 1, got '{raw}'")
    return value


def _specs(ports: Any) -> tuple[TensorSpec, ...]:
    specs = []
    for port in ports:
        shape = port.get_partial_shape()
        dims = tuple(d.get_length() if d.is_static else None for d in shape)
        dtype = _DTYPES.get(port.get_element_type().get_type_name(), str(port.get_element_type()))
        specs.append(TensorSpec(port.get_any_name(), dims, dtype))
    return tuple(specs)


def _is_quantized(model: Any) -> bool:
    """True when the graph holds INT8 quantization (FakeQuantize, or QDQ read from ONNX)."""
    types = {op.get_type_name() for op in model.get_ops()}
    return bool(types & {"FakeQuantize", "QuantizeLinear", "DequantizeLinear"})


class OpenVINOBackend(Backend):
    name = "openvino"

    def load(self, model: Path, options: BackendOptions) -> None:
        import openvino as ov

        unknown = sorted(set(options.settings) - set(_SETTINGS))
        if unknown:
            raise ConfigError(
                f"inference.settings: openvino does not know {', '.join(unknown)};"
                f" expected {', '.join(_SETTINGS)}"
            )
        hint = options.settings.get("hint", "latency").lower()
        if hint not in _HINTS:
            raise ConfigError(
                f"inference.settings.hint: expected latency or throughput, got {hint}"
            )
        core = ov.Core()
        device = _device_name(options.device)
        if options.precision == "bf16" and device.split(".")[0] == "CPU":
            # Before OpenVINO's own capability check, so the refusal reads as torch's does.
            hardware.require_cpu_bf16("openvino")
        if device.split(".")[0] not in {d.split(".")[0] for d in core.available_devices}:
            raise BackendUnavailable(
                f"OpenVINO has no {device} device here (available:"
                f" {', '.join(core.available_devices)})"
            )
        config: dict[str, Any] = {"PERFORMANCE_HINT": hint.upper()}
        if options.precision in _PRECISION_HINTS:
            element, capability = _PRECISION_HINTS[options.precision]
            capabilities = core.get_property(device, "OPTIMIZATION_CAPABILITIES")
            if capability not in capabilities:
                raise ConfigError(
                    f"openvino precision '{options.precision}': {device}"
                    f" ({core.get_property(device, 'FULL_DEVICE_NAME')}) lacks {capability}"
                    f" (it has {', '.join(capabilities)}); use fp32 or another device"
                )
            config["INFERENCE_PRECISION_HINT"] = element
        elif device.split(".")[0] == "CPU" and not hardware.cpu_has_bf16():
            # An INT8 model's float parts run bf16 where OpenVINO finds BF16; with the flag
            # hidden (VISIONRT_HIDE_CPU_FEATURES) they run f32, as on a CPU without it.
            config["INFERENCE_PRECISION_HINT"] = "f32"
        if options.threads > 0:
            config["INFERENCE_NUM_THREADS"] = options.threads
        if not options.pin_threads:
            config["ENABLE_CPU_PINNING"] = False
        if "streams" in options.settings:
            config["NUM_STREAMS"] = _positive_int("streams", options.settings["streams"])
        cache = options.settings.get("cache")
        if cache:
            config["CACHE_DIR"] = str(Path(cache).expanduser())

        source = Path(model)
        try:
            graph = core.read_model(str(source))
        except Exception as err:
            raise ModelLoadError(f"OpenVINO cannot read {source}: {_first_line(err)}") from err
        if len(graph.inputs) != 1:
            raise ModelLoadError(f"{source}: expected one image input, got {len(graph.inputs)}")
        quantized = _is_quantized(graph)
        if options.precision == "int8" and not quantized:
            raise ConfigError(
                f"openvino precision 'int8': {source.name} is not quantized; make an INT8 model"
                " with `visionrt export --to openvino-int8` and load that"
            )
        _make_static(graph, source, options)
        if options.fold_preprocess:
            graph = _fold_preprocess(graph)
        try:
            self.compiled = core.compile_model(graph, device, config)
        except Exception as err:
            raise ModelLoadError(
                f"OpenVINO cannot compile {source} for {device}: {_first_line(err)}"
            ) from err

        optimal = int(self.compiled.get_property("OPTIMAL_NUMBER_OF_INFER_REQUESTS"))
        default = optimal if hint == "throughput" else 1
        raw_requests = options.settings.get("requests")
        requests = _positive_int("requests", raw_requests) if raw_requests else default
        self._requests: queue.Queue[Any] = queue.Queue()
        for _ in range(requests):
            self._requests.put(self.compiled.create_infer_request())
        self.concurrency = requests

        executed = self.compiled.get_property("INFERENCE_PRECISION_HINT").get_type_name()
        float_precision = _EXECUTED.get(executed, executed)
        devices = self.compiled.get_property("EXECUTION_DEVICES")
        self.info = BackendInfo(
            runtime="openvino",
            version=ov.get_version(),
            device=",".join(d.lower().replace(".", ":") for d in devices),
            precision="int8" if quantized else float_precision,
            inputs=_specs(self.compiled.inputs),
            outputs=_specs(self.compiled.outputs),
            details={
                "model": str(source),
                "hint": hint,
                "streams": int(self.compiled.get_property("NUM_STREAMS")),
                "nireq": requests,
                "optimal_nireq": optimal,
                "threads": int(self.compiled.get_property("INFERENCE_NUM_THREADS")),
                "pinned": _pinned(self.compiled),
                "float_precision": float_precision,
                "fold_preprocess": options.fold_preprocess,
                "capabilities": list(core.get_property(device, "OPTIMIZATION_CAPABILITIES")),
            },
        )
        self._outputs = list(self.compiled.outputs)

    def infer(self, inputs: Mapping[str, Array]) -> list[Array]:
        request = self._requests.get()
        try:
            # Synchronous infer releases the GIL; share_inputs avoids copying the prepared
            # buffer (it is not touched until infer returns); outputs are copied out because
            # the request reuses its output tensors on the next call.
            result = request.infer(dict(inputs), share_inputs=True, share_outputs=False)
            return [np.asarray(result[port]) for port in self._outputs]
        finally:
            self._requests.put(request)

    def close(self) -> None:
        self.__dict__.pop("_requests", None)
        self.__dict__.pop("compiled", None)


def _pinned(compiled: Any) -> bool | None:
    """Whether the CPU plugin pins its threads to cores (None: a device that does not say)."""
    try:
        return bool(compiled.get_property("ENABLE_CPU_PINNING"))
    except RuntimeError:
        return None


def _first_line(err: BaseException) -> str:
    """The first line of an OpenVINO error that is not a C++ source location."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    reasons = [line for line in lines if not line.startswith("Exception from ")]
    return (reasons or lines or [type(err).__name__])[0]


def _make_static(graph: Any, source: Path, options: BackendOptions) -> None:
    """Fix a dynamic input to [batch, 3, H, W] (the CPU plugin is faster on static shapes), H
    and W being the file's own or, where it leaves them dynamic, `options.input_size`; refuse a
    batch that a static model cannot take and a size that a static one does not have."""
    shape = graph.inputs[0].get_partial_shape()
    dims = [d.get_length() if d.is_static else 0 for d in shape]
    if len(dims) == 4:  # NCHW here: preprocessing is folded in after this
        check_input_size(source, TensorSpec("", tuple(dims), "float32"), options)
    if shape.is_static:
        if options.batch > 1 and shape[0].get_length() != options.batch:
            raise ConfigError(
                f"openvino batch {options.batch}: {source.name} has a static batch of"
                f" {shape[0].get_length()}; export it with a dynamic batch axis"
            )
        return
    if len(dims) != 4:
        return
    height, width = (dims[2], dims[3]) if dims[2] and dims[3] else options.input_size or (0, 0)
    if not (height and width):
        return  # dynamic in H and W and no size asked for: left dynamic
    try:
        graph.reshape([options.batch, 3, height, width])
    except Exception as err:
        raise ConfigError(
            f"openvino cannot fix {source.name} to [{options.batch}, 3, {height}, {width}]:"
            f" {_first_line(err)}"
        ) from err


def _fold_preprocess(graph: Any) -> Any:
    """Make `graph` take uint8 BGR NHWC and convert, reorder, scale and transpose inside it."""
    from openvino import Layout, Type
    from openvino.preprocess import ColorFormat, PrePostProcessor

    shape = graph.inputs[0].get_partial_shape()
    if shape.rank.is_dynamic or len(shape) != 4 or shape[1] != 3:
        raise ModelLoadError(
            f"fold_preprocess: expected an NCHW input with 3 channels, got {shape}"
        )
    ppp = PrePostProcessor(graph)
    image = ppp.input()
    image.tensor().set_element_type(Type.u8).set_layout(Layout("NHWC")).set_color_format(
        ColorFormat.BGR
    )
    image.model().set_layout(Layout("NCHW"))
    image.preprocess().convert_element_type(Type.f32).convert_color(ColorFormat.RGB).scale(255.0)
    return ppp.build()
