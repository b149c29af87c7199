"""The latency ladder's detector variants: the detector at smaller inputs where its file can be
resized, then a lighter model — loaded at start, so a step down costs no load."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from visionrt.backends import Backend, BackendOptions
from visionrt.config.pipeline import PipelineOptions
from visionrt.errors import ModelLoadError
from visionrt.pipeline.degrade import check_slo_model, smaller_sides
from visionrt.postprocess import PostprocessOptions
from visionrt.tasks import DetectTask, TiledDetectTask
from visionrt.tasks.base import Task


def degrade_variants(
    model: str | Path,
    backend: str | Backend,
    options: BackendOptions,
    pipeline: PipelineOptions,
    task: DetectTask | TiledDetectTask,
    postprocess: PostprocessOptions,
) -> tuple[list[Task], list[str], list[str]]:
    """The variants, their ladder labels, and notes on what could not be built and why."""
    variants: list[Task] = []
    labels: list[str] = []
    notes: list[str] = []
    if pipeline.slo.model:
        check_slo_model(pipeline.slo.model)  # before minutes of loading the other rungs
    # A loaded Backend cannot be re-sized; tiles keep their size (detect less often instead).
    if isinstance(backend, str) and not pipeline.tiling.tile and Path(model).suffix != ".onnx":
        notes.append(
            f"slo: {Path(model).name} is an artifact made at one input size (quantized or"
            " compiled for it), so the ladder has no smaller-input rungs; it detects less"
            " often instead (`visionrt export --imgsz` makes one per size)"
        )
    elif isinstance(backend, str) and not pipeline.tiling.tile:
        try:
            for side in pipeline.slo.sizes or smaller_sides(task.spec.stride, task.input_hw):
                sized = replace(options, input_size=(side, side))
                variants.append(DetectTask(model, backend, sized, postprocess))
                labels.append(f"input {side}×{side}")
        except ModelLoadError as err:  # a head the size rewrite does not understand
            for variant in variants:
                variant.close()
            variants, labels = [], []
            notes.append(
                f"slo: {Path(model).name} cannot run at a smaller input ({err}); the ladder"
                " detects less often instead"
            )
    if pipeline.slo.model:
        # Its own runtime at its own size: the precision and settings chosen for the main
        # model (a plan's INT8 artifact, say) mean nothing for another file.
        own = BackendOptions(
            options.device, threads=options.threads, batch=options.batch,
            cache_dir=options.cache_dir,
        )  # fmt: skip
        variants.append(DetectTask(pipeline.slo.model, "", own, postprocess))
        labels.append(f"model {Path(pipeline.slo.model).name}")
    return variants, labels, notes
