"""PyTorch: an ONNX graph (or an Ultralytics .pt) run eagerly, compiled, or as CUDA graphs."""

from __future__ import annotations

import importlib
import importlib.util
import threading
from collections.abc import Mapping
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
from visionrt.backends.torch_device import DeviceRunner, capture_graph
from visionrt.errors import BackendUnavailable, ConfigError, ModelLoadError
from visionrt.types import BackendInfo, TensorSpec

COMPILE_MODES = ("none", "default", "reduce-overhead", "max-autotune")
_FLAGS = ("channels_last", "cuda_graphs", "cudnn_benchmark", "tf32")
INPUTS = ("auto", "frames", "arrays")
MAX_STREAMS = 8
_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


class _FirstOutput(nn.Module):
    """Ultralytics models return (predictions, feature maps) in eval mode; keep predictions."""

    def __init__(self, net: nn.Module):
        super().__init__()
        self.net = net

    def forward(self, images: Tensor) -> tuple[Tensor]:
        out = self.net(images)
        return (out[0] if isinstance(out, list | tuple) else out,)


def _load_onnx(path: Path, options: BackendOptions) -> tuple[nn.Module, TensorSpec, TensorSpec]:
    import onnx

    from visionrt.backends.onnx_to_torch import convert_onnx

    try:
        proto = onnx.load(str(path))
    except Exception as err:
        raise ModelLoadError(f"{path} is not a readable ONNX model ({err})") from err
    module = convert_onnx(proto)
    if len(module.input_names) != 1:
        raise ModelLoadError(f"{path}: expected one image input, got {module.input_names}")
    dims = {
        v.name: [
            d.dim_value if d.HasField("dim_value") else None for d in v.type.tensor_type.shape.dim
        ]
        for v in [*proto.graph.input, *proto.graph.output]
    }
    in_dims, out_dims = dims[module.input_names[0]], dims[module.output_names[0]]
    check_input_size(path, TensorSpec(module.input_names[0], tuple(in_dims), "float32"), options)
    if None in in_dims[2:4] and options.input_size:
        in_dims[2:4] = options.input_size  # a dynamic-size export runs at the size asked for
    # The converter runs a static-batch export at any batch: report the batch asked for.
    return (
        module,
        TensorSpec(module.input_names[0], (options.batch, *in_dims[1:]), "float32"),
        TensorSpec(module.output_names[0], (options.batch, *out_dims[1:]), "float32"),
    )


# Exactly the classes an Ultralytics detection checkpoint (YOLOv5u, YOLOv8, YOLO11) pickles,
# and the namespace an unstripped one keeps its training arguments in (newer, older releases).
# A prefix rule ("torch.*") let a pickle call torch.fx.graph_module._forward_from_src, which
# execs code; a name off this list is refused before any module it names is imported.
PT_ALLOWED_GLOBALS = frozenset(
    [
        "torch.nn.modules.activation.SiLU",
        "torch.nn.modules.batchnorm.BatchNorm2d",
        "torch.nn.modules.container.ModuleList",
        "torch.nn.modules.container.Sequential",
        "torch.nn.modules.conv.Conv2d",
        "torch.nn.modules.linear.Identity",
        "torch.nn.modules.pooling.MaxPool2d",
        "torch.nn.modules.upsampling.Upsample",
        "ultralytics.nn.tasks.DetectionModel",
        "ultralytics.nn.modules.block.Attention",
        "ultralytics.nn.modules.block.Bottleneck",
        "ultralytics.nn.modules.block.C2f",
        "ultralytics.nn.modules.block.C2PSA",
        "ultralytics.nn.modules.block.C3",
        "ultralytics.nn.modules.block.C3k",
        "ultralytics.nn.modules.block.C3k2",
        "ultralytics.nn.modules.block.DFL",
        "ultralytics.nn.modules.block.PSABlock",
        "ultralytics.nn.modules.block.SPPF",
        "ultralytics.nn.modules.conv.Concat",
        "ultralytics.nn.modules.conv.Conv",
        "ultralytics.nn.modules.conv.DWConv",
        "ultralytics.nn.modules.head.Detect",
        "ultralytics.utils.IterableSimpleNamespace",
        "ultralytics.yolo.utils.IterableSimpleNamespace",
    ]
)


_DETECTION_MODEL = "ultralytics.nn.tasks.DetectionModel"


def _detection_globals(path: Path) -> list[str]:
    """The globals `path` pickles (read from the pickle: nothing imported or run), or a
    ModelLoadError saying what the file is when it is surely no Ultralytics detection checkpoint
    (empty, TorchScript, another Ultralytics task, tensors only); other pickled classes are
    refused by `_allowed_classes`."""
    if path.stat().st_size == 0:
        raise ModelLoadError(f"{path} is empty (0 bytes): not a torch checkpoint")
    try:
        names = list(torch.serialization.get_unsafe_globals_in_checkpoint(str(path)))
    except Exception as err:
        if "torchscript" in str(err).lower():
            raise ModelLoadError(
                f"{path} is a TorchScript module (torch.jit.save), not an Ultralytics checkpoint:"
                " export the model to ONNX and load that"
            ) from err
        raise ModelLoadError(f"{path}: not a readable torch checkpoint ({err})") from err
    tasks = sorted(
        n for n in names if n.startswith("ultralytics.nn.tasks.") and n != _DETECTION_MODEL
    )
    if tasks and _DETECTION_MODEL not in names:
        kind = tasks[0].rpartition(".")[2].removesuffix("Model").lower() or tasks[0]
        raise ModelLoadError(
            f"{path} is an Ultralytics {kind} checkpoint, not a detector: visionrt runs"
            " detection models (DetectionModel)"
        )
    if not names:
        raise ModelLoadError(
            f"{path} holds tensors and no model (a state dict?): expected a whole Ultralytics"
            " detection checkpoint (or an ONNX export)"
        )
    return names


def _allowed_classes(path: Path, names: list[str]) -> list[Any]:
    """The classes `path` pickles (`names`), all on PT_ALLOWED_GLOBALS, imported; refused
    otherwise."""
    refused = sorted(set(names) - PT_ALLOWED_GLOBALS)
    if refused:
        raise ModelLoadError(
            f"{path}: refusing to unpickle {', '.join(refused)}: not a class of an Ultralytics"
            " detection checkpoint (export it to ONNX where it was made and load that)"
        )
    classes = []
    for name in names:
        module, _, attribute = name.rpartition(".")
        try:
            classes.append(getattr(importlib.import_module(module), attribute))
        except (ImportError, AttributeError) as err:
            raise ModelLoadError(
                f"{path} needs {name}, which the installed ultralytics lacks ({err});"
                " upgrade ultralytics or export the checkpoint to ONNX"
            ) from err
    return classes


def _class_names(names: object) -> list[str]:
    """Class names in id order: Ultralytics keeps a dict id → name, older YOLOv5 a list."""
    if isinstance(names, dict):
        return [str(names[key]) for key in sorted(names)]
    return [str(name) for name in names] if isinstance(names, list | tuple) else []


def _load_pt(
    path: Path, options: BackendOptions
) -> tuple[nn.Module, TensorSpec, TensorSpec, list[str]]:
    names = _detection_globals(path)
    if importlib.util.find_spec("ultralytics") is None and _DETECTION_MODEL in names:
        raise BackendUnavailable(
            f"{path.name} is an Ultralytics detection checkpoint and needs the 'ultralytics'"
            " package (pip install ultralytics), or export it to ONNX: yolo export model=..."
            " format=onnx"
        )
    # weights_only=True with exactly the allow-listed classes the pickle names: nothing else in
    # the file can run code on load.
    classes = _allowed_classes(path, names)
    try:
        with torch.serialization.safe_globals(classes):
            checkpoint = torch.load(str(path), map_location="cpu", weights_only=True)
        net = checkpoint.get("ema") if checkpoint.get("ema") is not None else checkpoint["model"]
    except Exception as err:
        raise ModelLoadError(f"{path}: not a loadable Ultralytics checkpoint ({err})") from err
    net = net.float().eval()
    for layer in net.modules():  # as Ultralytics' own loader does for older pickles
        if isinstance(layer, nn.Upsample) and not hasattr(layer, "recompute_scale_factor"):
            layer.recompute_scale_factor = None
    net = net.fuse() if hasattr(net, "fuse") else net
    imgsz = checkpoint.get("train_args", {}).get("imgsz", 640)
    height, width = options.input_size or ((imgsz, imgsz) if isinstance(imgsz, int) else imgsz)
    anchors = sum((height // int(s)) * (width // int(s)) for s in net.stride)
    names = _class_names(getattr(net, "names", None))
    classes_count = len(names) or int(net.yaml.get("nc", 80))
    return (
        _FirstOutput(net).requires_grad_(False),
        TensorSpec("images", (options.batch, 3, height, width), "float32"),
        TensorSpec("output0", (options.batch, 4 + classes_count, anchors), "float32"),
        names,
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
            module, input_spec, output_spec, details["class_names"] = _load_pt(model, options)
        else:
            module, input_spec, output_spec = _load_onnx(model, options)
        # bf16 through autocast: convolutions run in bf16 while the box decoding keeps its fp32
        # constants (anchors, strides); a plain .to(bfloat16) moved boxes by several pixels.
        self._autocast = options.precision == "bf16"
        module = module.to(device)
        if options.precision == "fp16":
            module = module.half()
        if self._channels_last:
            module = module.to(memory_format=torch.channels_last)
        self._module: Any = module
        if compile_mode != "none":
            self._module = torch.compile(module, mode=compile_mode)
        self._device, self._cuda, self._input_name = device, cuda, input_spec.name
        form, streams = _input_form(settings, cuda, input_spec, options.batch)
        self._dtype = torch.float16 if options.precision == "fp16" else torch.float32
        self._captured: dict[tuple[int, ...], tuple[Tensor, Any, list[Tensor]]] = {}
        self._pinned: dict[tuple[str, tuple[int, ...]], Tensor] = {}
        self._lock = threading.Lock()
        details.update(source="ultralytics .pt" if model.suffix == ".pt" else "onnx")
        details.update(compile=compile_mode, cuda_graphs=self._graphs, autocast=self._autocast)
        details.update(channels_last=self._channels_last)
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

    def infer_device(self, images: Tensor) -> list[Tensor]:
        with torch.inference_mode():
            return self._runner.infer(images)

    def _run(self, images: Tensor) -> list[Tensor]:
        with torch.autocast(self._device.type, torch.bfloat16, self._autocast, cache_enabled=False):
            return list(self._module(images))

    def _buffer(self, role: str, shape: tuple[int, ...]) -> Tensor:
        key = (role, shape)
        if key not in self._pinned:
            self._pinned[key] = torch.empty(shape, dtype=torch.float32, pin_memory=True)
        return self._pinned[key]

    def _replay(self, images: Tensor) -> list[Tensor]:
        """Run through a CUDA graph captured for this input shape (captured on first sight)."""
        shape = tuple(images.shape)
        if shape not in self._captured:
            static = images.clone()
            self._captured[shape] = (static, *capture_graph(self._run, static))
        static, graph, outputs = self._captured[shape]
        static.copy_(images)
        graph.replay()
        return outputs

    def infer(self, inputs: Mapping[str, Array]) -> list[Array]:
        array = np.ascontiguousarray(inputs[self._input_name], dtype=np.float32)
        layout = torch.channels_last if self._channels_last else torch.contiguous_format
        with self._lock, torch.inference_mode():
            if not self._cuda:
                images = torch.from_numpy(array).contiguous(memory_format=layout)
                return [out.float().numpy() for out in self._run(images)]
            host = self._buffer("in", array.shape)
            host.numpy()[...] = array
            images = host.to(self._device, non_blocking=True)
            images = images.to(self._dtype, memory_format=layout)
            outputs = self._replay(images) if self._graphs else self._run(images)
            staged = []
            for index, out in enumerate(outputs):
                pinned = self._buffer(f"out{index}", tuple(out.shape))
                pinned.copy_(out.float(), non_blocking=True)
                staged.append(pinned)
            torch.cuda.current_stream(self._device).synchronize()
            # Copies: the pinned buffers are reused by the next call while callers hold results.
            return [pinned.numpy().copy() for pinned in staged]

    def close(self) -> None:
        for key in ("_module", "_captured", "_pinned", "_runner"):
            self.__dict__.pop(key, None)
