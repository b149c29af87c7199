"""`run_bench`: the measurement protocol — variants alternated over repetitions, model-only
calls around each end-to-end run on the very backend the pipeline used."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from visionrt.backends import Backend, BackendOptions
from visionrt.bench.measure import (
    BenchResult,
    measure_end_to_end,
    measure_interleaved,
    measure_model_only,
    plain_session,
    prepared_inputs,
)
from visionrt.pipeline import Pipeline
from visionrt.postprocess import PostprocessOptions
from visionrt.sources import SourceOptions


@dataclass(frozen=True, slots=True)
class Variant:
    """One configuration to measure: a backend, its options and the model file it loads;
    `text` is its label (the CLI's `--variant` text)."""

    backend: str
    options: BackendOptions
    model: str
    text: str = ""

    @property
    def label(self) -> str:
        return self.text or self.backend


def run_bench(
    variants: list[Variant],
    video: str,
    runs: int,
    model_only_calls: int,
    max_frames: int,
    interleave: int = 0,
    on_step: Callable[[str, int], None] | None = None,
) -> list[BenchResult]:
    """Each repetition measures every variant once, so drifts in machine speed hit all variants
    alike. Within a repetition the end-to-end run is sandwiched between two halves of the
    model-only calls on the very backend the pipeline used (same threads, same settings), so a
    drift during the run hits both figures of the efficiency ratio alike.

    `on_step(label, done)` is called before each of the `runs * len(variants)` measurements
    (`done` of them finished) and once after the last."""
    rows: dict[str, dict[str, list[float]]] = {
        v.label: {"mo": [], "e2e": [], "p50": [], "p99": [], "eff": [], "plain": []}
        for v in variants
    }
    details: dict[str, Any] = {}
    half = max(1, model_only_calls // 2)
    done = 0
    for _ in range(runs):
        for variant in variants:
            if on_step is not None:
                on_step(variant.label, done)
            row = rows[variant.label]
            pipeline = Pipeline(
                [video],
                variant.model,
                variant.backend,
                variant.options,
                PostprocessOptions(),
                SourceOptions(mode="file", max_frames=max_frames),
                plan=False,  # each variant as written
            )
            # The same runtime and model file with the runtime's own defaults.
            info = pipeline.task.backend.info
            plain = plain_session(info.runtime, info.details.get("model", variant.model))
            try:
                inputs = prepared_inputs(video, pipeline.task.input_hw, pipeline.task.layout)
                times = measure_model_only(pipeline.task.backend, inputs, half)
                plain_times = measure_model_only(plain, inputs, half) if plain else []
                fps, summary = measure_end_to_end(pipeline)
                if plain:
                    plain_times += measure_model_only(plain, inputs, half, warmup=0)
                    row["plain"].append(len(plain_times) / sum(plain_times))
                times += measure_model_only(pipeline.task.backend, inputs, half, warmup=0)
                if interleave:

                    def short_clip(
                        v: Variant = variant, b: Backend = pipeline.task.backend
                    ) -> Pipeline:
                        return Pipeline(
                            [video],
                            v.model,
                            b,
                            v.options,
                            source_options=SourceOptions(mode="file", max_frames=60),
                            plan=False,
                        )

                    row["eff"].append(
                        measure_interleaved(
                            short_clip,
                            inputs,
                            interleave,
                            15,
                            baseline=plain,
                        )
                    )
            finally:
                pipeline.close()
                if plain:
                    plain.close()
            times.sort()
            row["mo"].append(len(times) / sum(times))
            row["p50"].append(1e3 * times[len(times) // 2])
            row["p99"].append(1e3 * times[min(len(times) - 1, int(len(times) * 0.99))])
            row["e2e"].append(fps)
            details[variant.label] = {
                "backend": summary["backend"],
                "stages": summary["stages"],
                "frames": summary["frames_out"],
            }
            done += 1
    if on_step is not None and variants:
        on_step(variants[-1].label, done)
    return [
        BenchResult(
            v.label,
            rows[v.label]["mo"],
            rows[v.label]["e2e"],
            rows[v.label]["p50"],
            rows[v.label]["p99"],
            details[v.label],
            rows[v.label]["eff"],
            rows[v.label]["plain"],
        )
        for v in variants
    ]
