"""What the commands share around a run's outputs: the pipeline built under the start-up's signal
handling, the metrics token, the telemetry file's check. The output folder itself (where, an
earlier run's files, the sinks, summary.json) is decided in `pipeline.outputs`."""

from __future__ import annotations

import os
from pathlib import Path

from visionrt.cli.signals import start_up
from visionrt.config import RunConfig
from visionrt.pipeline import Pipeline, pipeline_for
from visionrt.pipeline.hooks import Hooks
from visionrt.pipeline.plan_run import PlannedRun
from visionrt.sinks.base import check_writable


def start_pipeline(
    cfg: RunConfig,
    service: bool = False,
    planned: PlannedRun | None = None,
    hooks: Hooks | None = None,
) -> Pipeline:
    """The Pipeline `cfg` describes (its plan settled with the flags already: `planned`), built
    under the start-up signal handling: a Ctrl-C while models load stops at once."""
    return start_up(lambda: pipeline_for(cfg, service=service, planned=planned, hooks=hooks))


def metrics_token(cfg: RunConfig) -> str:
    """The token metrics served beyond this machine ask for: the config's, else the
    environment's (a secret kept off the command line)."""
    return cfg.output.metrics_token or os.environ.get("VISIONRT_METRICS_TOKEN", "")


def check_telemetry(path: Path) -> None:
    check_writable(path, "telemetry")
