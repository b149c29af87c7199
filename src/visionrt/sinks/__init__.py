"""Sinks: results → outside world (annotated video, JSONL, COCO results, CSV, events to MQTT and
webhooks, nothing)."""

from visionrt.sinks.base import Sink, partial_path
from visionrt.sinks.coco import CocoSink
from visionrt.sinks.events import (
    EventPublisher,
    make_event,
    parse_event_targets,
)
from visionrt.sinks.files import SourceFiles, named_after
from visionrt.sinks.jsonl import JsonlSink
from visionrt.sinks.mot import MotSink
from visionrt.sinks.mqtt import MqttTransport
from visionrt.sinks.null import NullSink
from visionrt.sinks.table import CsvSink
from visionrt.sinks.video import VideoSink, annotate
from visionrt.sinks.webhook import WebhookTransport

__all__ = [
    "CocoSink",
    "CsvSink",
    "EventPublisher",
    "JsonlSink",
    "MotSink",
    "MqttTransport",
    "NullSink",
    "Sink",
    "SourceFiles",
    "VideoSink",
    "WebhookTransport",
    "annotate",
    "make_event",
    "named_after",
    "parse_event_targets",
    "partial_path",
]
