"""The stage graph: source threads → preprocess → inference workers → in-order release → sinks,
joined by bounded queues; the `Pipeline` facade."""

from visionrt.pipeline.core import Pipeline
from visionrt.pipeline.options import DepthOptions, PipelineOptions

__all__ = ["DepthOptions", "Pipeline", "PipelineOptions"]
