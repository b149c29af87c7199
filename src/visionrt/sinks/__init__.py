"""Sinks: results → outside world (annotated video, JSONL, COCO results, CSV, events to MQTT and
webhooks, nothing)."""

from collections.abc import Sequence
from pathlib import Path

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
from visionrt.sinks.mot import MotSink
from visionrt.sinks.null import NullSink
from visionrt.sinks.table import CsvSink
from visionrt.sinks.video import VideoSink, annotate

__all__ = [
    "CocoSink",
    "CsvSink",
    "EventPublisher",
    "JsonlSink",
    "MotSink",
    "MqttTransport",
    "NullSink",
    "Sink",
    "VideoSink",
    "WebhookTransport",
    "annotate",
    "make_event",
    "parse_event_targets",
    "partial_path",
    "table_sinks",
]


def table_sinks(out: Path, names: Sequence[str], mot: bool, coco: bool, csv: bool) -> list[Sink]:
    """Each source's MOT text, COCO results and CSV as asked, source i named `names[i]` in
    the folder `out` (NAME.mot.txt, NAME.coco.json, NAME.csv): a run's, a cluster's driver's."""
    sinks: list[Sink] = []
    for i, name in enumerate(names):
        sinks += [MotSink(out / f"{name}.mot.txt", source_id=i)] if mot else []
    for i, name in enumerate(names):
        sinks += [CocoSink(out / f"{name}.coco.json", source_id=i)] if coco else []
    for i, name in enumerate(names):
        sinks += [CsvSink(out / f"{name}.csv", source_id=i)] if csv else []
    return sinks
