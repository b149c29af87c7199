"""Sinks: results → outside world (annotated video, JSONL, COCO results, CSV, events to MQTT and
webhooks, nothing)."""

from visionrt.sinks.base import Sink, partial_path
from visionrt.sinks.coco import CocoSink
from visionrt.sinks.events import (
    EventPublisher,
    MqttTransport,
    WebhookTransport,
    make_event,
    parse_event_targets,
)
from visionrt.sinks.jsonl import JsonlSink
from visionrt.sinks.null import NullSink
from visionrt.sinks.table import CsvSink
from visionrt.sinks.video import VideoSink, annotate

__all__ = [
    "CocoSink",
    "CsvSink",
    "EventPublisher",
    "JsonlSink",
    "MqttTransport",
    "NullSink",
    "Sink",
    "VideoSink",
    "WebhookTransport",
    "annotate",
    "make_event",
    "parse_event_targets",
    "partial_path",
]
