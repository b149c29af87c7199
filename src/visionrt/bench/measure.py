"""Measure a backend alone on prepared real frames, and the whole pipeline on a video."""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from visionrt.backends import Backend, BackendOptions, load_backend
from visionrt.backends.base import FRAMES, FramesBackend
from visionrt.pipeline import Pipeline
from visionrt.preprocess import InputLayout, compute_letterbox, letterbox_into
from visionrt.sinks import JsonlSink
from visionrt.sources import SourceOptions, open_source


@dataclass(frozen=True, slots=True)
class Spread:
    """Median, min and max of repeated measurements."""

    median: float
    low: float
    high: float

    @classmethod
    def of(cls, values: list[float]) -> Spread:
        return cls(statistics.median(values), min(values), max(values))

    def __str__(self) -> str:
        return f"{self.median:.2f} ({self.low:.2f}–{self.high:.2f})"


@dataclass(frozen=True, slots=True)
class BenchResult:
    """One configuration: FPS per repetition for model-only and end-to-end, and their ratio."""

    label: str
    model_only_fps: list[float]
    end_to_end_fps: list[float]
    model_only_ms_p50: list[float]
    model_only_ms_p99: list[float]
    details: dict[str, Any]
    interleaved: list[float] = field(default_factory=list)
    # The same runtime and model as a plain session with the runtime's defaults, measured in the
    # same repetitions: the honest ceiling (the pipeline's own session may be the slower one).
    plain_fps: list[float] = field(default_factory=list)

    @property
    def baseline_fps(self) -> list[float]:
        """Model-only FPS the efficiency is taken against: the plain session where measured."""
        return self.plain_fps or self.model_only_fps

    @property
    def efficiency(self) -> Spread:
        """End-to-end FPS / baseline model-only FPS per repetition: from the interleaved
        segments when measured, else from the whole run and the model-only calls around it."""
        if self.interleaved:
            return Spread.of(self.interleaved)
        return Spread.of(
            [e / m for e, m in zip(self.end_to_end_fps, self.baseline_fps, strict=True)]
        )


def prepared_inputs(
    video: str, input_hw: tuple[int, int], layout: InputLayout, frames: int = 32
) -> list[npt.NDArray[Any]]:
    """The first `frames` frames of `video`, letterboxed exactly as the pipeline does."""
    source = open_source(video, 0, SourceOptions(mode="file", max_frames=frames))
    prepared = []
    try:
        for frame in source.frames():
            box = compute_letterbox(frame.image.shape[:2], input_hw)
            if layout is InputLayout.NHWC_U8_BGR:
                buffer = np.empty((1, *input_hw, 3), np.uint8)
            else:
                buffer = np.empty((1, 3, *input_hw), np.float32)
            letterbox_into(frame.image, buffer[0], box, layout)
            prepared.append(buffer)
    finally:
        source.close()
    return prepared


def measure_model_only(
    backend: Backend, inputs: list[npt.NDArray[Any]], runs: int, warmup: int = 3
) -> list[float]:
    """Seconds per `infer` call over `runs` calls cycling through `inputs`, after warm-up.

    With `backend.concurrency` > 1 the calls overlap as the pipeline overlaps them, and the
    figure is wall time per frame. A backend that takes frames (input form FRAMES) is timed on
    its device: the inputs already there, the outputs left there (`_device_calls`)."""
    if backend.info.input_form == FRAMES:
        return _device_calls(backend, inputs, runs, warmup)
    name = backend.info.inputs[0].name
    for i in range(warmup):
        backend.infer({name: inputs[i % len(inputs)]})
    concurrency = max(1, backend.concurrency)
    if concurrency == 1:
        times = []
        for i in range(runs):
            started = time.perf_counter()
            backend.infer({name: inputs[i % len(inputs)]})
            times.append(time.perf_counter() - started)
        return times
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(concurrency) as pool:
        started = time.perf_counter()
        list(pool.map(lambda i: backend.infer({name: inputs[i % len(inputs)]}), range(runs)))
        per_frame = (time.perf_counter() - started) / runs
    return [per_frame] * runs


def _device_calls(
    backend: Backend, inputs: list[npt.NDArray[Any]], runs: int, warmup: int
) -> list[float]:
    """Seconds per `infer_device` call on inputs copied to the device once (the model alone:
    what the frames path runs between its upload and its decoding), synchronised each call."""
    import torch

    device = cast(FramesBackend, backend)
    cuda = backend.info.device.startswith("cuda")
    times = []
    with device.device_scope(), torch.inference_mode():
        staged = [device.device_input(len(x)) for x in inputs[:1]]
        for i in range(warmup + runs):
            x = inputs[i % len(inputs)]
            images = staged[0] if len(x) == len(staged[0]) else device.device_input(len(x))
            images.copy_(torch.from_numpy(x))
            if cuda:
                torch.cuda.current_stream().synchronize()
            started = time.perf_counter()
            device.infer_device(images)
            if cuda:
                torch.cuda.current_stream().synchronize()
            if i >= warmup:
                times.append(time.perf_counter() - started)
    return times


def measure_end_to_end(pipeline: Pipeline) -> tuple[float, dict[str, Any]]:
    """FPS of a full run into a JSONL sink (model load and warm-up excluded), and its summary.
    The pipeline stays open so its backend can be measured alone right after."""
    with tempfile.TemporaryDirectory() as tmp:
        summary = pipeline.run([JsonlSink(Path(tmp) / "bench.jsonl")])
    if not summary.accounted or summary.frames_out == 0:
        raise RuntimeError(
            f"benchmark run lost frames: {summary.frames_in} in,"
            f" {summary.frames_out} out, {summary.dropped}"
        )
    return summary.fps, summary.to_json()


def plain_session(runtime: str, model: str | Path) -> Backend | None:
    """The runtime with its own defaults on the same model file (what a user's first script
    would run), or None where visionrt's backend sets nothing beyond what is asked for."""
    if runtime != "onnxruntime":
        return None
    return load_backend("onnxruntime", model, BackendOptions(settings={"plain": "true"}))


def measure_interleaved(
    make_pipeline: Callable[[], Pipeline],
    inputs: list[npt.NDArray[Any]],
    segments: int,
    calls: int,
    baseline: Backend | None = None,
) -> float:
    """Efficiency (end-to-end FPS / model-only FPS) from `segments` short end-to-end runs, each
    followed by `calls` model-only calls on `baseline` (default: the pipeline's own backend).
    Interleaving at a few seconds' grain cancels the machine's drift, which otherwise swamps a
    few-percent difference.

    `make_pipeline` must return a pipeline over a short clip sharing one loaded backend."""
    frames = seconds = 0.0
    model_calls = model_seconds = 0.0
    for _ in range(segments):
        pipeline = make_pipeline()
        try:
            _, summary = measure_end_to_end(pipeline)
            times = measure_model_only(baseline or pipeline.task.backend, inputs, calls, warmup=0)
        finally:
            pipeline.close()
        frames += summary["frames_out"]
        seconds += summary["seconds"]
        model_calls += len(times)
        model_seconds += sum(times)
    return (frames / seconds) / (model_calls / model_seconds)
