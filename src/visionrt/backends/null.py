"""A backend that runs nothing: zero outputs shaped as the model file declares, for plumbing and
overhead."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

import numpy as np

from visionrt.backends.base import (
    ARRAYS,
    FRAMES,
    Array,
    Backend,
    BackendOptions,
    check_input_size,
)
from visionrt.errors import ConfigError, ModelLoadError
from visionrt.types import BackendInfo, TensorSpec

INPUT_FORMS = ("float32", "uint8", "frames")


def _number(settings: Mapping[str, str], key: str, integer: bool = False) -> float:
    """A setting that must be a finite number >= 0 (a whole one when `integer`)."""
    raw = settings.get(key, "0")
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    # NaN and infinity pass a `< 0` check, then fail in time.sleep mid-run: refuse them here.
    if not math.isfinite(value) or value < 0 or (integer and not value.is_integer()):
        kind = "a whole number" if integer else "a number"
        raise ConfigError(f"inference.settings.{key}: expected {kind} >= 0, got '{raw}'")
    return value


def _declared(model: Path) -> tuple[TensorSpec, TensorSpec]:
    """The image input and first output an ONNX file declares (dynamic axes None): the tensor
    specs the null backend answers with."""
    import onnx

    try:
        graph = onnx.load(str(model), load_external_data=False).graph
    except Exception as err:
        raise ModelLoadError(f"{model} is not a readable ONNX model ({err})") from err
    weights = {init.name for init in graph.initializer}
    inputs = [i for i in graph.input if i.name not in weights]
    if len(inputs) != 1 or not graph.output:
        raise ModelLoadError(
            f"{model}: expected one image input and an output, got {len(inputs)} inputs and"
            f" {len(graph.output)} outputs"
        )

    def spec(value: Any) -> TensorSpec:
        dims = value.type.tensor_type.shape.dim
        shape = tuple(d.dim_value if d.HasField("dim_value") else None for d in dims)
        return TensorSpec(value.name, shape, "float32")

    return spec(inputs[0]), spec(graph.output[0])


class NullBackend(Backend):
    """Zeros shaped like the model's output; settings `delay_ms` and `fail_after` (see load).

    The input is [batch, 3, H, W] with the file's H and W, or `options.input_size` where the
    file leaves them dynamic; dynamic output axes are 1."""

    name = "null"
    concurrency = 1
    stand_in = True  # FramesBackend: no model runs (a device's work is skipped on the CPU)

    def load(self, model: Path, options: BackendOptions) -> None:
        image, output = _declared(model)
        if len(image.shape) != 4 or image.shape[1] not in (3, None):
            raise ModelLoadError(
                f"{model}: expected an image input shaped [N, 3, H, W], got {list(image.shape)}"
            )
        check_input_size(model, image, options)
        static = [d for d in image.shape[2:] if isinstance(d, int) and d > 0]
        size = (static[0], static[1]) if len(static) == 2 else options.input_size
        if size is None:
            raise ConfigError(f"null: {model.name} is dynamic in H and W; set inference.input_size")
        height, width = size
        out_shape = tuple(d if isinstance(d, int) and d > 0 else 1 for d in output.shape)
        unknown = set(options.settings) - {"delay_ms", "fail_after", "input"}
        if unknown:
            raise ConfigError(
                f"null settings {sorted(unknown)} unknown: expected delay_ms, fail_after, input"
            )
        # `input` the form of input it declares, so each path's host cost is measured alone:
        # float32 (NCHW, host letterbox), uint8 (NHWC, as a folded OpenVINO model), frames
        # (decoded frames staged as for a device; on the CPU no device work is done at all).
        form = options.settings.get("input", "float32")
        if form not in INPUT_FORMS:
            raise ConfigError(
                f"inference.settings.input: expected one of {', '.join(INPUT_FORMS)}, got '{form}'"
            )
        # `delay_ms` stands in for inference time in pipeline tests and overhead baselines;
        # `fail_after` N (fault injection for tests) makes every call after the Nth raise a
        # RuntimeError, as a runtime rejecting a frame would; warm-up calls count, 0 is never.
        # `delay` (seconds) may be changed mid-run: a model that slows down under load.
        self.delay = _number(options.settings, "delay_ms") / 1e3
        self._fail_after = int(_number(options.settings, "fail_after", integer=True))
        self._calls = 0
        self._output = np.zeros(out_shape, np.float32)
        device = options.device
        if device != "cpu" and form != "frames":
            raise ConfigError(
                f"null: device '{device}' needs inference.settings.input=frames (the device"
                " work of that path); other forms run on cpu"
            )
        self.stand_in = device == "cpu"
        self._tensors: dict[str, Any] = {}  # by role, rows for the largest batch asked yet
        self._batch = options.batch
        self._buffers: dict[int, dict[str, Any]] = {}
        shape = (
            (options.batch, height, width, 3)
            if form == "uint8"
            else (options.batch, 3, height, width)
        )
        self.info = BackendInfo(
            runtime="null",
            version="0",
            device=device,
            precision="none",
            inputs=(TensorSpec(image.name, shape, form if form == "uint8" else "float32"),),
            outputs=(TensorSpec(output.name, out_shape, "float32"),),
            input_form=FRAMES if form == "frames" else ARRAYS,
        )

    def infer(self, inputs: Mapping[str, Array]) -> list[Array]:
        self._called()
        batch = next(iter(inputs.values())).shape[0]
        if batch <= self._output.shape[0]:  # a short batch: the first rows, not a new array
            return [self._output[:batch]]
        return [np.zeros((batch, *self._output.shape[1:]), np.float32)]

    # -- the frames form (FramesBackend): zeros on the device asked for ----------------------
    def device_scope(self) -> AbstractContextManager[None]:
        return nullcontext()

    def device_input(self, rows: int) -> Any:
        return self._tensor("in", rows, self.info.inputs[0].shape[1:])

    def device_buffer(self, name: str, rows: int, shape: tuple[int, ...], dtype: Any) -> Any:
        import torch

        named = self._buffers.setdefault(rows, {})
        if name not in named:
            named[name] = torch.zeros((rows, *shape), dtype=dtype, device=self.info.device)
        return named[name]

    def device_rows(self, rows: int) -> int:
        return rows

    def prepare_device(self, key: Any, call: Any) -> None:
        call()

    def infer_device(self, images: Any, then: Any = None) -> list[Any]:
        self._called()
        outputs = [self._tensor("out", images.shape[0], self._output.shape[1:])]
        return then(outputs, self._buffers.get(images.shape[0], {})) if then else outputs

    def _tensor(self, role: str, rows: int, shape: tuple[Any, ...]) -> Any:
        import torch

        # One tensor per role, its first rows lent: a tensor per batch size made a short batch
        # (what the batcher found waiting) cost a fresh allocation of a whole input's zeros.
        held = self._tensors.get(role)
        if held is None or held.shape[0] < rows or tuple(held.shape[1:]) != tuple(shape):
            size = max(rows, self._batch)  # the whole batch at once
            held = self._tensors[role] = torch.zeros((size, *shape), device=self.info.device)
        return held[:rows]

    def _called(self) -> None:
        self._calls += 1
        if self._fail_after and self._calls > self._fail_after:
            raise RuntimeError(f"null backend: injected failure on call {self._calls}")
        if self.delay:
            time.sleep(self.delay)
