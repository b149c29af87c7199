"""Convert an ONNX graph of standard CNN ops into a torch.nn.Module that runs it node by node.

onnx2torch would do this, but it imports torchvision at import time; this covers the ops of
Ultralytics detector exports (v5/v8/11/12, static shapes) and fails by naming any other op.
Weights become parameters and buffers, so `.half()`, `.to(device)`, channels_last and
`torch.compile` apply; shape-like inputs (Reshape's shape, Slice's bounds, Resize's scales) must
be constant and become plain ints. Subgraphs whose inputs are all constant are folded here.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, cast

import numpy as np
import onnx
import torch
from onnx import helper, numpy_helper
from torch import Tensor, nn

from visionrt.backends.onnx_fusion import fuse_all
from visionrt.backends.onnx_ops import (
    BUILDERS,
    STATIC_INPUTS,
    SUPPORTED_OPS,
    WEIGHT_INPUTS,
    BuildContext,
    Fn,
)
from visionrt.errors import ModelLoadError

__all__ = ["SUPPORTED_OPS", "OnnxModule", "convert_onnx"]


class _Node(nn.Module):
    """One ONNX node: its function, and its constant tensor operands as buffers."""

    def __init__(self, proto: onnx.NodeProto, fn: Fn, args: list[str | int | None],
                 consts: list[Tensor]):  # fmt: skip
        super().__init__()
        self.op, self.outputs = proto.op_type, list(proto.output)
        self.attrs = _attrs(proto)  # what a rewrite checks (onnx_fusion)
        self.args = args  # per operand: a runtime value's name, a buffer's index, or None
        self.fn = fn  # an nn.Module (Conv) is registered as a child
        for i, tensor in enumerate(consts):
            self.register_buffer(f"c{i}", tensor)

    def forward(self, env: dict[str, Tensor]) -> Any:
        values = [
            None if a is None else env[a] if isinstance(a, str) else getattr(self, f"c{a}")
            for a in self.args
        ]
        while values and values[-1] is None:
            values.pop()
        return self.fn(*values)


class OnnxModule(nn.Module):
    """An ONNX graph as a torch module: `forward(*inputs)` returns the graph outputs in order."""

    def __init__(self, nodes: list[_Node], inputs: list[str], outputs: list[str]):
        super().__init__()
        self.nodes = nn.ModuleList(nodes)
        self.input_names, self.output_names = inputs, outputs
        last_use = {a: i for i, node in enumerate(nodes) for a in node.args if isinstance(a, str)}
        self._release: list[list[str]] = [[] for _ in nodes]  # values to free after each node
        for name, index in last_use.items():
            if name not in outputs:
                self._release[index].append(name)

    def forward(self, *inputs: Tensor) -> tuple[Tensor, ...]:
        env = dict(zip(self.input_names, inputs, strict=True))
        nodes = cast("Iterable[_Node]", self.nodes)  # torch types a ModuleList's items as Module
        for node, dead in zip(nodes, self._release, strict=True):
            result = node(env)
            outs = (result,) if isinstance(result, Tensor) else result
            env.update(zip(node.outputs, outs, strict=True))
            for name in dead:
                del env[name]
        return tuple(env[name] for name in self.output_names)


def _attrs(node: onnx.NodeProto) -> dict[str, Any]:
    values = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    return {k: v.decode() if isinstance(v, bytes) else v for k, v in values.items()}


def _tensor(array: np.ndarray) -> Tensor:
    tensor = torch.from_numpy(np.array(array))  # a copy: the proto's buffer is read-only
    return tensor.float() if tensor.is_floating_point() else tensor


def _constant(attrs: dict[str, Any]) -> Tensor:
    if "value" in attrs:
        return _tensor(numpy_helper.to_array(attrs["value"]))
    for key, dtype in (("value_float", np.float32), ("value_floats", np.float32),
                       ("value_int", np.int64), ("value_ints", np.int64)):  # fmt: skip
        if key in attrs:
            return _tensor(np.asarray(attrs[key], dtype))
    raise ModelLoadError(f"Constant attributes {sorted(attrs)} unsupported")


def fix_input_shape(model: onnx.ModelProto, shape: Sequence[int]) -> onnx.ModelProto:
    """A copy of `model` whose image input has `shape` where its axes are dynamic (a batch or a
    size left open by the export): shape inference then makes every Shape node, and what is
    computed from it (a ViT's position-embedding grid, its Range and Where), a constant."""
    fixed = onnx.ModelProto()
    fixed.CopyFrom(model)
    weights = {i.name for i in fixed.graph.initializer}
    image = next(i for i in fixed.graph.input if i.name not in weights)
    dims = image.type.tensor_type.shape.dim
    if len(dims) != len(shape):
        raise ModelLoadError(f"input {image.name}: {len(dims)} axes, asked for {list(shape)}")
    for dim, size in zip(dims, shape, strict=True):
        if not dim.HasField("dim_value") or dim.dim_value <= 0:
            dim.Clear()
            dim.dim_value = int(size)
    # The export's own shapes of the values inside are symbolic ('2*s70'): inferred again.
    del fixed.graph.value_info[:]
    for output in fixed.graph.output:
        output.type.tensor_type.ClearField("shape")
    return fixed


def _sample(
    fn: Any, operands: list[tuple[int, str]], consts: dict[str, Tensor], samples: dict[str, Tensor]
) -> tuple[Tensor, ...]:
    """A node's outputs as meta tensors, from its operands' (a module's weights made meta too);
    where an op has no meta kernel, computed for real on zeros of those shapes."""

    def run(device: str) -> Any:
        def value(name: str) -> Tensor | None:
            if not name:
                return None
            tensor = consts[name] if name in consts else samples[name]
            if device == "meta":
                return tensor.to("meta")
            return torch.zeros(tensor.shape, dtype=tensor.dtype) if tensor.is_meta else tensor

        values = [value(n) for _, n in operands]
        while values and values[-1] is None:
            values.pop()
        if isinstance(fn, nn.Module):
            state = {k: v.to(device) for k, v in fn.state_dict().items() if v is not None}
            return torch.func.functional_call(fn, state, tuple(values))
        return fn(*values)

    with torch.no_grad():
        try:
            result = run("meta")
        except Exception:  # no meta kernel: the real thing, on zeros
            result = run("cpu")
    outs = (result,) if isinstance(result, Tensor) else tuple(result)
    return tuple(out.to("meta") for out in outs)


def convert_onnx(
    model: onnx.ModelProto, input_shape: Sequence[int] | None = None, fuse: bool = True
) -> OnnxModule:
    """`model` as an OnnxModule in eval mode with fp32 weights on the CPU; `input_shape` fixes
    the image input's dynamic axes first (`fix_input_shape`); `fuse` runs attention and GELU as
    one fused call each (onnx_fusion).

    Raises ModelLoadError naming every unsupported op, or a node whose shape input is dynamic.
    """
    if input_shape is not None:
        model = fix_input_shape(model, input_shape)
    unsupported = sorted({n.op_type for n in model.graph.node} - SUPPORTED_OPS)
    domains = {n.domain for n in model.graph.node} - {"", "ai.onnx"}
    if unsupported or domains:
        raise ModelLoadError(
            f"the torch backend's ONNX converter does not support op(s)"
            f" {', '.join(unsupported + sorted(domains))};"
            f" supported: {', '.join(sorted(SUPPORTED_OPS))}. Use --backend onnxruntime"
        )
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 13)
    try:
        graph = onnx.shape_inference.infer_shapes(model, data_prop=True).graph
    except Exception as err:  # onnx raises several types for an invalid graph
        raise ModelLoadError(f"ONNX shape inference failed: {err}") from err
    shapes = {
        v.name: [
            d.dim_value if d.HasField("dim_value") else None for d in v.type.tensor_type.shape.dim
        ]
        for v in [*graph.value_info, *graph.input, *graph.output]
    }
    consts = {i.name: _tensor(numpy_helper.to_array(i)) for i in graph.initializer}
    inputs = [i.name for i in graph.input if i.name not in consts]
    # With the input's shape fixed, every value's shape is known by running the graph once as
    # it is built, on meta tensors (shapes, no data, no arithmetic): ONNX's shape inference loses
    # a ViT's token count at its data-dependent reshapes, and a Shape node there must still
    # become a constant.
    samples: dict[str, Tensor] = {}
    if input_shape is not None and inputs:
        samples[inputs[0]] = torch.empty(tuple(int(d) for d in input_shape), device="meta")
    batch = shapes[inputs[0]][0] if inputs and shapes.get(inputs[0]) else None
    defined = set(inputs) | set(consts)
    nodes: list[_Node] = []
    for proto in graph.node:
        attrs, where = _attrs(proto), f"node '{proto.name or proto.output[0]}' ({proto.op_type})"
        missing = [n for n in proto.input if n and n not in defined]
        if missing:
            raise ModelLoadError(f"{where}: input(s) {missing} undefined (graph not sorted?)")
        defined.update(proto.output)
        if proto.op_type == "Constant":
            consts[proto.output[0]] = _constant(attrs)
            continue
        if proto.op_type == "Shape":
            shape = shapes.get(proto.input[0])
            if proto.input[0] in consts:
                shape = list(consts[proto.input[0]].shape)
            elif proto.input[0] in samples:
                shape = list(samples[proto.input[0]].shape)
            if not shape or None in shape:
                raise ModelLoadError(f"{where}: needs a static input shape; export dynamic=False")
            consts[proto.output[0]] = torch.tensor(shape[attrs.get("start", 0) : attrs.get("end")])
            continue
        static_at, weight_at = (
            STATIC_INPUTS.get(proto.op_type, set()),
            WEIGHT_INPUTS.get(proto.op_type, set()),
        )
        for i in static_at | weight_at:
            if i < len(proto.input) and proto.input[i] and proto.input[i] not in consts:
                raise ModelLoadError(f"{where}: input {i} must be constant (static export)")
        data = shapes.get(proto.input[0]) if proto.input else None
        runtime_data = bool(proto.input) and proto.input[0] not in consts
        ctx = BuildContext(
            name=proto.name or proto.output[0],
            attrs=attrs,
            static={
                i: consts[n].tolist() for i, n in enumerate(proto.input) if n and i in static_at
            },
            weights={i: consts[n] for i, n in enumerate(proto.input) if i in weight_at and n},
            opset=opset,
            batch=batch if runtime_data and data and data[0] == batch else None,
        )
        try:
            fn = BUILDERS[proto.op_type](ctx, len(proto.output))
        except (KeyError, TypeError, ValueError) as err:
            raise ModelLoadError(f"{where}: cannot convert ({err!r})") from err
        operands = [(i, n) for i, n in enumerate(proto.input) if i not in static_at | weight_at]
        if all(not n or n in consts for _, n in operands):  # constant subgraph: fold it now
            with torch.no_grad():
                folded = fn(*[consts[n] if n else None for _, n in operands])
            folded = (folded,) if isinstance(folded, Tensor) else folded
            consts.update(zip(proto.output, folded, strict=True))
            continue
        buffers = [consts[n] for _, n in operands if n in consts]
        buffer_index = iter(range(len(buffers)))
        args = [next(buffer_index) if n in consts else (n or None) for _, n in operands]
        nodes.append(_Node(proto, fn, args, buffers))
        if samples:
            samples.update(zip(proto.output, _sample(fn, operands, consts, samples), strict=True))
    outputs = [o.name for o in graph.output]
    if any(name in consts for name in outputs):
        raise ModelLoadError("a graph output is constant; nothing to run")
    if fuse:
        nodes = fuse_all(nodes, outputs, _Node, opset)
    return OnnxModule(nodes, inputs, outputs).eval().requires_grad_(False)
