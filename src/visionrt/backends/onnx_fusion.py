"""Rewrites of a converted graph's nodes into torch's fused kernels (`fuse_all`: each of them).

Attention as exported (a ViT's, Depth Anything's): MatMul(Q, Kᵀ) → Mul by a scale → Add a
constant mask → Softmax over the last axis → MatMul with V, five nodes that write the (L × L)
logits and probabilities out at every step: a quarter of Depth Anything v2-S's GPU time at 518
in fp16 went to that Softmax alone (scripts/gpu_profile.py on an H200). One call of
`scaled_dot_product_attention` computes the same thing (fused on CUDA: flash or
memory-efficient attention, accumulating in fp32; on the CPU in fp32 within 1e-6 of the nodes).

GELU as exported: x · ((erf(x / √2) + 1) · 0.5), five nodes a layer, each a pass over the MLP's
widest tensor; `F.gelu` (the erf form) is one.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from onnx import helper
from torch import Tensor, nn


class Attention(nn.Module):
    """softmax(Q·Kᵀ·scale + mask)·V from the graph's Q, Kᵀ (as exported) and V."""

    def __init__(self, scale: float) -> None:
        super().__init__()
        self.scale = scale

    def forward(self, q: Tensor, k_t: Tensor, v: Tensor, mask: Tensor | None = None) -> Tensor:
        if mask is not None and mask.dtype != q.dtype:
            mask = mask.to(q.dtype)
        return F.scaled_dot_product_attention(
            q, k_t.transpose(-2, -1), v, attn_mask=mask, scale=self.scale
        )


def fuse_all(
    nodes: Sequence[Any], outputs: Sequence[str], node_class: type, opset: int
) -> list[Any]:
    """`nodes` (of a graph of `opset`) with every rewrite of this module applied."""
    attention = fuse_attention(nodes, outputs, node_class, opset)
    return fuse_gelu(attention, outputs, node_class)


class Gelu(nn.Module):
    def forward(self, x: Tensor) -> Tensor:
        return F.gelu(x)


def fuse_gelu(nodes: Sequence[Any], outputs: Sequence[str], node_class: type) -> list[Any]:
    """`nodes` with each erf GELU replaced by one `Gelu` node (at the place of its last Mul)."""
    producer, uses, consumers = _index(nodes, outputs)
    replaced: dict[int, Any] = {}
    dropped: set[int] = set()
    for erf in nodes:
        if erf.op != "Erf" or not isinstance(erf.args[0], str):
            continue
        found = _match_gelu(erf, producer, uses, consumers)
        if found is None:
            continue
        pattern, x = found
        last = pattern[-1]
        proto = helper.make_node("Gelu", [x], list(last.outputs))
        replaced[id(last)] = node_class(proto, Gelu(), [x], [])
        dropped.update(id(n) for n in pattern[:-1])
    return [replaced.get(id(n), n) for n in nodes if id(n) not in dropped]


def _match_gelu(
    erf: Any, producer: dict[str, Any], uses: Counter[str], consumers: dict[str, list[Any]]
) -> tuple[list[Any], str] | None:
    """The nodes from x / √2 to x · (a·erf + b)·k with a·k = b·k = ½, and x's name."""
    scaled = producer.get(erf.args[0])
    if scaled is None or scaled.op not in ("Div", "Mul") or uses[erf.args[0]] != 1:
        return None
    x, constant = _split(scaled)
    if x is None or constant is None or constant.numel() != 1:
        return None
    inverse = float(constant) if scaled.op == "Mul" else 1.0 / float(constant)
    if scaled.op == "Div" and scaled.args[0] != x:  # c / x is no scale
        return None
    if not math.isclose(inverse, 0.5**0.5, rel_tol=1e-5):
        return None
    pattern, value = [scaled, erf], erf.outputs[0]
    a, b, times_x = 1.0, 0.0, False
    while True:
        after = consumers.get(value, [])
        if uses[value] != 1 or len(after) != 1:
            return None
        node = after[0]
        names = [arg for arg in node.args if isinstance(arg, str)]
        if node.op == "Mul" and len(node.args) == 2 and sorted(names) == sorted([value, x]):
            if times_x:
                return None
            times_x = True  # the multiply by x itself
        else:
            runtime, constant = _split(node)
            if runtime != value or constant is None or constant.numel() != 1:
                return None
            if node.op == "Add" and not times_x:
                b += float(constant)
            elif node.op == "Mul":
                a, b = a * float(constant), b * float(constant)
            else:
                return None
        pattern.append(node)
        value = node.outputs[0]
        if times_x and math.isclose(a, 0.5, rel_tol=1e-6) and math.isclose(b, 0.5, rel_tol=1e-6):
            return pattern, x


def _index(
    nodes: Sequence[Any], outputs: Sequence[str]
) -> tuple[dict[str, Any], Counter[str], dict[str, list[Any]]]:
    """Each value's producer, how often it is used (graph outputs count) and its users."""
    producer = {name: node for node in nodes for name in node.outputs}
    uses = Counter(a for node in nodes for a in node.args if isinstance(a, str))
    uses.update(outputs)
    consumers: dict[str, list[Any]] = {}
    for node in nodes:
        for a in node.args:
            if isinstance(a, str):
                consumers.setdefault(a, []).append(node)
    return producer, uses, consumers


def fuse_attention(
    nodes: Sequence[Any], outputs: Sequence[str], node_class: type, opset: int
) -> list[Any]:
    """`nodes` (the converter's, in order) with each attention pattern replaced by one
    `Attention` node (`node_class(proto, fn, args, consts)`, at the place of the pattern's last
    MatMul). A pattern whose intermediate values are used elsewhere is left as it is, and a
    Softmax over another axis than the last (before opset 13 its default axis is 1)."""
    producer, uses, consumers = _index(nodes, outputs)
    replaced: dict[int, Any] = {}  # id(last MatMul) → the fused node
    dropped: set[int] = set()
    for softmax in nodes:
        axis = softmax.attrs.get("axis", -1 if opset >= 13 else 1)
        if softmax.op != "Softmax" or axis != -1:
            continue
        found = _match(softmax, producer, uses, consumers)
        if found is None:
            continue
        pattern, (q, k_t, v), scale, mask = found
        last = pattern[-1]
        proto = helper.make_node("Attention", [q, k_t, v], list(last.outputs))
        args: list[str | int] = [q, k_t, v]
        consts = []
        if mask is not None:
            args.append(0)
            consts.append(mask)
        replaced[id(last)] = node_class(proto, Attention(scale), args, consts)
        dropped.update(id(n) for n in pattern[:-1])
    return [replaced.get(id(n), n) for n in nodes if id(n) not in dropped]


def _match(
    softmax: Any, producer: dict[str, Any], uses: Counter[str], consumers: dict[str, list[Any]]
) -> tuple[list[Any], tuple[str, str, str], float, Tensor | None] | None:
    """The nodes of the attention around `softmax` (first to last), Q/Kᵀ/V's names, the
    scale and the mask (None where it is all zeros); None where the graph is not that."""
    pattern = [softmax]
    if not isinstance(softmax.args[0], str):
        return None
    value = softmax.args[0]
    node = producer.get(value)
    mask: Tensor | None = None
    if node is not None and node.op == "Add" and uses[value] == 1:
        runtime, constant = _split(node)
        if runtime is None or constant is None:
            return None
        mask = None if not torch.any(constant) else constant
        pattern.insert(0, node)
        value, node = runtime, producer.get(runtime)
    scale = 1.0
    if node is not None and node.op in ("Mul", "Div") and uses[value] == 1:
        runtime, constant = _split(node)
        if runtime is None or constant is None or constant.numel() != 1:
            return None
        if node.op == "Div" and node.args[0] != runtime:  # c / x is no scale
            return None
        scale = float(constant) if node.op == "Mul" else 1.0 / float(constant)
        pattern.insert(0, node)
        value, node = runtime, producer.get(runtime)
    if node is None or node.op != "MatMul" or uses[value] != 1:
        return None
    if not all(isinstance(a, str) for a in node.args[:2]):
        return None
    pattern.insert(0, node)
    after = consumers.get(softmax.outputs[0], [])
    if uses[softmax.outputs[0]] != 1 or len(after) != 1:
        return None
    last = after[0]
    if last.op != "MatMul" or last.args[0] != softmax.outputs[0]:
        return None
    if not isinstance(last.args[1], str):
        return None
    return [*pattern, last], (node.args[0], node.args[1], last.args[1]), scale, mask


def _split(node: Any) -> tuple[str | None, Tensor | None]:
    """A binary node's runtime operand and its constant one (a buffer)."""
    if len(node.args) != 2:
        return None, None
    names = [a for a in node.args if isinstance(a, str)]
    buffers = [a for a in node.args if isinstance(a, int)]
    if len(names) != 1 or len(buffers) != 1:
        return None, None
    return names[0], getattr(node, f"c{buffers[0]}")
