"""Loading an Ultralytics detection checkpoint (.pt) for the torch backend, safely: the classes
the pickle names are read first (nothing imported or run), refused unless every one is on an
exact allow-list, then unpickled with weights_only=True and exactly those classes."""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from visionrt.backends.base import BackendOptions
from visionrt.errors import BackendUnavailable, ModelLoadError
from visionrt.types import TensorSpec


class _FirstOutput(nn.Module):
    """Ultralytics models return (predictions, feature maps) in eval mode; keep predictions."""

    def __init__(self, net: nn.Module):
        super().__init__()
        self.net = net

    def forward(self, images: Tensor) -> tuple[Tensor]:
        out = self.net(images)
        return (out[0] if isinstance(out, list | tuple) else out,)


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


def load_pt(
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
