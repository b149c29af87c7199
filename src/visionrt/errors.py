"""The one hierarchy of visionrt errors; each class is also the builtin it resembles."""

from __future__ import annotations


class VisionRTError(Exception):
    """Base of every error visionrt raises on purpose; the CLI prints it as one line."""

    exit_code = 1


class ConfigError(VisionRTError, ValueError):
    """An option or config file value is invalid."""

    exit_code = 2


class SourceError(VisionRTError, OSError):
    """A source cannot be opened, read or decoded."""

    exit_code = 3


class SourceNotFoundError(SourceError, FileNotFoundError):
    """A file source does not exist."""


class ModelLoadError(VisionRTError, ValueError):
    """A model file is missing, unreadable, or not a supported image model."""

    exit_code = 4


class OutputLayoutError(ModelLoadError):
    """A detector's output tensor has a layout visionrt does not know how to decode."""


class BackendUnavailable(VisionRTError, ImportError):
    """A runtime is not installed or cannot use the asked-for device."""

    exit_code = 5


class SinkError(VisionRTError, OSError):
    """An output cannot be written."""

    exit_code = 6


class NonFiniteDepthError(VisionRTError, FloatingPointError):
    """A depth map came out with NaN/Inf and the run was asked to refuse it (or FP32 gave
    NaN/Inf too)."""

    exit_code = 1


class StageError(VisionRTError, RuntimeError):
    """A pipeline stage failed mid-run on something other than a visionrt error (a runtime that
    rejects a real frame, a bug); the run stopped and its outputs were finalized."""

    exit_code = 1


class Interrupted(VisionRTError):
    """The run was stopped by a signal; outputs were finalized."""

    exit_code = 130
