"""A backend that runs nothing: zero outputs of the right shape, for plumbing and overhead."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from visionrt.backends.base import Array, Backend, BackendOptions
from visionrt.errors import ConfigError
from visionrt.model import read_model_spec
from visionrt.types import BackendInfo, TensorSpec


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


class NullBackend(Backend):
    """Zeros shaped like the model's output; settings `delay_ms` and `fail_after` (see load)."""

    name = "null"
    concurrency = 1

    def load(self, model: Path, options: BackendOptions) -> None:
        spec = read_model_spec(model)
        height, width = options.input_size or spec.input_size
        out_shape = tuple(max(d, 1) for d in spec.output_shape)
        unknown = set(options.settings) - {"delay_ms", "fail_after"}
        if unknown:
            raise ConfigError(
                f"null settings {sorted(unknown)} unknown: expected delay_ms, fail_after"
            )
        # `delay_ms` stands in for inference time in pipeline tests and overhead baselines;
        # `fail_after` N (fault injection for tests) makes every call after the Nth raise a
        # RuntimeError, as a runtime rejecting a frame would; warm-up calls count, 0 is never.
        # `delay` (seconds) may be changed mid-run: a model that slows down under load.
        self.delay = _number(options.settings, "delay_ms") / 1e3
        self._fail_after = int(_number(options.settings, "fail_after", integer=True))
        self._calls = 0
        self._output = np.zeros(out_shape, np.float32)
        self.info = BackendInfo(
            runtime="null",
            version="0",
            device="cpu",
            precision="none",
            inputs=(TensorSpec(spec.input_name, (options.batch, 3, height, width), "float32"),),
            outputs=(TensorSpec(spec.output_name, out_shape, "float32"),),
        )

    def infer(self, inputs: Mapping[str, Array]) -> list[Array]:
        self._calls += 1
        if self._fail_after and self._calls > self._fail_after:
            raise RuntimeError(f"null backend: injected failure on call {self._calls}")
        if self.delay:
            time.sleep(self.delay)
        batch = next(iter(inputs.values())).shape[0]
        if batch == self._output.shape[0]:
            return [self._output]
        return [np.zeros((batch, *self._output.shape[1:]), np.float32)]
