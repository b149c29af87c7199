"""The ONNX ops the ONNX→torch converter knows (onnx_to_torch.py): for each op type, a builder
that turns one node's attributes and constant inputs into a torch callable or module, and which
input positions must be constant."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from onnx import helper
from torch import Tensor, nn

from visionrt.errors import ModelLoadError

Fn = Callable[..., Any]

# Input positions that must be constant: plain values (shapes, bounds) or weights.
STATIC_INPUTS = {
    "Reshape": {1}, "Split": {1}, "Slice": {1, 2, 3, 4}, "Resize": {1, 2, 3}, "Squeeze": {1},
    "Unsqueeze": {1}, "Clip": {1, 2}, "ReduceMean": {1}, "ReduceMax": {1}, "ReduceSum": {1},
    "Expand": {1},
}  # fmt: skip
WEIGHT_INPUTS = {
    "Conv": {1, 2}, "ConvTranspose": {1, 2}, "BatchNormalization": {1, 2, 3, 4},
    "LayerNormalization": {1, 2},
}  # fmt: skip


@dataclass(frozen=True, slots=True)
class BuildContext:
    """One node as a builder sees it: attributes, constant values and the facts it needs."""

    name: str
    attrs: dict[str, Any]
    static: dict[int, Any]  # constant inputs as Python lists or numbers
    weights: dict[int, Tensor]
    opset: int
    batch: int | None  # the model's static batch, when it is the data input's first axis


def _pads(ctx: BuildContext, dims: int) -> tuple[int, ...]:
    if ctx.attrs.get("auto_pad", "NOTSET") not in ("NOTSET", "VALID"):
        raise ModelLoadError(f"node '{ctx.name}': auto_pad={ctx.attrs['auto_pad']} unsupported")
    pads = list(ctx.attrs.get("pads", [0] * 2 * dims))
    if pads[:dims] != pads[dims:]:
        raise ModelLoadError(f"node '{ctx.name}': asymmetric pads {pads} unsupported")
    return tuple(pads[:dims])


def _conv(ctx: BuildContext, transpose: bool = False) -> nn.Module:
    weight, bias = ctx.weights[1], ctx.weights.get(2)
    dims = weight.dim() - 2
    if dims not in (1, 2, 3):
        raise ModelLoadError(f"node '{ctx.name}': {dims}-d convolution unsupported")
    kind = getattr(nn, f"Conv{'Transpose' if transpose else ''}{dims}d")
    group = int(ctx.attrs.get("group", 1))
    if transpose:  # weight is (in, out / group, *kernel)
        in_ch, out_ch = weight.shape[0], weight.shape[1] * group
    else:  # weight is (out, in / group, *kernel)
        in_ch, out_ch = weight.shape[1] * group, weight.shape[0]
    extra = {"output_padding": tuple(ctx.attrs.get("output_padding", [0] * dims))}
    module = kind(
        in_ch, out_ch, tuple(weight.shape[2:]), stride=tuple(ctx.attrs.get("strides", [1] * dims)),
        padding=_pads(ctx, dims), dilation=tuple(ctx.attrs.get("dilations", [1] * dims)),
        groups=group, bias=bias is not None, **(extra if transpose else {}),
    )  # fmt: skip
    module.weight = nn.Parameter(weight, requires_grad=False)
    if bias is not None:
        module.bias = nn.Parameter(bias, requires_grad=False)
    return module


class _BatchNorm(nn.Module):
    """Inference batch norm for any rank (nn.BatchNorm2d insists on 4-D)."""

    weight: Tensor  # buffers, registered in __init__
    bias: Tensor
    mean: Tensor
    var: Tensor

    def __init__(self, scale: Tensor, bias: Tensor, mean: Tensor, var: Tensor, eps: float):
        super().__init__()
        self.eps = eps
        for name, tensor in (("weight", scale), ("bias", bias), ("mean", mean), ("var", var)):
            self.register_buffer(name, tensor)

    def forward(self, x: Tensor) -> Tensor:
        return F.batch_norm(x, self.mean, self.var, self.weight, self.bias, False, 0.0, self.eps)


def _pool(ctx: BuildContext, kind: str) -> Fn:
    kernel = tuple(ctx.attrs["kernel_shape"])
    dims = len(kernel)
    stride = tuple(ctx.attrs.get("strides", [1] * dims))
    padding, ceil = _pads(ctx, dims), bool(ctx.attrs.get("ceil_mode", 0))
    if kind == "max":
        dilation = tuple(ctx.attrs.get("dilations", [1] * dims))
        max_pool = (F.max_pool1d, F.max_pool2d, F.max_pool3d)[dims - 1]
        return lambda x: max_pool(x, kernel, stride, padding, dilation, ceil_mode=ceil)
    count_pad = bool(ctx.attrs.get("count_include_pad", 0))
    avg_pool = (F.avg_pool1d, F.avg_pool2d, F.avg_pool3d)[dims - 1]
    return lambda x: avg_pool(x, kernel, stride, padding, ceil, count_include_pad=count_pad)


def _resize(ctx: BuildContext) -> Fn:
    mode, coords = ctx.attrs.get("mode", "nearest"), ctx.attrs.get("coordinate_transformation_mode")
    scales = ctx.static.get(2) if ctx.opset >= 11 else ctx.static.get(1)
    sizes = ctx.static.get(3)
    if mode == "nearest" and coords == "asymmetric" and ctx.attrs.get("nearest_mode") == "floor":
        torch_mode, align = "nearest", None
    elif mode in ("linear", "cubic") and coords in ("half_pixel", "pytorch_half_pixel"):
        torch_mode, align = ("bilinear" if mode == "linear" else "bicubic"), False
    elif mode in ("linear", "cubic") and coords == "align_corners":
        torch_mode, align = ("bilinear" if mode == "linear" else "bicubic"), True
    else:
        raise ModelLoadError(f"node '{ctx.name}': Resize mode={mode} with {coords} unsupported")
    if sizes:
        size = tuple(int(s) for s in sizes[2:])
        return lambda x: F.interpolate(x, size=size, mode=torch_mode, align_corners=align)
    if not scales or scales[:2] != [1.0, 1.0]:
        raise ModelLoadError(f"node '{ctx.name}': Resize needs constant spatial scales or sizes")
    factor = tuple(float(s) for s in scales[2:])
    return lambda x: F.interpolate(x, scale_factor=factor, mode=torch_mode, align_corners=align)


def _reshape(ctx: BuildContext) -> Fn:
    shape = [int(s) for s in ctx.static[1] or []]
    # Without allowzero, a 0 copies the input's dimension.
    keep = [] if ctx.attrs.get("allowzero", 0) else [i for i, s in enumerate(shape) if s == 0]
    # Batch in, batch out: the axis is the batch axis and not merged with another.
    follow_batch = ctx.batch is not None and shape[:1] == [ctx.batch]

    def reshape(x: Tensor) -> Tensor:
        target = [x.shape[i] if i in keep else s for i, s in enumerate(shape)]
        if follow_batch:
            target[0] = x.shape[0]  # a static-batch export runs at any batch
        return x.reshape(target)

    return reshape


def _slice(ctx: BuildContext) -> Fn:
    starts, ends = ctx.static[1] or [], ctx.static[2] or []
    axes = ctx.static.get(3) or list(range(len(starts)))
    steps = ctx.static.get(4) or [1] * len(starts)
    if any(s <= 0 for s in steps):
        raise ModelLoadError(f"node '{ctx.name}': Slice with steps {steps} unsupported")
    bounds = {
        int(a): slice(int(b), int(e), int(s))
        for a, b, e, s in zip(axes, starts, ends, steps, strict=True)
    }

    def slice_(x: Tensor) -> Tensor:
        return x[tuple(bounds.get(a, bounds.get(a - x.dim(), slice(None))) for a in range(x.dim()))]

    return slice_


def _split(ctx: BuildContext, outputs: int) -> Fn:
    axis, sizes = int(ctx.attrs.get("axis", 0)), ctx.static.get(1) or ctx.attrs.get("split")
    if sizes:
        return lambda x: torch.split(x, [int(s) for s in sizes], axis)
    return lambda x: torch.split(x, math.ceil(x.shape[axis] / outputs), axis)


def _softmax(ctx: BuildContext) -> Fn:
    axis = int(ctx.attrs.get("axis", -1 if ctx.opset >= 13 else 1))
    # In fp32 whatever the model runs in: fp16 attention logits can exceed 65,504 before the
    # softmax scales them down (the result is cast back).
    if ctx.opset >= 13:
        return lambda x: torch.softmax(x, axis, dtype=torch.float32).to(x.dtype)
    return lambda x: (
        torch.softmax(x.flatten(axis), -1, dtype=torch.float32).to(x.dtype).reshape(x.shape)
    )  # coerced to 2-D


class _LayerNorm(nn.Module):
    """LayerNormalization over the axes from `axis` on, accumulating in fp32 whatever the model
    runs in: a token's squared deviations summed in fp16 overflow. torch's own kernels do that
    for fp16 and bf16 inputs (CPU and CUDA), so those go in as they are: no copy to fp32 and
    back around each of a ViT's norms (the result differs by a rounding on ~0.02 % of values)."""

    weight: Tensor  # buffers, registered in __init__
    bias: Tensor | None

    def __init__(self, ctx: BuildContext) -> None:
        super().__init__()
        self.axis, self.eps = int(ctx.attrs.get("axis", -1)), float(ctx.attrs.get("epsilon", 1e-5))
        self.register_buffer("weight", ctx.weights[1])
        self.register_buffer("bias", ctx.weights.get(2))

    def forward(self, x: Tensor) -> Tensor:
        shape = x.shape[self.axis % x.dim() :]
        if x.dtype in (torch.float16, torch.bfloat16) and self.weight.dtype == x.dtype:
            return F.layer_norm(x, shape, self.weight, self.bias, self.eps)
        bias = None if self.bias is None else self.bias.float()
        return F.layer_norm(x.float(), shape, self.weight.float(), bias, self.eps).to(x.dtype)


def _expand(ctx: BuildContext) -> Fn:
    shape = tuple(int(d) for d in ctx.static[1])
    # ONNX broadcasts the data and the shape both ways (a 1 in `shape` keeps the data's size).
    return lambda x: x.expand(torch.broadcast_shapes(tuple(x.shape), shape))


def _range(start: Tensor, limit: Tensor, delta: Tensor) -> Tensor:
    return torch.arange(start.item(), limit.item(), delta.item(), dtype=start.dtype)


def _gather(ctx: BuildContext) -> Fn:
    axis = int(ctx.attrs.get("axis", 0))

    def gather(data: Tensor, index: Tensor) -> Tensor:
        dim = axis % data.dim()
        flat = torch.index_select(data, dim, index.flatten() % data.shape[dim])
        return flat.reshape((*data.shape[:dim], *index.shape, *data.shape[dim + 1 :]))

    return gather


def _reduce(ctx: BuildContext, fn: Fn) -> Fn:
    axes = ctx.static.get(1) or ctx.attrs.get("axes")
    keep = bool(ctx.attrs.get("keepdims", 1))
    if not axes:
        return lambda x: fn(x, tuple(range(x.dim())), keep)
    return lambda x: fn(x, tuple(int(a) for a in axes), keep)


def _clip(ctx: BuildContext) -> Fn:
    bounds = (ctx.static.get(1), ctx.static.get(2)) if ctx.opset >= 11 else (
        ctx.attrs.get("min"), ctx.attrs.get("max"))  # fmt: skip
    low, high = (None if b is None else float(np.asarray(b).item()) for b in bounds)
    return lambda x: torch.clamp(x, low, high)


def _cast(ctx: BuildContext) -> Fn:
    dtype = getattr(torch, np.dtype(helper.tensor_dtype_to_np_dtype(ctx.attrs["to"])).name)
    # A float-to-float cast keeps the model's compute precision (fp16/bf16 after conversion).
    return lambda x: x if x.is_floating_point() and dtype.is_floating_point else x.to(dtype)


def _unsqueeze(ctx: BuildContext) -> Fn:
    # Opset 13 moved the (required) axes from an attribute to an input.
    axes = [int(a) for a in (ctx.static.get(1) or ctx.attrs["axes"])]

    def unsqueeze(x: Tensor) -> Tensor:
        for axis in sorted(a % (x.dim() + len(axes)) for a in axes):
            x = x.unsqueeze(axis)
        return x

    return unsqueeze


def _squeeze(ctx: BuildContext) -> Fn:
    axes = tuple(int(a) for a in (ctx.static.get(1) or ctx.attrs.get("axes") or ()))
    return lambda x: x.squeeze(axes) if axes else x.squeeze()


def _gemm(ctx: BuildContext) -> Fn:
    alpha, beta = float(ctx.attrs.get("alpha", 1.0)), float(ctx.attrs.get("beta", 1.0))
    ta, tb = bool(ctx.attrs.get("transA", 0)), bool(ctx.attrs.get("transB", 0))

    def gemm(a: Tensor, b: Tensor, c: Tensor | None = None) -> Tensor:
        out = alpha * ((a.T if ta else a) @ (b.T if tb else b))
        return out if c is None else out + beta * c

    return gemm


def _div(a: Tensor, b: Tensor) -> Tensor:
    floats = a.is_floating_point() or b.is_floating_point()
    return a / b if floats else torch.div(a, b, rounding_mode="trunc")  # ONNX integer Div


_ELEMENTWISE: dict[str, Fn] = {
    "Relu": torch.relu, "Sigmoid": torch.sigmoid, "Tanh": torch.tanh, "HardSwish": F.hardswish,
    "Erf": torch.erf, "Exp": torch.exp, "Sqrt": torch.sqrt, "Neg": torch.neg, "Add": torch.add,
    "Sub": torch.sub, "Mul": torch.mul, "Div": _div, "Pow": torch.pow, "MatMul": torch.matmul,
    "Identity": lambda x: x, "Where": torch.where, "GreaterOrEqual": torch.ge,
    "Greater": torch.gt, "Less": torch.lt, "LessOrEqual": torch.le, "Equal": torch.eq,
    "Not": torch.logical_not, "And": torch.logical_and, "Or": torch.logical_or,
    "Floor": torch.floor, "Ceil": torch.ceil, "Abs": torch.abs, "Range": _range,
}  # fmt: skip


def _as_is(fn: Fn) -> Callable[[BuildContext, int], Fn]:
    """The builder of an op with nothing to build: the same callable for every node."""
    return lambda c, _: fn


BUILDERS: dict[str, Callable[[BuildContext, int], Fn]] = {
    **{op: _as_is(fn) for op, fn in _ELEMENTWISE.items()},
    "Conv": lambda c, _: _conv(c),
    "ConvTranspose": lambda c, _: _conv(c, transpose=True),
    "BatchNormalization": lambda c, _: _BatchNorm(
        c.weights[1],
        c.weights[2],
        c.weights[3],
        c.weights[4],
        eps=float(c.attrs.get("epsilon", 1e-5)),
    ),
    "MaxPool": lambda c, _: _pool(c, "max"),
    "AveragePool": lambda c, _: _pool(c, "avg"),
    "GlobalAveragePool": lambda c, _: lambda x: x.mean(tuple(range(2, x.dim())), keepdim=True),
    "Resize": lambda c, _: _resize(c),
    "LeakyRelu": lambda c, _: lambda x: F.leaky_relu(x, float(c.attrs.get("alpha", 0.01))),
    "HardSigmoid": lambda c, _: (
        lambda x: torch.clamp(
            float(c.attrs.get("alpha", 0.2)) * x + float(c.attrs.get("beta", 0.5)), 0, 1
        )
    ),
    "Softmax": lambda c, _: _softmax(c),
    "Clip": lambda c, _: _clip(c),
    "Gemm": lambda c, _: _gemm(c),
    "Concat": lambda c, _: lambda *xs: torch.cat(xs, int(c.attrs["axis"])),
    "Split": _split,
    "Slice": lambda c, _: _slice(c),
    "Reshape": lambda c, _: _reshape(c),
    "Flatten": lambda c, _: lambda x: x.reshape(math.prod(x.shape[: c.attrs.get("axis", 1)]), -1),
    "Transpose": lambda c, _: lambda x: x.permute(c.attrs.get("perm") or [*range(x.dim())][::-1]),
    "Unsqueeze": lambda c, _: _unsqueeze(c),
    "Squeeze": lambda c, _: _squeeze(c),
    "Gather": lambda c, _: _gather(c),
    "Cast": lambda c, _: _cast(c),
    "ReduceMean": lambda c, _: _reduce(c, lambda x, d, k: x.mean(d, keepdim=k)),
    "ReduceSum": lambda c, _: _reduce(c, lambda x, d, k: x.sum(d, keepdim=k)),
    "ReduceMax": lambda c, _: _reduce(c, lambda x, d, k: x.amax(d, keepdim=k)),
    "LayerNormalization": lambda c, _: _LayerNorm(c),
    "Expand": lambda c, _: _expand(c),
}
SUPPORTED_OPS = frozenset({*BUILDERS, "Constant", "Shape"})
