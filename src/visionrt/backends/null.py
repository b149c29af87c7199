"""A backend that runs nothing: zero outputs of the right shape, for plumbing and overhead."""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from visionrt.backends.base import Array, Backend, BackendOptions
from visionrt.model import read_model_spec
from visionrt.types import BackendInfo, TensorSpec


class NullBackend(Backend):
    name = "null"
    concurrency = 1

    def load(self, model: Path, options: BackendOptions) -> None:
        spec = read_model_spec(model)
        height, width = options.input_size or spec.input_size
        out_shape = tuple(max(d, 1) for d in spec.output_shape)
        # `delay_ms` stands in for inference time in pipeline tests and overhead baselines.
        self._delay = float(options.settings.get("delay_ms", 0)) / 1e3
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
        if self._delay:
            time.sleep(self._delay)
        batch = next(iter(inputs.values())).shape[0]
        if batch == self._output.shape[0]:
            return [self._output]
        return [np.zeros((batch, *self._output.shape[1:]), np.float32)]
