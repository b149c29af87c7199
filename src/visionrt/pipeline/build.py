"""The stage graph of a run, built over its parts (parts.py): the scheduler, each source's fusion
steps (resumed from their checkpoints) and motion gating; `Pipeline` runs it."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import partial

import cv2

from visionrt.config.pipeline import PipelineOptions
from visionrt.fuse import (
    AnalyticsFuser,
    Checkpoint,
    DepthFuser,
    DepthSmoother,
    Fuser,
    ReuseFuser,
    SeenFuser,
    SourceAnalytics,
    TrackFuser,
    make_tracker,
    resume_steps,
)
from visionrt.pipeline.audit import stop_gating
from visionrt.pipeline.flow import Flow
from visionrt.pipeline.gating import Gating, ladder_gates
from visionrt.pipeline.graph import Graph
from visionrt.pipeline.opening import OpenRun
from visionrt.pipeline.parts import Parts
from visionrt.pipeline.schedule import Scheduler
from visionrt.pipeline.work import Inputs, Work
from visionrt.telemetry import Telemetry


def build_fusers(
    parts: Parts,
    options: PipelineOptions,
    analytics: Mapping[str, SourceAnalytics] | None = None,
    names: Sequence[str] = (),
    warn: Callable[[str], None] | None = None,
) -> list[list[Fuser]]:
    """Each source's fusion steps (`source_fusers`), `analytics` by source name in `names`."""
    analytics = analytics or {}  # checked against the sources when the run opened
    return [
        source_fusers(
            parts,
            options,
            source_id,
            analytics.get(names[source_id]) if source_id < len(names) else None,
            warn,
        )
        for source_id in range(len(parts.schedule))
    ]


def source_fusers(
    parts: Parts,
    options: PipelineOptions,
    source_id: int,
    analytics: SourceAnalytics | None = None,
    warn: Callable[[str], None] | None = None,
) -> list[Fuser]:
    """Source `source_id`'s fusion steps, in order: with motion gating, the last results on
    frames no model ran on; tracking (its detections become the tracks'); distances from depth
    when depth runs on it; zones and lines (`analytics`) on the tracks (`warn` is told of one
    outside the frames); in regions mode, the boxes delivered, for the next frames' windows."""
    steps: list[Fuser] = []
    detector = parts.detector.name
    smoothing = parts.depth.smoothing if parts.depth is not None else 0.0
    hold = parts.depth is not None and parts.depth.every > 1  # depth on 1 frame in N
    if options.motion.mode != "off" or ladder_gates(options):
        steps.append(ReuseFuser(detector))
    if options.tracking.tracker_runs:
        tracker = make_tracker(options.tracking.options(parts.tracker_high, parts.tracker_low))
        steps.append(TrackFuser(tracker, detector, ids=options.tracking.enabled))
    for index in parts.schedule[source_id][1:]:
        smoother = DepthSmoother(smoothing) if smoothing else None
        steps.append(DepthFuser(parts.tasks[index].name, smoother, hold))
    if analytics is not None:
        steps.append(AnalyticsFuser(analytics, parts.detector.class_names, warn))
    if parts.planner is not None:
        steps.append(SeenFuser(partial(parts.planner.remember, source_id)))
    return steps


def build_gating(parts: Parts, options: PipelineOptions, telemetry: Telemetry) -> Gating | None:
    """Motion gating's per-frame work when `pipeline.motion.mode` is on, else None."""
    if options.motion.mode == "off" and not ladder_gates(options):
        return None
    height, width = parts.detector.input_hw
    side = options.motion.region
    return Gating(
        options.motion,
        len(parts.schedule),
        telemetry,
        height * width,
        parts.planner,
        side * side,
    )


def start_graph(
    run: OpenRun,
    flow: Flow,
    fail: Callable[[BaseException], None],
    note: Callable[[str], None],
    resume: Sequence[Checkpoint | None] = (),
    service: bool = False,
) -> Graph:
    """The stage graph over an opened run's parts: the scheduler (which lanes run on a frame;
    the latency ladder's variants and the region lane after the tasks' lanes), each source's
    fusion steps (a source with a checkpoint in `resume` goes on from it), motion gating; `fail`
    stops the run on a stage's error, `note` says what the fusers find as frames come. And what
    starts before its threads: OpenCV's thread count, the queues' gauges, the telemetry, the
    audit (which turns gating off on a source whose spared frames fall below the budget)."""
    parts, options, sources = run.parts, run.options, run.sources
    first_variant = len(parts.lanes)
    scheduler = Scheduler(
        parts.schedule,
        options,
        [source.live for source in sources],
        parts.degrader,
        range(first_variant, first_variant + len(parts.variants)),
        first_variant + len(parts.variants) if parts.regions is not None else -1,
        parts.depth.every if parts.depth is not None else 1,
    )
    fusers = build_fusers(parts, options, run.analytics, run.names, note)
    for source_id, checkpoint in enumerate(resume):
        if checkpoint is not None:
            resume_steps(fusers[source_id], checkpoint)
            scheduler.resume(source_id, checkpoint.since_detect)
    work = Work(
        parts.lanes,
        scheduler,
        fusers,
        parts.detector.class_names,
        parts.variants,
        build_gating(parts, options, run.telemetry),
        parts.regions,
    )
    inputs = Inputs(sources, run.names, run.named)
    graph = Graph(inputs, work, options, run.telemetry, flow, fail, service)
    if options.opencv_threads:
        cv2.setNumThreads(options.opencv_threads)
    for name, read in graph.depths().items():
        run.telemetry.register_gauge(name, read)
    run.telemetry.start()
    if run.auditor is not None:
        if graph.gating is not None:
            run.auditor.on_spared_below = partial(stop_gating, graph.gating, run.names, note)
        run.auditor.start()
    return graph
