"""The stage graph: source threads → preprocess → inference workers → in-order release → sinks,
joined by bounded queues; the `Pipeline` facade."""

from visionrt.config.pipeline import DepthOptions, PipelineOptions
from visionrt.pipeline.configured import pipeline_for
from visionrt.pipeline.core import Pipeline

__all__ = ["DepthOptions", "Pipeline", "PipelineOptions", "pipeline_for"]
