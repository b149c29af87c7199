"""Rewrite a static Ultralytics detector ONNX for another input size (anchor constants included)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from visionrt.errors import ConfigError, ModelLoadError
from visionrt.models.spec import graph_inputs, load_onnx, save_checked
from visionrt.types import DEFAULT_STRIDES, anchor_count


def make_anchors(
    height: int, width: int, strides: Sequence[int] = DEFAULT_STRIDES, offset: float = 0.5
) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]:
    """Anchor centres (2, N) in grid units (row 0 x, row 1 y) and strides (1, N) in pixels.

    Same values and order as Ultralytics' `make_anchors`: level by level, row-major (y, then x),
    cell centres at +0.5.
    """
    points, stride_rows = [], []
    for stride in strides:
        rows, cols = height // stride, width // stride
        sy, sx = np.meshgrid(
            np.arange(rows, dtype=np.float32) + np.float32(offset),
            np.arange(cols, dtype=np.float32) + np.float32(offset),
            indexing="ij",
        )
        points.append(np.stack((sx.ravel(), sy.ravel())))
        stride_rows.append(np.full((1, rows * cols), stride, np.float32))
    return np.concatenate(points, axis=1), np.concatenate(stride_rows, axis=1)


def constant_tensors(graph: Any) -> Iterator[tuple[str, Any]]:
    """(name, TensorProto) of every initializer and Constant node value in `graph`."""
    for init in graph.initializer:
        yield init.name, init
    for node in graph.node:
        if node.op_type == "Constant":
            for attr in node.attribute:
                if attr.name == "value":
                    yield node.output[0], attr.t


def _strides_of(stride_row: npt.NDArray[np.float32]) -> tuple[int, ...]:
    """The distinct strides of a (…, N) stride constant, in order of appearance."""
    values = stride_row.ravel()
    changes = np.flatnonzero(np.diff(values)) + 1
    return tuple(int(v) for v in values[np.concatenate(([0], changes))])


def _is_stride_row(value: npt.NDArray[Any], count: int) -> bool:
    """True for a float constant of `count` whole, non-decreasing numbers ≥ 1 (a stride row)."""
    if value.dtype != np.float32 or value.size != count or value.shape[-1:] != (count,):
        return False
    flat = value.ravel()
    return bool(flat.min() >= 1 and np.all(flat == np.round(flat)) and np.all(np.diff(flat) >= 0))


def _rewrite_float(
    name: str,
    value: npt.NDArray[np.float32],
    old: tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]],
    new: tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]],
) -> npt.NDArray[np.float32]:
    """The new-size counterpart of an anchor-dependent float constant, or ModelLoadError."""
    old_points, old_strides = old
    new_points, new_strides = new
    count = old_strides.shape[1]
    candidates = [
        (old_strides, new_strides),  # stride row, pixels
        (old_points, new_points),  # anchor centres, grid units
        (old_points * old_strides, new_points * new_strides),  # anchor centres, pixels
    ]
    for old_value, new_value in candidates:
        rows = old_value.shape[0]
        fits = value.size == rows * count and value.shape[-1] == count
        if fits and np.array_equal(value.reshape(rows, count), old_value):
            return new_value.reshape(*value.shape[:-1], new_value.shape[1])
    raise ModelLoadError(
        f"constant '{name}' with shape {list(value.shape)} depends on the anchor count {count}"
        " but is neither an anchor grid (2 rows: x, y) nor a stride row that make_anchors gives"
    )


def reshape_detector_onnx(src: Path, height: int, width: int, dst: Path) -> Path:
    """Write to `dst` a copy of the static Ultralytics detector `src` taking [B, 3, height, width].

    Anchor grids and the stride row are regenerated as Ultralytics' `make_anchors` makes them, and
    anchor counts in int64 shape constants (DFL reshape targets, per-level split sizes) are
    replaced. Returns `dst`. Raises ConfigError for sizes that are not multiples of 32 and
    ModelLoadError for a model or constant this does not understand.
    """
    from onnx import numpy_helper

    src, dst = Path(src), Path(dst)
    if height < 32 or width < 32 or height % 32 or width % 32:
        raise ConfigError(f"input size: expected multiples of 32, got {height}x{width}")
    model = load_onnx(src)
    graph = model.graph
    inputs = graph_inputs(model)
    if len(inputs) != 1 or len(inputs[0].type.tensor_type.shape.dim) != 4:
        raise ModelLoadError(f"{src}: expected one image input shaped [B, 3, H, W]")
    dims = inputs[0].type.tensor_type.shape.dim
    old_hw = (dims[2].dim_value, dims[3].dim_value)
    if not all(old_hw):
        raise ModelLoadError(f"{src}: input '{inputs[0].name}' is already dynamic in H and W")

    tensors = [
        (name, tensor, numpy_helper.to_array(tensor)) for name, tensor in constant_tensors(graph)
    ]
    old_count = anchor_count(*old_hw)
    out_dims = [d.dim_value for d in graph.output[0].type.tensor_type.shape.dim]
    if old_count not in out_dims:
        raise ModelLoadError(
            f"{src}: output '{graph.output[0].name}' {out_dims} is not an anchor-free head with"
            f" {old_count} anchors for {old_hw[0]}x{old_hw[1]} (only [B, 4+nc, N] exports reshape)"
        )
    strides: tuple[int, ...] = DEFAULT_STRIDES
    for name, _, value in tensors:
        if _is_stride_row(value, old_count):
            strides = _strides_of(value)
            if anchor_count(*old_hw, strides) != old_count:
                raise ModelLoadError(
                    f"{src}: stride row '{name}' has strides {list(strides)}, which do not give"
                    f" {old_count} anchors at {old_hw[0]}x{old_hw[1]}"
                )
    if any(height % s or width % s for s in strides):
        raise ConfigError(f"input size: expected multiples of {max(strides)}, got {height}x{width}")
    old = make_anchors(*old_hw, strides)
    new = make_anchors(height, width, strides)
    new_count = new[1].shape[1]
    old_levels = [(old_hw[0] // s) * (old_hw[1] // s) for s in strides]
    new_levels = [(height // s) * (width // s) for s in strides]

    for name, tensor, value in tensors:
        replacement = None
        if value.dtype == np.float32 and old_count in value.shape:
            replacement = _rewrite_float(name, value, old, new)
        elif value.dtype == np.int64 and value.ndim <= 1:
            if value.ravel().tolist() == old_levels:
                replacement = np.array(new_levels, np.int64)
            elif old_count in value.ravel().tolist():
                replacement = np.where(value == old_count, new_count, value).astype(np.int64)
        elif old_count in value.shape:
            raise ModelLoadError(
                f"{src}: constant '{name}' ({value.dtype}, shape {list(value.shape)}) depends on"
                f" the anchor count {old_count} in a way this rewrite does not understand"
            )
        if replacement is not None:
            tensor.CopyFrom(numpy_helper.from_array(replacement, tensor.name))

    dims[2].dim_value, dims[3].dim_value = height, width
    del graph.value_info[:]
    for output in graph.output:
        for dim in output.type.tensor_type.shape.dim:
            if dim.dim_value == old_count:
                dim.dim_value = new_count
    for prop in model.metadata_props:
        if prop.key == "imgsz":
            prop.value = str([height, width])
    failed = f"{src} reshaped to {height}x{width} fails ONNX shape inference"
    return save_checked(model, dst, failed)
