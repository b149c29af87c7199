"""visionrt: a real-time vision runtime (source → preprocess → backend → postprocess → sinks).

The public names load on first use, so `import visionrt.cli.main` stays light enough for the
command line to take Ctrl-C from its first moment (the runtimes import in seconds)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from visionrt.usage_reports import no_usage_reports

# Before any runtime is imported: every entry point (the CLI, the Python API, worker processes)
# imports the package first. OpenVINO reports usage on import unless the user said yes to it.
no_usage_reports()

if TYPE_CHECKING:
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

_HOMES = {
    "visionrt.backends": ("Backend", "BackendOptions", "load_backend"),
    "visionrt.errors": ("BackendUnavailable", "ConfigError", "ModelLoadError", "SinkError",
                        "SourceError", "VisionRTError"),
    "visionrt.pipeline": ("Pipeline", "PipelineOptions"),
    "visionrt.postprocess": ("PostprocessOptions",),
    "visionrt.sources": ("SourceOptions", "open_source"),
    "visionrt.types": ("BackendInfo", "Detections", "Frame", "FrameResult", "TensorSpec"),
}  # fmt: skip
_MODULE_OF = {name: module for module, names in _HOMES.items() for name in names}

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


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'visionrt' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # once: later lookups skip this function
    return value
