"""PyTorch: an ONNX graph (or an Ultralytics .pt) run eagerly, compiled, or as CUDA graphs."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from visionrt import hardware
from visionrt.backends.base import (
    ARRAYS,
    FRAMES,
    Array,
    Backend,
    BackendOptions,
    check_input_size,
    flag_setting,
)
from visionrt.backends.torch_checkpoint import load_pt
from visionrt.backends.torch_device import DeviceRunner, Then, capture_graph
from visionrt.errors import BackendUnavailable, ConfigError, ModelLoadError
from visionrt.types import BackendInfo, TensorSpec

COMPILE_MODES = ("none", "default", "reduce-overhead", "max-autotune")
_FLAGS = ("channels_last", "cuda_graphs", "cudnn_benchmark", "tf32")
INPUTS = ("auto", "frames", "arrays")
MAX_STREAMS = 8
_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
# The host letterbox's scale (preprocess.letterbox_into): the same float32 multiply on the
# device gives the same input values, but for the padding, which the host writes as
# float32(114 / 255), one ulp from 114 × float32(1 / 255).
_SCALE = float(np.float32(1.0 / 255.0))


def _load_onnx(
    path: Path, options: BackendOptions
) -> tuple[nn.Module, TensorSpec, TensorSpec, bool]:
    """The converted module, its input and output specs, and whether its batch is fixed at
    `options.batch` (an export dynamic in size is converted at the size and batch asked for:
    partial batches are then padded to it)."""
    import onnx

    from visionrt.backends.onnx_to_torch import convert_onnx

    try:
        proto = onnx.load(str(path))
    except Exception as err:
        raise ModelLoadError(f"{path} is not a readable ONNX model ({err})") from err
    dims = {
        v.name: [
            d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None
            for d in v.type.tensor_type.shape.dim
        ]
        for v in [*proto.graph.input, *proto.graph.output]
    }
    weights = {i.name for i in proto.graph.initializer}
    images = [i.name for i in proto.graph.input if i.name not in weights]
    if len(images) != 1:
        raise ModelLoadError(f"{path}: expected one image input, got {images}")
    in_dims = dims[images[0]]
    check_input_size(path, TensorSpec(images[0], tuple(in_dims), "float32"), options)
    fixed = len(in_dims) == 4 and None in in_dims[2:4] and options.input_size is not None
    # A dynamic-size export (Depth Anything's ViT): converted at the size asked for (`fixed`
    # implies the size; said again so that the type checker knows it).
    if fixed and options.input_size is not None:
        in_dims[2:4] = options.input_size
        shape = [options.batch if in_dims[0] is None else in_dims[0], *in_dims[1:]]
        module = convert_onnx(proto, shape)  # type: ignore[arg-type]
    else:
        module = convert_onnx(proto)
    out_dims = dims[module.output_names[0]]
    # The converter runs a static-batch export at any batch: report the batch asked for.
    return (
        module,
        TensorSpec(module.input_names[0], (options.batch, *in_dims[1:]), "float32"),
        TensorSpec(module.output_names[0], (options.batch, *out_dims[1:]), "float32"),
        fixed,
    )


def _input_form(
    settings: Mapping[str, str], cuda: bool, image: TensorSpec, batch: int
) -> tuple[str, int]:
    """(input form, streams): raw frames prepared on a CUDA device by default when batches
    hold several frames, host arrays otherwise; `input` frames or arrays to choose; `streams`
    concurrent batches on the device (2 on CUDA: one uploads while one computes).

    Batch 1 keeps host arrays: on an H200 (2026-11-27) one stream ran 381 FPS, p50 5.72 ms on
    them and 277 FPS, p50 6.58 ms on frames (~180 small device ops per batch, launched from
    Python, cost more than the host letterbox they replace), while 32 streams ran 1042 FPS on
    frames against 377 on arrays. On the CPU OpenCV letterboxes faster than torch."""
    choice = settings.get("input", "auto")
    if choice not in INPUTS:
        raise ConfigError(
            f"inference.settings.input: expected one of {', '.join(INPUTS)}, got '{choice}'"
        )
    raw = settings.get("streams", "2" if cuda else "1")
    if not (raw.isascii() and raw.isdigit() and 1 <= int(raw) <= MAX_STREAMS):
        raise ConfigError(f"inference.settings.streams: expected 1 to {MAX_STREAMS}, got '{raw}'")
    static = all(isinstance(d, int) and d > 0 for d in image.shape[2:4])
    frames = choice == "frames" or (choice == "auto" and cuda and batch > 1)
    if frames and not static:
        if choice == "frames":
            raise ConfigError(
                "inference.settings.input frames: the model's input size is dynamic; set"
                " inference.input_size"
            )
        frames = False
    return (FRAMES, int(raw)) if frames else (ARRAYS, 1)


def _folded(image: TensorSpec, model: Path) -> TensorSpec:
    """The input spec the host fills when folded: uint8 BGR NHWC at the model's size."""
    batch, channels, *hw = image.shape
    if channels != 3 or not all(isinstance(d, int) and d > 0 for d in hw):
        raise ConfigError(
            f"inference.fold_preprocess: {model.name} takes {image.shape}; folding needs 3"
            " channels and a fixed size (set inference.input_size)"
        )
    return TensorSpec(image.name, (batch, *hw, 3), "uint8")


class TorchBackend(Backend):
    name = "torch"
    stand_in = False  # FramesBackend: the module runs

    def load(self, model: Path, options: BackendOptions) -> None:
        settings = options.settings
        unknown = set(settings) - {*_FLAGS, "compile", "input", "streams"}
        if unknown:
            raise ConfigError(
                f"torch settings {sorted(unknown)} unknown: expected {', '.join(_FLAGS)},"
                " compile, input, streams"
            )
        device = torch.device(options.device)
        cuda = device.type == "cuda"
        visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if cuda:  # with its index: set_device and the info need one
            device = torch.device("cuda", device.index or 0)
            if (device.index or 0) >= visible:
                raise BackendUnavailable(
                    f"torch {torch.__version__} sees no CUDA device '{options.device}'"
                    f" ({visible} visible); install a CUDA build of torch"
                )
        if options.precision not in _DTYPES or (options.precision == "fp16" and not cuda):
            raise ConfigError(
                f"torch precision '{options.precision}' on {options.device}: expected fp32 or"
                " bf16 on cpu, fp32, fp16 or bf16 on cuda"
            )
        if options.precision == "bf16" and not cuda:
            hardware.require_cpu_bf16("torch")
        compile_mode = settings.get("compile", "none")
        if compile_mode not in COMPILE_MODES:
            raise ConfigError(
                f"inference.settings.compile: expected one of {', '.join(COMPILE_MODES)},"
                f" got '{compile_mode}'"
            )
        self._graphs = flag_setting(settings, "cuda_graphs", False)
        if self._graphs and (not cuda or compile_mode in ("reduce-overhead", "max-autotune")):
            raise ConfigError(
                "inference.settings.cuda_graphs needs device cuda, and compile none or default"
                " (reduce-overhead and max-autotune already capture CUDA graphs)"
            )
        # NHWC is faster on CUDA, and on the CPU too (oneDNN): YOLOv8s 640 on 2 shared AVX-512
        # cores took 88 vs 114 ms and 306 vs 418 ms per frame (median, two runs).
        self._channels_last = flag_setting(settings, "channels_last", True)
        if options.threads > 0:
            torch.set_num_threads(options.threads)  # process-wide: torch has no per-model pool
        details: dict[str, Any] = {"threads": torch.get_num_threads()}
        if cuda:  # process-wide switches too; recorded so a run says what it ran with
            torch.cuda.set_device(device)
            benchmark = flag_setting(settings, "cudnn_benchmark", True)
            tf32 = flag_setting(settings, "tf32", False)  # off: fp32 means fp32 unless asked
            torch.backends.cudnn.benchmark = benchmark
            torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = tf32
            details.update(cudnn_benchmark=benchmark, tf32=tf32, gpu=torch.cuda.get_device_name())
        if model.suffix == ".pt":
            # The model facts of a .pt (class names) are known only once it is loaded.
            module, input_spec, output_spec, details["class_names"] = load_pt(model, options)
            fixed_batch = False
        else:
            module, input_spec, output_spec, fixed_batch = _load_onnx(model, options)
        # bf16 through autocast: convolutions run in bf16 while the box decoding keeps its fp32
        # constants (anchors, strides); a plain .to(bfloat16) moved boxes by several pixels.
        self._autocast = options.precision == "bf16"
        module = module.to(device)
        if options.precision == "fp16":
            module = module.half()
        if self._channels_last:
            # Module.to takes memory_format (documented), but torch's overloads leave it out
            # (unused-ignore: without torch, an extra, its types are Any).
            module = module.to(memory_format=torch.channels_last)  # type: ignore[call-overload, unused-ignore]
        self._module: Any = module
        if compile_mode != "none":
            self._module = torch.compile(module, mode=compile_mode)
        self._device, self._cuda, self._input_name = device, cuda, input_spec.name
        form, streams = _input_form(settings, cuda, input_spec, options.batch)
        # Host arrays folded: the host letterboxes into uint8 BGR NHWC (as for OpenVINO's fold)
        # and the device converts, reorders and scales them (`_unfold`), inside the CUDA graph
        # where graphs are on: a quarter of the bytes up, no float work on the host.
        self._fold = options.fold_preprocess and form == ARRAYS
        if self._fold:
            input_spec = _folded(input_spec, model)
        self._dtype = torch.float16 if options.precision == "fp16" else torch.float32
        self._captured: dict[tuple[int, ...], tuple[Tensor, Any, list[Tensor]]] = {}
        self._pinned: dict[tuple[str, tuple[int, ...]], Tensor] = {}
        self._lock = threading.Lock()
        # Each model's host-input calls on a stream of its own: on the default stream a depth
        # model and a detector in two lanes of one run would wait for each other's kernels.
        self._stream = torch.cuda.Stream(device) if cuda else None
        details.update(source="ultralytics .pt" if model.suffix == ".pt" else "onnx")
        details.update(compile=compile_mode, cuda_graphs=self._graphs, autocast=self._autocast)
        details.update(channels_last=self._channels_last, fold_preprocess=self._fold)
        if form == FRAMES:
            self.concurrency = streams
            self._runner = DeviceRunner(
                self._run,
                device,
                self._dtype,
                self._channels_last,
                (int(input_spec.shape[2]), int(input_spec.shape[3])),  # type: ignore[arg-type]
                options.batch,
                self._graphs,
                streams,
                fixed_batch,
            )
            details.update(streams=streams)
        self.info = BackendInfo(
            runtime="torch",
            version=torch.__version__,
            device=str(device),
            precision=options.precision,
            inputs=(input_spec,),
            outputs=(output_spec,),
            details=details,
            input_form=form,
        )

    # -- the 'frames' input form: device tensors in and out (backends.base.FramesBackend) -----
    def device_scope(self) -> AbstractContextManager[None]:
        return self._runner.scope()

    def device_input(self, rows: int) -> Tensor:
        return self._runner.input(rows)

    def device_buffer(self, name: str, rows: int, shape: tuple[int, ...], dtype: Any) -> Tensor:
        return self._runner.buffer(name, rows, shape, dtype)

    def device_rows(self, rows: int) -> int:
        return self._runner.rows(rows)

    def prepare_device(self, key: Any, call: Callable[[], Any]) -> None:
        self._runner.prepare(key, call)

    def infer_device(self, images: Tensor, then: Then | None = None) -> list[Tensor]:
        with torch.inference_mode():
            return self._runner.infer(images, then)

    def _run(self, images: Tensor) -> list[Tensor]:
        with torch.autocast(self._device.type, torch.bfloat16, self._autocast, cache_enabled=False):
            return list(self._module(images))

    def _unfold(self, images: Tensor) -> Tensor:
        """Folded input (uint8 BGR NHWC) → the model's: RGB NCHW in [0, 1] at its precision,
        the values `letterbox_into` gives (float32 times float32(1/255), then cast; the
        padding within one ulp)."""
        rgb = images.flip(-1).permute(0, 3, 1, 2)  # an NHWC tensor viewed as NCHW
        return rgb.float().mul_(_SCALE).to(self._dtype, memory_format=self._layout())

    def _layout(self) -> Any:
        return torch.channels_last if self._channels_last else torch.contiguous_format

    def _forward(self, images: Tensor) -> list[Tensor]:
        """The model on an input as `infer` uploads it (folded: uint8, unfolded here)."""
        return self._run(self._unfold(images) if self._fold else images)

    def _buffer(self, role: str, shape: tuple[int, ...], dtype: Any = torch.float32) -> Tensor:
        key = (role, shape)
        if key not in self._pinned:
            self._pinned[key] = torch.empty(shape, dtype=dtype, pin_memory=True)
        return self._pinned[key]

    def _replay(self, images: Tensor) -> list[Tensor]:
        """Run through a CUDA graph captured for this input shape (captured on first sight)."""
        shape = tuple(images.shape)
        if shape not in self._captured:
            static = images.clone()
            self._captured[shape] = (static, *capture_graph(self._forward, static))
        static, graph, outputs = self._captured[shape]
        static.copy_(images)
        graph.replay()
        return outputs

    def infer(self, inputs: Mapping[str, Array]) -> list[Array]:
        dtype = np.uint8 if self._fold else np.float32
        array = np.ascontiguousarray(inputs[self._input_name], dtype=dtype)
        layout = self._layout()
        with self._lock, torch.inference_mode():
            if not self._cuda:
                images = torch.from_numpy(array)
                if not self._fold:
                    images = images.contiguous(memory_format=layout)
                return [out.float().numpy() for out in self._forward(images)]
            host = self._buffer("in", array.shape, torch.uint8 if self._fold else torch.float32)
            host.numpy()[...] = array
            with torch.cuda.stream(self._stream):
                images = host.to(self._device, non_blocking=True)
                if not self._fold:
                    images = images.to(self._dtype, memory_format=layout)
                outputs = self._replay(images) if self._graphs else self._forward(images)
                staged = []
                for index, out in enumerate(outputs):
                    pinned = self._buffer(f"out{index}", tuple(out.shape))
                    pinned.copy_(out.float(), non_blocking=True)
                    staged.append(pinned)
            assert self._stream is not None
            self._stream.synchronize()
            # Copies: the pinned buffers are reused by the next call while callers hold results.
            return [pinned.numpy().copy() for pinned in staged]

    def close(self) -> None:
        for key in ("_module", "_captured", "_pinned", "_runner"):
            self.__dict__.pop(key, None)
