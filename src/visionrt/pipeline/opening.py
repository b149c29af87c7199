"""Opening a run: its sources, the plan decided once (`plan_run`), its tasks loaded (`parts`), its
live audit and every task warmed up; what was opened is closed again when a later step fails."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from visionrt.accuracy.audit import Auditor
from visionrt.accuracy.audit_window import AuditEvent
from visionrt.backends import Backend, BackendOptions
from visionrt.config.pipeline import DepthOptions, PipelineOptions
from visionrt.config.sizes import Size, SizedDetector, parse_size_key
from visionrt.fuse import SourceAnalytics, check_analytics
from visionrt.pipeline.audit import build_auditor
from visionrt.pipeline.degrade import Change
from visionrt.pipeline.parts import Parts, build_parts
from visionrt.pipeline.plan_run import PlannedRun, api_request, plan_run
from visionrt.plans import PlanUse
from visionrt.postprocess import PostprocessOptions
from visionrt.sources import Source, SourceOptions
from visionrt.sources.registry import open_sources
from visionrt.telemetry import Telemetry

log = logging.getLogger("visionrt")


@dataclass
class OpenRun:
    """What a Pipeline runs, opened: the `sources` under their `names` (`named`: the caller gave
    the name) and whether the run is `live`; the `options` as they run (the plan applied); the
    loaded `parts`; the plan that runs (`plan_use`) and the lines saying which, or why none
    (`notes`); the telemetry; the live audit (None: off); zones and lines by source name
    (`analytics`). The source lists grow when a service adds a source (`roster`)."""

    sources: list[Source]
    names: list[str]
    named: list[bool]
    live: bool
    options: PipelineOptions
    parts: Parts
    plan_use: PlanUse
    notes: list[str]
    telemetry: Telemetry
    auditor: Auditor | None
    analytics: Mapping[str, SourceAnalytics]

    def close(self, busy: Sequence[bool] = ()) -> None:
        """Close the sources (but those `busy` says a reader thread still holds), the tasks and
        the audit."""
        for i, source in enumerate(self.sources):
            if i < len(busy) and busy[i]:
                # Still blocked in FFmpeg: closing its container under it is not safe; the
                # thread is a daemon and lets go of it when its read times out.
                continue
            source.close()
        self.parts.close()
        if self.auditor is not None:
            self.auditor.close()


def open_run(
    sources: Sequence[str | Source],
    model: str | Path,
    backend: str | Backend,
    backend_options: BackendOptions | None,
    postprocess: PostprocessOptions,
    source_options: SourceOptions,
    options: PipelineOptions | None,
    depth: DepthOptions | None,
    plan: str | Path | bool | PlannedRun | None,
    analytics: Mapping[str, SourceAnalytics],
    live: bool,
    frame_ranges: Sequence[tuple[int, int]] | None,
    sizes: Mapping[Size, SizedDetector] | None,
    on_degrade: Callable[[Change], None],
    on_audit: Callable[[AuditEvent], None],
) -> OpenRun:
    """Open the sources first (a bad path fails before a model loads), decide the plan (a
    `PlannedRun` is one the caller settled; see `Pipeline` for the others), load the tasks,
    build the audit and warm the tasks up. `live` (a service) makes the run live whatever
    its sources; `on_degrade` and `on_audit` are told of each ladder step and audit event."""
    opened, names, named, specs = open_sources(sources, source_options, frame_ranges)
    live = live or any(s.live for s in opened)
    parts: Parts | None = None
    auditor: Auditor | None = None
    try:
        asked = options  # None: the plan's motion gating may run (api_request)
        options = options or PipelineOptions()
        check_analytics(analytics, names, options.tracking.enabled)
        planned = plan if isinstance(plan, PlannedRun) else None
        if planned is None and plan is not False and isinstance(backend, str):
            on = [spec for spec in specs if spec]
            own, given = api_request(on, model, backend, backend_options, asked, depth, sizes)
            plan_file = plan if isinstance(plan, str | Path) else None  # None, True: cached
            planned = plan_run(own, given, plan_file, live, proven_on=on)
            cfg = planned.config
            model, backend, backend_options = cfg.model, cfg.backend, cfg.inference
            options, depth = cfg.pipeline, cfg.depth
            sizes = {parse_size_key(key): sized for key, sized in cfg.sizes.items()}
            for note in planned.notes:
                log.info("%s", note)
        notes = list(planned.notes) if planned is not None else []
        plan_use = planned.use if planned is not None else PlanUse(None, "")
        parts = build_parts(
            opened, names, model, backend, backend_options, postprocess, options, depth,
            on_degrade, sizes,
        )  # fmt: skip
        notes.extend(parts.notes)
        telemetry = Telemetry()
        auditor, said = build_auditor(
            parts, options, model, opened, names, telemetry, live, on_audit
        )
        notes.extend(said)
        if auditor is not None:
            telemetry.add_figures(auditor.figures)
        for task in [*parts.tasks, *parts.extra]:
            task.warm_up(options.warmup)
    except BaseException:  # a model that cannot load lets go of what was opened for it
        if auditor is not None:
            auditor.close()
        if parts is not None:
            parts.close()
        for source in opened:
            source.close()
        raise
    return OpenRun(
        opened, names, named, live, options, parts, plan_use, notes, telemetry, auditor, analytics
    )
