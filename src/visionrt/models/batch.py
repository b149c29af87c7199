"""Rewrite an ONNX model whose batch axis is fixed at 1 so that it runs at any batch."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from visionrt.errors import ConfigError, ModelLoadError
from visionrt.models.reshape import constant_tensors
from visionrt.models.spec import graph_inputs, load_onnx, save_checked

BATCH_AXIS = "batch"  # the name of the dynamic batch axis in a rewritten model
# Nodes whose outputs describe a tensor rather than hold its rows: they may drop the batch axis.
_METADATA_OPS = frozenset({"Shape", "Size"})
# A stand-in batch for shape inference: a number that is no dimension of the model at batch 1.
_PROBES = (7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47)


def _dims(model: Any) -> dict[str, tuple[int | None, ...]]:
    """Inferred shape of every tensor in `model` (unknown dimensions as None)."""
    import onnx

    inferred = onnx.shape_inference.infer_shapes(model, data_prop=True).graph
    dims: dict[str, tuple[int | None, ...]] = {i.name: tuple(i.dims) for i in inferred.initializer}
    for info in (*inferred.input, *inferred.value_info, *inferred.output):
        if info.type.tensor_type.HasField("shape"):
            shape = info.type.tensor_type.shape.dim
            dims[info.name] = tuple(d.dim_value if d.HasField("dim_value") else None for d in shape)
    return dims


def _label(node: Any) -> str:
    return f"{node.op_type} node '{node.name or node.output[0]}'"


def _dependent(graph: Any, image: str) -> set[str]:
    """Tensors computed from the image input (the rest are the same for every batch row)."""
    reached = {image}
    for node in graph.node:
        if reached.intersection(node.input):
            reached.update(node.output)
    return reached


class _Rebatch:
    """One pass over the graph at a probe batch: rewrites what hard-codes batch 1, and records
    the first node that loses the batch axis in a way no rewrite here understands."""

    def __init__(self, model: Any, image: str, probe: int) -> None:
        from onnx import numpy_helper

        self.graph, self.image, self.probe = model.graph, image, probe
        self.values = {name: numpy_helper.to_array(t) for name, t in constant_tensors(model.graph)}
        self.dims = _dims(model)
        self.dependent = _dependent(model.graph, image)
        self.produced = {out for node in model.graph.node for out in node.output}
        self.replaced: set[str] = set()  # shape constants that a batch-following copy replaced
        self.fixes: list[str] = []
        self.problem = ""

    def carries(self, name: str) -> bool:
        dims = self.dims.get(name) or (None,)
        return dims[0] == self.probe

    def run(self) -> None:
        before: list[tuple[int, list[Any]]] = []  # (node index, nodes to insert before it)
        for index, node in enumerate(self.graph.node):
            if node.op_type == "Reshape" and self.carries(node.input[0]):
                self._reshape(node)
            elif node.op_type == "Concat" and any(self.carries(name) for name in node.input):
                before.append((index, self._concat(node)))
            elif node.op_type not in _METADATA_OPS and any(self.carries(i) for i in node.input):
                self._check_kept(node)
        if any(nodes for _, nodes in before):
            nodes = list(self.graph.node)
            for index, added in reversed(before):
                nodes[index:index] = added
            del self.graph.node[:]
            self.graph.node.extend([*self._batch_dim(), *nodes])

    def _check_kept(self, node: Any) -> None:
        """Record `node` when one of its outputs no longer leads with the batch axis."""
        data = next(name for name in node.input if self.carries(name))
        for output in filter(None, node.output):  # "" is an omitted optional output
            dims = self.dims.get(output)
            if dims is None and not self.problem:
                self.problem = (
                    f"{_label(node)}: ONNX shape inference cannot follow the batch axis of"
                    f" '{data}' through it; the batch cannot be rewritten here"
                )
            elif dims is not None and (not dims or dims[0] != self.probe) and not self.problem:
                self.problem = (
                    f"{_label(node)} turns the batch axis of '{data}' into output '{output}'"
                    f" shaped {_show(dims, self.probe)}; the batch cannot be rewritten here"
                )

    def _reshape(self, node: Any) -> None:
        from onnx import numpy_helper

        target = self.values.get(node.input[1])
        if target is None or target.ndim != 1 or target.size == 0:
            self._check_kept(node)  # a computed target: fine if it keeps the batch
            return
        if target[0] != 1:  # 0 or -1 follow the batch already; others are checked
            self._check_kept(node)
            return
        allow_zero = any(a.name == "allowzero" and a.i for a in node.attribute)
        if allow_zero and -1 in target:
            self.problem = self.problem or (
                f"{_label(node)} reshapes to {target.tolist()} with allowzero=1 and a -1"
                " already: its leading 1 cannot follow the batch"
            )
            return
        name = f"{node.input[1]}/batch{'/allowzero' if allow_zero else ''}"
        if name not in self.values:
            follow = target.astype(np.int64)
            follow[0] = -1 if allow_zero else 0  # 0: copy the input's batch
            self.graph.initializer.append(numpy_helper.from_array(follow, name))
            self.values[name] = follow
        self.replaced.add(node.input[1])
        node.input[1] = name
        self.fixes.append(_label(node))

    def _concat(self, node: Any) -> list[Any]:
        """Expand batch-independent inputs (tokens, constants) that a per-sample Concat joins."""
        from onnx import helper, numpy_helper

        axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
        rank = len(self.dims.get(next(i for i in node.input if self.carries(i))) or ())
        if axis % max(rank, 1) == 0:
            self.problem = self.problem or (
                f"{_label(node)} concatenates along the batch axis; the batch cannot be"
                " rewritten here"
            )
            return []
        added = []
        for position, name in enumerate(node.input):
            dims = self.dims.get(name)
            if self.carries(name) or not dims or dims[0] != 1:
                continue
            if name in self.dependent:  # computed from the image, yet lost its batch upstream
                self.problem = self.problem or (
                    f"{_label(node)} joins '{name}' shaped {_show(dims, self.probe)}, computed from"
                    " the image without its batch axis, with per-sample tensors"
                )
                continue
            batched = f"{name}/batched"
            if batched not in self.produced:  # one expanded copy, whichever Concats use it
                ones = numpy_helper.from_array(np.ones(len(dims) - 1, np.int64), f"{name}/ones")
                self.graph.initializer.append(ones)
                shape = f"{name}/batch_shape"
                added += [
                    helper.make_node("Concat", ["batch/dim", ones.name], [shape], axis=0),
                    helper.make_node("Expand", [name, shape], [batched]),
                ]
                self.produced.add(batched)
            node.input[position] = batched
            self.fixes.append(f"{_label(node)} input '{name}'")
        return added

    def _batch_dim(self) -> list[Any]:
        """Nodes making 'batch/dim' (the image's batch as a 1-element int64), once."""
        from onnx import helper, numpy_helper

        if "batch/dim" in self.produced:
            return []
        index = numpy_helper.from_array(np.zeros(1, np.int64), "batch/index")
        self.graph.initializer.append(index)
        return [
            helper.make_node("Shape", [self.image], ["batch/shape"]),
            helper.make_node("Gather", ["batch/shape", "batch/index"], ["batch/dim"], axis=0),
        ]


def _show(dims: tuple[int | None, ...], probe: int) -> str:
    """Dims as a list, the probe batch shown as 'batch'."""
    shown = [BATCH_AXIS if d == probe else ("?" if d is None else d) for d in dims]
    return str(shown).replace("'", "")


def _batch_dims(infos: Any, what: str, src: Path) -> None:
    for info in infos:
        dims = info.type.tensor_type.shape.dim
        if not dims or dims[0].dim_value != 1:
            shown = [d.dim_value or d.dim_param or "?" for d in dims]
            raise ModelLoadError(
                f"{src}: {what} '{info.name}' shaped {shown} does not have its batch axis fixed"
                " at 1; only such models are rewritten for another batch"
            )


def rebatch_onnx(src: Path, dst: Path, batch: int | None = None) -> Path:
    """Write to `dst` a copy of `src`, whose image input and outputs have their batch axis fixed
    at 1, that runs at any batch (a dynamic axis named "batch") or, given `batch`, at that one.

    Reshape targets that hard-code the batch (a leading 1) copy it from their input instead (0,
    or -1 under allowzero=1); batch-independent tensors that a Concat joins with per-sample ones
    (constant tokens, ConstantOfShape/Expand/Tile of constant shapes) are expanded to the batch.
    Every other node must carry the batch axis through, as shape inference at a stand-in batch
    shows; the first that does not is named in a one-line ModelLoadError. Returns `dst`.
    """
    import onnx

    src, dst = Path(src), Path(dst)
    if batch is not None and batch < 1:
        raise ConfigError(f"batch: expected >= 1 or None (any batch), got {batch}")
    model = load_onnx(src)
    graph = model.graph
    inputs = graph_inputs(model)
    if len(inputs) != 1:
        raise ModelLoadError(f"{src}: expected one image input, got {len(inputs)}")
    _batch_dims(inputs, "input", src)
    _batch_dims(graph.output, "output", src)
    del graph.value_info[:]
    seen = {d for dims in _dims(model).values() for d in dims if d}
    probe = next((p for p in _PROBES if p not in seen), max(seen) + 1)
    declared = {o.name: onnx.TensorShapeProto() for o in graph.output}
    for output in graph.output:
        declared[output.name].CopyFrom(output.type.tensor_type.shape)
        output.type.tensor_type.ClearField("shape")  # inferred from here on, never merged
    inputs[0].type.tensor_type.shape.dim[0].dim_value = probe

    fixed: list[str] = []
    replaced: set[str] = set()
    for _ in range(len(graph.node) + 1):  # each pass fixes at least one node, or ends
        step = _Rebatch(model, inputs[0].name, probe)
        step.run()
        fixed += step.fixes
        replaced |= step.replaced
        if not step.fixes:
            break
    if step.problem:
        raise ModelLoadError(f"{src}: {step.problem}")
    producers = {out: node for node in graph.node for out in node.output}
    for name, shape in declared.items():
        got = step.dims.get(name) or ()
        expected = (probe, *(d.dim_value or None for d in shape.dim[1:]))
        if len(got) != len(expected) or any(
            e and e != g for e, g in zip(expected, got, strict=True)
        ):
            source = f" (from {_label(producers[name])})" if name in producers else ""
            raise ModelLoadError(
                f"{src}: output '{name}'{source} comes out {_show(got, probe)} at a batch of"
                f" {probe}, expected {_show(expected, probe)}"
            )

    used = {name for node in graph.node for name in node.input}
    kept = [i for i in graph.initializer if i.name not in replaced or i.name in used]
    del graph.initializer[:]
    graph.initializer.extend(kept)
    for info in (inputs[0], *graph.output):
        if info is not inputs[0]:
            info.type.tensor_type.shape.CopyFrom(declared[info.name])
        first = info.type.tensor_type.shape.dim[0]
        if batch is None:
            first.dim_param = BATCH_AXIS
        else:
            first.dim_value = batch
    model.doc_string = (model.doc_string + "\n" if model.doc_string else "") + (
        f"batch rewritten by visionrt: {'; '.join(fixed) or 'nothing hard-coded it'}"
    )
    return save_checked(model, dst, f"{src} rewritten for any batch fails ONNX checks")
