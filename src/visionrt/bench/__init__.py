"""Benchmarks: model-only and end-to-end speed measured in the same run, with medians and spread."""

from visionrt.bench.measure import (
    BenchResult,
    Spread,
    measure_end_to_end,
    measure_interleaved,
    measure_model_only,
    plain_session,
    prepared_inputs,
)
from visionrt.bench.run import Variant, run_bench

__all__ = [
    "BenchResult",
    "Spread",
    "Variant",
    "measure_end_to_end",
    "measure_interleaved",
    "measure_model_only",
    "plain_session",
    "prepared_inputs",
    "run_bench",
]
