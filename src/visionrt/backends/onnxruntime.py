"""ONNX Runtime: CPU provider, plus CUDA and TensorRT providers when onnxruntime-gpu has them."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from visionrt.backends.base import Array, Backend, BackendOptions, check_input_size, flag_setting
from visionrt.errors import BackendUnavailable, ConfigError, ModelLoadError
from visionrt.paths import cache_root
from visionrt.types import BackendInfo, TensorSpec

_DTYPES = {"tensor(float)": "float32", "tensor(float16)": "float16", "tensor(uint8)": "uint8"}


# `spin`: idle workers spin between parallel sections (default true); `plain`: a session with the
# runtime's defaults only (the baseline benchmarks compare the pipeline with); the rest: CUDA.
SETTINGS = ("spin", "plain", "cudnn_conv_algo_search", "arena_extend_strategy")


def _specs(args: list[Any]) -> tuple[TensorSpec, ...]:
    return tuple(TensorSpec(a.name, tuple(a.shape), _DTYPES.get(a.type, a.type)) for a in args)


def _providers(options: BackendOptions, available: list[str]) -> list[Any]:
    device = options.device.split(":")[0]
    device_id = int(options.device.split(":")[1]) if ":" in options.device else 0
    cache = str(options.cache_dir or cache_root() / "trt")
    cuda = (
        "CUDAExecutionProvider",
        {
            "device_id": device_id,
            "cudnn_conv_algo_search": options.settings.get("cudnn_conv_algo_search", "EXHAUSTIVE"),
            "arena_extend_strategy": options.settings.get(
                "arena_extend_strategy", "kSameAsRequested"
            ),
        },
    )
    wanted: list[Any] = ["CPUExecutionProvider"]
    if device == "cuda":
        wanted = [cuda, "CPUExecutionProvider"]
    elif device == "tensorrt":
        trt = (
            "TensorrtExecutionProvider",
            {
                "device_id": device_id,
                "trt_fp16_enable": options.precision == "fp16",
                "trt_int8_enable": options.precision == "int8",
                "trt_engine_cache_enable": True,
                "trt_engine_cache_path": cache,
                "trt_timing_cache_enable": True,
                "trt_timing_cache_path": cache,
            },
        )
        wanted = [trt, cuda, "CPUExecutionProvider"]
    first = wanted[0] if isinstance(wanted[0], str) else wanted[0][0]
    if first not in available:
        raise BackendUnavailable(
            f"ONNX Runtime has no {first} here (available: {', '.join(available)});"
            " install onnxruntime-gpu: pip install 'visionrt[gpu]'"
        )
    return wanted


class OnnxRuntimeBackend(Backend):
    name = "onnxruntime"

    def load(self, model: Path, options: BackendOptions) -> None:
        import onnxruntime as ort

        if options.precision not in ("fp32", "fp16", "int8"):
            raise ConfigError(
                f"onnxruntime precision '{options.precision}': expected fp32, or fp16/int8 with"
                " an artifact from `visionrt export` (or device tensorrt)"
            )
        unknown = set(options.settings) - set(SETTINGS)
        if unknown:
            raise ConfigError(
                f"onnxruntime settings {sorted(unknown)} unknown: expected {', '.join(SETTINGS)}"
            )
        session_options = ort.SessionOptions()  # `plain`: the runtime's own defaults, untouched
        if flag_setting(options.settings, "plain", False):
            if options.threads > 0:
                session_options.intra_op_num_threads = options.threads
        else:
            session_options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
            if options.threads > 0:
                session_options.intra_op_num_threads = options.threads
            session_options.inter_op_num_threads = 1
            # Spinning stays on (the runtime's default): without it the workers sleep between
            # parallel sections and wake late, 10% slower here (Zen 5) and 15-25% on Ice Lake.
            # Decode and preprocessing still get their share: they run at a lower priority.
            spin = "1" if flag_setting(options.settings, "spin", True) else "0"
            session_options.add_session_config_entry("session.intra_op.allow_spinning", spin)
        providers = _providers(options, ort.get_available_providers())
        try:
            self.session = ort.InferenceSession(str(model), session_options, providers=providers)
        except Exception as err:
            raise ModelLoadError(f"ONNX Runtime cannot load {model}: {err}") from err
        inputs = _specs(self.session.get_inputs())
        check_input_size(model, inputs[0], options)
        used = self.session.get_providers()
        self.info = BackendInfo(
            runtime="onnxruntime",
            version=ort.__version__,
            device=options.device if used[0] != "CPUExecutionProvider" else "cpu",
            precision=options.precision,
            inputs=inputs,
            outputs=_specs(self.session.get_outputs()),
            details={
                "providers": used,
                "threads": options.threads or "default",
                "model": str(model),
            },
        )
        self._output_names = [o.name for o in self.info.outputs]

    def infer(self, inputs: Mapping[str, Array]) -> list[Array]:
        return self.session.run(self._output_names, dict(inputs))

    def close(self) -> None:
        self.__dict__.pop("session", None)
