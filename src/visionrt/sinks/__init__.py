"""Sinks: results → outside world (annotated video, JSONL, nothing)."""

from visionrt.sinks.base import Sink, partial_path
from visionrt.sinks.jsonl import JsonlSink
from visionrt.sinks.null import NullSink
from visionrt.sinks.video import VideoSink, annotate

__all__ = ["JsonlSink", "NullSink", "Sink", "VideoSink", "annotate", "partial_path"]
