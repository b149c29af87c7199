"""The task contract: one model, from a decoded picture to a decoded result, in three steps the
pipeline schedules on its own threads (prepare on the preprocess thread, infer on inference
workers, decode on the consumer)."""

from __future__ import annotations

from typing import Any, Protocol

import numpy.typing as npt

from visionrt.backends import Backend


class Task(Protocol):
    """`name` keys the task's results ("detect", "depth"); `batch` is the largest batch one
    `infer` call takes; `backend` is the loaded runtime."""

    name: str
    batch: int
    backend: Backend

    def new_buffer(self) -> npt.NDArray[Any]:
        """One batch row of input, to be filled by `prepare`."""

    def prepare(self, image: npt.NDArray[Any], buffer: npt.NDArray[Any], last: Any) -> Any:
        """Fill `buffer` from a BGR image; `last` is the geometry the buffer holds already (or
        None). Returns the geometry `decode` needs to map results back to the source."""

    def infer(self, rows: list[npt.NDArray[Any]]) -> npt.NDArray[Any]:
        """Run prepared rows as one batch; one output row per input row."""

    def decode(self, output: npt.NDArray[Any], geometry: Any) -> Any:
        """One output row → the task's result in source pixels (Detections, DepthMap)."""

    def warm_up(self, calls: int) -> None: ...

    # Optional: `drain_events() -> dict[str, int]`, events counted since the last call (e.g. a
    # depth map recomputed in FP32); the pipeline adds them to the run's telemetry per source.

    def describe(self) -> dict[str, Any]:
        """What ran, for the run summary."""

    def close(self) -> None: ...
