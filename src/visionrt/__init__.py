"""visionrt: a real-time vision runtime (source → preprocess → backend → postprocess → sinks)."""

from visionrt.backends import Backend, BackendOptions, load_backend
from visionrt.errors import (
    BackendUnavailable,
    ConfigError,
    ModelLoadError,
    SinkError,
    SourceError,
    VisionRTError,
)
from visionrt.pipeline import Pipeline, PipelineOptions
from visionrt.postprocess import PostprocessOptions
from visionrt.sources import SourceOptions, open_source
from visionrt.types import BackendInfo, Detections, Frame, FrameResult, TensorSpec

__version__ = "0.1.0"

__all__ = [
    "Backend",
    "BackendInfo",
    "BackendOptions",
    "BackendUnavailable",
    "ConfigError",
    "Detections",
    "Frame",
    "FrameResult",
    "ModelLoadError",
    "Pipeline",
    "PipelineOptions",
    "PostprocessOptions",
    "SinkError",
    "SourceError",
    "SourceOptions",
    "TensorSpec",
    "VisionRTError",
    "__version__",
    "load_backend",
    "open_source",
]
