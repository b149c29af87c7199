"""Detections of a model over a video — the detector alone, one frame at a time
(`detections_over`), or through the whole pipeline (`collect_detections`: with tracking or
detect-every-N, the boxes each frame gets) — and a candidate scored against the FP32 reference
on the same frames (`compare_to_reference`). `fidelity` only scores what it is given."""

from __future__ import annotations

from pathlib import Path

from visionrt.backends import BackendOptions
from visionrt.fidelity import REFERENCE_BACKEND, FidelityReport, fidelity
from visionrt.pipeline import Pipeline, PipelineOptions
from visionrt.postprocess import PostprocessOptions
from visionrt.sources import SourceOptions, open_source
from visionrt.tasks import DetectTask
from visionrt.tasks.base import run_one
from visionrt.types import Detections


def collect_detections(
    video: str | Path,
    model: str | Path,
    backend: str = REFERENCE_BACKEND,
    options: BackendOptions | None = None,
    frames: int = 200,
    conf: float = 0.25,
    pipeline_options: PipelineOptions | None = None,
) -> list[Detections]:
    """The detections of the first `frames` frames of `video` (file mode, every frame, in order);
    with `pipeline_options` (tracking, detect-every-N) the boxes the pipeline gives each frame."""
    pipeline = Pipeline(
        [str(video)],
        model,
        backend,
        options or BackendOptions(),
        PostprocessOptions(conf=conf),
        SourceOptions(mode="file", max_frames=frames),
        pipeline_options,
        plan=False,  # what is compared is what was named, never a cached plan
    )
    try:
        return [result.detections for result in pipeline]
    finally:
        pipeline.close()


def detections_over(
    video: str | Path,
    model: str | Path,
    backend: str = REFERENCE_BACKEND,
    options: BackendOptions | None = None,
    frames: int = 200,
    conf: float = 0.25,
) -> list[Detections]:
    """The detector's detections on the first `frames` frames of `video`, one frame at a time:
    what a file-mode run gives, without its threads (`collect_detections` runs the
    pipeline, for tracking)."""
    task = DetectTask(model, backend, options or BackendOptions(), PostprocessOptions(conf=conf))
    source = open_source(str(video), 0, SourceOptions(mode="file", max_frames=frames))
    try:
        buffer = task.new_buffer()
        return [run_one(task, frame.image, buffer) for frame in source.frames()]
    finally:
        source.close()
        task.close()


def compare_to_reference(
    video: str | Path,
    model: str | Path,
    candidate_backend: str,
    candidate_options: BackendOptions | None = None,
    frames: int = 200,
    conf: float = 0.25,
    candidate_model: str | Path | None = None,
) -> FidelityReport:
    """Run the ONNX Runtime FP32 reference of `model` and the candidate (`candidate_model`, an
    exported artifact, or `model` itself) on the same frames, and score the candidate."""
    reference = detections_over(video, model, REFERENCE_BACKEND, BackendOptions(), frames, conf)
    candidate = detections_over(
        video, candidate_model or model, candidate_backend, candidate_options, frames, conf
    )
    return fidelity(reference, candidate)
