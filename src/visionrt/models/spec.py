"""What a model file says about itself: input size, batch, class names, output layout, metadata."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from visionrt.errors import ModelLoadError
from visionrt.types import BackendInfo


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """Facts read from an ONNX detector.

    `input_size` is (height, width) in pixels; `output_shape` keeps dynamic axes as -1;
    `end2end` is True when the export says the head already ran NMS.
    """

    path: Path
    input_name: str
    input_size: tuple[int, int]
    batch: int  # -1 when the batch axis is dynamic
    dynamic_hw: bool
    output_name: str
    output_shape: tuple[int, ...]
    class_names: tuple[str, ...]
    stride: int
    end2end: bool


def _dims(value_info: object) -> tuple[int, ...]:
    shape = value_info.type.tensor_type.shape  # type: ignore[attr-defined]
    return tuple(d.dim_value if d.HasField("dim_value") else -1 for d in shape.dim)


def _class_names(raw: str | None) -> tuple[str, ...]:
    if not raw:
        return ()
    try:
        names = ast.literal_eval(raw)
    except (ValueError, SyntaxError):
        return ()
    if isinstance(names, dict):
        return tuple(str(names[k]) for k in sorted(names))
    if isinstance(names, list | tuple):
        return tuple(str(n) for n in names)
    return ()


# OpenVINO's ONNX frontend keeps the ONNX metadata (class names, imgsz, ...) in the IR's rt_info
# under 'framework'; Ultralytics' own IR exports use 'model_info'.
IR_METADATA_KEYS = ("framework", "model_info")


def _read_ir(path: Path) -> Any:
    """The OpenVINO model at `path` (an ov.Model), or ModelLoadError in one line."""
    try:
        import openvino as ov
    except ImportError as err:
        raise ModelLoadError(f"{path} is an OpenVINO IR: pip install 'visionrt[openvino]'") from err
    try:
        return ov.Core().read_model(str(path))
    except Exception as err:
        raise ModelLoadError(f"{path} is not a readable OpenVINO IR ({err})") from err


def _read_ir_spec(path: Path) -> ModelSpec:
    model = _read_ir(path)
    meta: dict[str, str] = {}
    for section in IR_METADATA_KEYS:
        if model.has_rt_info([section]):
            items = model.get_rt_info([section]).astype(dict).items()
            meta = {key: value.astype(str) for key, value in items}
            break
    if len(model.inputs) != 1:
        raise ModelLoadError(f"{path}: expected one image input, got {len(model.inputs)} inputs")
    kind = model.inputs[0].get_element_type().get_type_name()
    if kind not in ("f32", "f16", "u8"):
        raise ModelLoadError(
            f"{path}: input '{model.inputs[0].get_any_name()}' is {kind}, not an image:"
            " expected f32, f16 or u8 pixels"
        )
    shape = model.inputs[0].get_partial_shape()
    dims = tuple(d.get_length() if d.is_static else -1 for d in shape)
    out_shape = model.outputs[0].get_partial_shape()
    out_dims = tuple(d.get_length() if d.is_static else -1 for d in out_shape)
    return _spec(
        path, model.inputs[0].get_any_name(), dims, model.outputs[0].get_any_name(), out_dims, meta
    )


def _spec(
    path: Path,
    input_name: str,
    dims: tuple[int, ...],
    output_name: str,
    out_dims: tuple[int, ...],
    meta: dict[str, str],
) -> ModelSpec:
    if len(dims) != 4 or dims[1] not in (3, -1):
        raise ModelLoadError(
            f"{path}: expected an image input shaped [N, 3, H, W], got {list(dims)}"
            f" for input '{input_name}'"
        )
    height, width = dims[2], dims[3]
    dynamic_hw = height <= 0 or width <= 0
    if dynamic_hw:
        imgsz = ast.literal_eval(meta["imgsz"]) if "imgsz" in meta else [640, 640]
        height, width = (imgsz, imgsz) if isinstance(imgsz, int) else (imgsz[0], imgsz[1])
    args = meta.get("args", "")
    end2end = meta.get("end2end", "").lower() == "true" or "'nms': True" in args
    return ModelSpec(
        path=path,
        input_name=input_name,
        input_size=(int(height), int(width)),
        batch=dims[0],
        dynamic_hw=dynamic_hw,
        output_name=output_name,
        output_shape=out_dims,
        class_names=_class_names(meta.get("names")),
        stride=int(meta.get("stride", 32) or 32),
        end2end=end2end,
    )


# Files that carry their own input/output description and metadata; the others (.pt, .engine)
# are described by the runtime that loads them (`spec_from_backend`).
SELF_DESCRIBING = (".onnx", ".xml")


def spec_from_backend(path: Path, info: BackendInfo) -> ModelSpec:
    """A ModelSpec from what a loaded runtime reports (for .pt checkpoints and TensorRT engines).

    Class names come from `info.details["class_names"]` when the runtime knows them."""
    in_spec, out_spec = info.inputs[0], info.outputs[0]
    dims = tuple(d if isinstance(d, int) and d > 0 else -1 for d in in_spec.shape)
    out_dims = tuple(d if isinstance(d, int) and d > 0 else -1 for d in out_spec.shape)
    if in_spec.dtype == "uint8" and len(dims) == 4:  # folded preprocessing: NHWC
        dims = (dims[0], dims[3], dims[1], dims[2])
    names = info.details.get("class_names") or ()
    meta = {"names": repr(list(names))} if names else {}
    return _spec(path, in_spec.name, dims, out_spec.name, out_dims, meta)


# ONNX element types of an image input the backends feed: float32, uint8 (folded
# preprocessing), float16.
IMAGE_INPUT_TYPES = (1, 2, 10)


def read_model_spec(path: str | Path) -> ModelSpec:
    """Read a detector's (ONNX or OpenVINO IR) input/output description and Ultralytics
    metadata."""
    import onnx

    path = Path(path)
    if not path.is_file():
        raise ModelLoadError(f"model file not found: {path}")
    if path.suffix == ".xml":
        return _read_ir_spec(path)
    if path.suffix not in SELF_DESCRIBING:
        raise ModelLoadError(
            f"{path}: a {path.suffix or 'suffix-less'} file is described by the runtime that"
            " loads it; expected an .onnx or OpenVINO .xml here"
        )
    if path.stat().st_size == 0:
        raise ModelLoadError(f"{path} is empty (0 bytes): not an ONNX model")
    model = load_onnx(path, external_data=False)
    # Protobuf parses many byte strings as an empty message: no graph means not a model.
    if not model.HasField("graph") or not (model.graph.node or model.graph.input):
        raise ModelLoadError(f"{path} is not an ONNX model (no graph in it)")
    graph = model.graph
    inputs = graph_inputs(model)
    if len(inputs) != 1:
        raise ModelLoadError(f"{path}: expected one image input, got {len(inputs)} inputs")
    if len(graph.output) < 1:
        raise ModelLoadError(f"{path}: the model has no outputs")
    elem_type = inputs[0].type.tensor_type.elem_type
    if elem_type not in IMAGE_INPUT_TYPES:
        kind = onnx.TensorProto.DataType.Name(elem_type).lower() if elem_type else "not a tensor"
        raise ModelLoadError(
            f"{path}: input '{inputs[0].name}' is {kind}, not an image: expected float32,"
            " float16 or uint8 pixels"
        )
    meta = {p.key: p.value for p in model.metadata_props}
    return _spec(
        path, inputs[0].name, _dims(inputs[0]), graph.output[0].name, _dims(graph.output[0]), meta
    )


def model_metadata(path: str | Path) -> dict[str, str]:
    """An ONNX file's metadata_props, or the `framework` rt_info OpenVINO keeps them in for an
    IR; {} for other files or when the runtime to read an IR is missing."""
    path = Path(path)
    if path.suffix == ".xml":
        try:
            return _read_ir_metadata(path)
        except ModelLoadError:
            return {}
    if path.suffix != ".onnx":
        return {}
    import onnx

    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as err:
        raise ModelLoadError(f"{path} is not a readable ONNX model ({err})") from err
    return {p.key: p.value for p in model.metadata_props}


def _read_ir_metadata(path: Path) -> dict[str, str]:
    try:
        import openvino as ov
    except ImportError as err:
        raise ModelLoadError(f"{path} is an OpenVINO IR: pip install 'visionrt[openvino]'") from err
    model = ov.Core().read_model(str(path))
    for section in IR_METADATA_KEYS:
        if model.has_rt_info([section]):
            items = model.get_rt_info([section]).astype(dict).items()
            return {key: value.astype(str) for key, value in items}
    return {}


def is_architecture_only(path: str | Path) -> bool:
    """True when the model says it has random weights (`architecture_only=true` metadata)."""
    return model_metadata(path).get("architecture_only", "").lower() == "true"


# Operators that hold INT8 quantization: QDQ pairs and integer kernels in ONNX, FakeQuantize
# (NNCF) in an OpenVINO IR, which also keeps an ONNX file's QDQ pairs as it reads them.
QUANTIZED_OPS = frozenset({
    "QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "QLinearConv",
    "QLinearMatMul", "ConvInteger", "MatMulInteger", "FakeQuantize",
})  # fmt: skip


def is_quantized(path: str | Path) -> bool:
    """True when the ONNX file or OpenVINO IR holds INT8 quantization (an INT8 precision is
    what such a file is, not a setting a runtime applies to a float one); False for others."""
    path = Path(path)
    if path.suffix == ".onnx":
        graph = load_onnx(path, external_data=False).graph
        return any(node.op_type in QUANTIZED_OPS for node in graph.node)
    if path.suffix != ".xml":
        return False
    model = _read_ir(path)
    return any(op.get_type_name() in QUANTIZED_OPS for op in model.get_ops())


def load_onnx(path: Path, external_data: bool = True) -> Any:
    """The ONNX model at `path`, or a one-line ModelLoadError."""
    import onnx

    try:
        return onnx.load(str(path), load_external_data=external_data)
    except Exception as err:
        raise ModelLoadError(f"{path} is not a readable ONNX model ({err})") from err


def graph_inputs(model: Any) -> list[Any]:
    """A model's real inputs: its graph inputs that are not initializers (constants)."""
    initializers = {init.name for init in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in initializers]


def save_checked(model: Any, dst: Path, failed: str) -> Path:
    """Write a rewritten `model` to `dst` once ONNX shape inference and the checker accept it
    (a ModelLoadError, `failed` then the first line of why, when not); atomic: a concurrent
    reader never sees half a file. Returns `dst`."""
    import onnx

    try:
        model = onnx.shape_inference.infer_shapes(model, strict_mode=True)
        onnx.checker.check_model(model)
    except Exception as err:
        first_line = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ModelLoadError(f"{failed}: {first_line}") from err
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(f".{dst.name}.tmp")
    onnx.save(model, str(tmp))
    tmp.replace(dst)
    return dst
