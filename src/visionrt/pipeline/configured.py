"""The Pipeline a run configuration describes: the one place a `RunConfig`'s sections become a
Pipeline's arguments (`run`, `serve`, a cluster's workers, `profile`)."""

from __future__ import annotations

from collections.abc import Sequence

from visionrt.backends import Backend
from visionrt.config import RunConfig
from visionrt.config.sizes import parse_size_key
from visionrt.fuse import Checkpoint
from visionrt.pipeline.core import Pipeline
from visionrt.pipeline.hooks import Hooks
from visionrt.pipeline.plan_run import PlannedRun


def pipeline_for(
    cfg: RunConfig,
    sources: Sequence[str] | None = None,
    service: bool = False,
    loaded: Backend | None = None,
    frame_ranges: Sequence[tuple[int, int]] | None = None,
    checkpoints: Sequence[Checkpoint | None] = (),
    planned: PlannedRun | None = None,
    hooks: Hooks | None = None,
) -> Pipeline:
    """The Pipeline `cfg` describes over `sources` (default: its own), its plan settled already
    (the plan's sections are in `cfg`, so the Pipeline takes none of its own). `loaded`: the
    detector `cfg` names, already loaded (the caller keeps and closes it). `frame_ranges`: each
    source's first and end frame, `checkpoints` its fusion state to resume with (see
    Pipeline). `planned`: the plan decision `cfg` came from (`plan_run`: its lines become the
    pipeline's first notes, and the audit's verdict goes back into its plan); `hooks`: what the
    caller is told as the run goes."""
    return Pipeline(
        list(cfg.sources if sources is None else sources),
        cfg.model,
        loaded if loaded is not None else cfg.backend,
        cfg.inference,
        cfg.postprocess,
        cfg.source,
        cfg.pipeline,
        cfg.depth,
        plan=planned if planned is not None else False,
        analytics=cfg.analytics,
        service=service,
        frame_ranges=frame_ranges,
        checkpoints=checkpoints,
        sizes={parse_size_key(key): detector for key, detector in cfg.sizes.items()},
        hooks=hooks,
    )
