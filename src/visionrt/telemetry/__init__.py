"""Telemetry: per-stage latency percentiles, throughput, drops, CPU and memory, per second."""

from visionrt.telemetry.stats import STAGES, RunSummary, Telemetry, percentiles

__all__ = ["STAGES", "RunSummary", "Telemetry", "percentiles"]
