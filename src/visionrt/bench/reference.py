"""Detections of a model over a video through the whole pipeline: with tracking or
detect-every-N, the boxes each frame gets (fidelity.detections_over runs the detector alone)."""

from __future__ import annotations

from pathlib import Path

from visionrt.backends import BackendOptions
from visionrt.fidelity import REFERENCE_BACKEND
from visionrt.pipeline import Pipeline, PipelineOptions
from visionrt.postprocess import PostprocessOptions
from visionrt.sources import SourceOptions
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
