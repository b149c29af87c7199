"""`visionrt run` from Python: a configuration run as the command runs it, its outputs written where
and as the command writes them."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from visionrt.errors import ConfigError, SinkError
from visionrt.pipeline import pipeline_for
from visionrt.pipeline.hooks import Hooks
from visionrt.pipeline.outputs import OutputFolder, make_sinks
from visionrt.pipeline.plan_run import planned_config
from visionrt.sinks.base import check_writable
from visionrt.telemetry import RunSummary
from visionrt.telemetry.report import TelemetryWriter

log = logging.getLogger("visionrt")


def run_configured(
    config: str | Path | None = None,
    overrides: Sequence[str] = (),
    values: Mapping[str, Any] | None = None,
    plan: str | Path | None = None,
    no_plan: bool = False,
    hooks: Hooks | None = None,
) -> RunSummary:
    """Run what `visionrt run --config CONFIG --set OVERRIDE…` runs and write what it writes.

    The configuration is the command's (defaults < the YAML file `config` < `overrides`,
    KEY=VALUE < `values`, a nested dict of keys), under the same plan (`plan`: a plan file;
    `no_plan`: the model as given; else the one `visionrt tune` cached for the model on this
    machine), with the demo's model and video where it names none. Its outputs go where the
    command's go, by the same rule (`pipeline.outputs.OutputFolder`: `output.dir`, locked; an
    earlier run's outputs there refused unless `output.overwrite`), and summary.json is written
    however the run ends. With a `cluster` section it runs on Ray (or worker processes), each
    kind of machine with its own plan, as `run --ray` does. The plan's lines and the notes go
    to the `visionrt` logger (and to `hooks.on_note`); a failed run raises its error once its
    outputs are finalized. Served metrics are the command's (`output.metrics_port` is refused
    here: read `Pipeline.telemetry`, or run the command)."""
    planned = planned_config(config, overrides, values, plan, no_plan, say=log.info)
    cfg = planned.config
    if cfg.output.metrics_port:
        raise ConfigError(
            "output.metrics_port: metrics are served by `visionrt run`; run_configured serves"
            " none (a Pipeline's telemetry holds the same figures)"
        )
    for note in planned.notes:
        log.info("%s", note)
    if cfg.cluster.address:
        from visionrt.distributed import run_on_ray

        def resolve(fingerprint: dict[str, Any]) -> tuple[Any, str]:
            found = planned_config(config, overrides, values, plan, no_plan, log.info, fingerprint)
            return found.config, "\n".join(found.notes)

        summary, _ = run_on_ray(cfg, "\n".join(planned.notes), resolve, say=log.info)
        return summary
    with OutputFolder.for_run(cfg, "run_configured") as folder:
        if cfg.output.telemetry:
            check_writable(Path(cfg.output.telemetry), "telemetry")
        pipeline = pipeline_for(cfg, planned=planned, hooks=hooks)
        error: BaseException | None = None
        writer: TelemetryWriter | None = None
        try:
            folder.clear(log.warning)
            sinks = make_sinks(cfg, pipeline)
            if cfg.output.telemetry:
                writer = TelemetryWriter(
                    pipeline.telemetry, cfg.output.telemetry, on_error=pipeline.fail
                ).start()
            try:
                summary = pipeline.run(sinks)
            except Exception as err:  # finalized already: the summary still says what ran
                error, summary = err, pipeline.summary()
        finally:
            pipeline.close()
            if writer is not None:
                try:
                    writer.close()
                except SinkError as err:  # a full disk: the run's own error comes first
                    error = error or err
        written = folder.finish(summary)
    if error is not None:
        raise error
    if written is not None:
        raise written
    return summary
