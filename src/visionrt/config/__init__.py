"""Run configuration: defaults < YAML file < `--set key=value`, validated with one-line errors."""

from visionrt.config.load import config_over, given_options, load_config, pipeline_options
from visionrt.config.run import (
    PROCESSES,
    ClusterOptions,
    DepthConfig,
    OutputOptions,
    RunConfig,
    check_address,
)

__all__ = [
    "PROCESSES",
    "ClusterOptions",
    "DepthConfig",
    "OutputOptions",
    "RunConfig",
    "check_address",
    "config_over",
    "given_options",
    "load_config",
    "pipeline_options",
]
