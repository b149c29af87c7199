"""Find the nodes a quantizer must leave in float: a YOLO detection head and SiLU multiplies.

Works on a small runtime-neutral view of the graph (node name, type, producers), built from an
ONNX graph or an OpenVINO model, so both quantizers ignore the same subgraph.
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass, field
from typing import Any

_CONCAT_TYPES = ("Concat",)
_MUL_TYPES = ("Mul", "Multiply")
_SIGMOID_TYPES = ("Sigmoid",)
_OUTPUT_TYPES = ("Result",)  # OpenVINO's output nodes: not part of any module


@dataclass(slots=True)
class GraphView:
    """Nodes in topological order: name → op type, producer node names (one per data input,
    None for graph inputs and initializers), and which nodes produce the graph outputs."""

    types: dict[str, str] = field(default_factory=dict)
    producers: dict[str, list[str | None]] = field(default_factory=dict)
    outputs: list[str] = field(default_factory=list)

    def consumers(self) -> dict[str, list[str]]:
        result: dict[str, list[str]] = {name: [] for name in self.types}
        for name, sources in self.producers.items():
            for source in sources:
                if source is not None:
                    result[source].append(name)
        return result


def onnx_view(graph: Any) -> GraphView:
    """A view of an `onnx.GraphProto`."""
    produced_by = {out: node.name for node in graph.node for out in node.output}
    view = GraphView()
    for node in graph.node:
        view.types[node.name] = node.op_type
        view.producers[node.name] = [produced_by.get(name) for name in node.input]
    view.outputs = [produced_by[o.name] for o in graph.output if o.name in produced_by]
    return view


def openvino_view(model: Any) -> GraphView:
    """A view of an `openvino.Model` (friendly names, which the ONNX frontend keeps)."""
    view = GraphView()
    for op in model.get_ordered_ops():
        name = op.get_friendly_name()
        view.types[name] = op.get_type_name()
        view.producers[name] = [
            value.get_source_output().get_node().get_friendly_name() for value in op.inputs()
        ]
        if op.get_type_name() in _OUTPUT_TYPES:
            view.outputs.extend(p for p in view.producers[name] if p is not None)
    return view


def _module(name: str) -> str:
    """'/model.22/dfl/Reshape' → '/model.22/'; '' for names outside a module path."""
    match = re.match(r"^(/[^/]+\.\d+/)", name)
    return match.group(1) if match else ""


def _output_modules(view: GraphView) -> set[str]:
    """Modules of the nodes nearest the outputs that have one (a converter may rename the
    output node itself after the output tensor, as OpenVINO does: `output0`)."""
    modules: set[str] = set()
    frontier, seen = list(view.outputs), set(view.outputs)
    while frontier and not modules:
        modules = {_module(name) for name in frontier} - {""}
        upstream = [p for name in frontier for p in view.producers[name] if p is not None]
        frontier = [p for p in dict.fromkeys(upstream) if p not in seen]
        seen.update(frontier)
    return modules


def head_nodes(view: GraphView) -> list[str]:
    """The detection head: every node downstream of the per-level Concats that join the box and
    class branches, up to the outputs (Ultralytics: `/model.22/Concat`, `_1`, `_2` onward).

    The head module is the one that produces the graph output; its entry Concats are those
    directly in that module whose inputs all come from its sub-modules (the branch convs)."""
    modules = _output_modules(view)
    if len(modules) != 1:
        return []
    module = modules.pop()
    direct = re.compile(rf"^{re.escape(module)}[^/]+$")

    def is_entry(name: str) -> bool:
        data = [p for p in view.producers[name] if p is not None and view.types[p] != "Constant"]
        return bool(data) and all(p.startswith(module) and not direct.match(p) for p in data)

    entries = [
        name
        for name, op_type in view.types.items()
        if op_type in _CONCAT_TYPES and direct.match(name) and is_entry(name)
    ]
    if not entries:
        return []
    consumers = view.consumers()
    seen = set(entries)
    queue = deque(entries)
    while queue:
        for nxt in consumers[queue.popleft()]:
            if nxt not in seen and view.types[nxt] not in _OUTPUT_TYPES:
                seen.add(nxt)
                queue.append(nxt)
    return [name for name in view.types if name in seen]


def silu_multiplies(view: GraphView) -> list[str]:
    """`Mul(x, Sigmoid(x))` nodes: quantizing both inputs stops the runtime fusing SiLU into the
    preceding convolution (MEASUREMENTS.md: ~8 ms at 640 on two cores)."""
    found = []
    for name, op_type in view.types.items():
        sources = view.producers[name]
        if op_type not in _MUL_TYPES or len(sources) != 2:
            continue
        for first, second in (sources, sources[::-1]):
            if (
                second is not None
                and view.types.get(second) in _SIGMOID_TYPES
                and view.producers[second][:1] == [first]
            ):
                found.append(name)
                break
    return found


def fused_silu_count(view: GraphView) -> int:
    """SiLUs the converter already fused into one op (OpenVINO's `Swish`): nothing to ignore."""
    return sum(op_type == "Swish" for op_type in view.types.values())
