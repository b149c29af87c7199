"""The parts of a run, loaded from its configuration: the detector (whole frames or tiles) and those
the sources of some frame sizes run instead (`sizes`), the depth task and the sources it runs on,
the latency ladder's variants and controller, and motion regions' detector. The stage graph
(build.py) is made over these parts; they decide no policy themselves."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from visionrt.backends import Backend, BackendOptions
from visionrt.config.pipeline import DepthOptions, PipelineOptions
from visionrt.config.sizes import Size, SizedDetector
from visionrt.errors import ConfigError
from visionrt.pipeline.degrade import Change, Degrader, build_ladder
from visionrt.pipeline.gating import ladder_gates
from visionrt.pipeline.sizes import build_sized, detector_rows, detectors_note, frame_size
from visionrt.pipeline.variants import degrade_variants
from visionrt.postprocess import PostprocessOptions
from visionrt.preprocess.regions import RegionPlanner
from visionrt.sources import Source
from visionrt.tasks import DetectTask, TiledDetectTask
from visionrt.tasks.base import Task
from visionrt.tasks.regions import RegionDetectTask

TRACK_LOW = 0.1  # ByteTrack's low-score floor
log = logging.getLogger("visionrt")


@dataclass
class Parts:
    """`tasks[0]` is the detector; `sized` the detectors the sources of some frame sizes run
    instead (their lanes follow the tasks': `sized_lanes` by size); `schedule[i]` the lanes run
    on source i's frames, its detector's first; `variants` the latency ladder's detectors, run
    by `degrader`'s rungs; `postprocess` the detector's options as run (tracking lowers its
    threshold); `models` the detectors' files (the run's own, then `sized`'); `notes` what the
    user is told."""

    detector: DetectTask | TiledDetectTask
    tasks: list[Task]
    schedule: list[list[int]]
    postprocess: PostprocessOptions
    tracker_high: float
    tracker_low: float
    depth: DepthOptions | None = None  # as it runs (its plan applied)
    variants: list[Task] = field(default_factory=list)
    degrader: Degrader | None = None
    notes: list[str] = field(default_factory=list)
    regions: RegionDetectTask | None = None  # motion regions' detector, and where it looks
    planner: RegionPlanner | None = None
    sized: list[Task] = field(default_factory=list)
    sized_lanes: dict[Size, int] = field(default_factory=dict)
    models: list[str] = field(default_factory=list)

    @property
    def lanes(self) -> list[Task]:
        """The tasks with a lane before the ladder's variants: the tasks, then `sized`."""
        return [*self.tasks, *self.sized]

    @property
    def extra(self) -> list[Task]:
        """The detectors besides the tasks: those of other sizes, the ladder's variants, the
        region detector."""
        regions = [self.regions] if self.regions is not None else []
        return [*self.sized, *self.variants, *regions]

    def detector_lane(self, size: Size | None) -> int:
        """The lane of the detector a source of this frame size runs (0: the run's own)."""
        return self.sized_lanes.get(size, 0) if size is not None else 0

    def detector_rows(
        self, names: Sequence[str], sources: Sequence[Source]
    ) -> list[dict[str, Any]]:
        """Each detector with the sources it runs (`sizes.detector_rows`)."""
        first = len(self.tasks)
        routes = [0 if s[0] < first else s[0] - first + 1 for s in self.schedule]
        detectors = list(zip([self.detector, *self.sized], self.models, strict=True))
        return detector_rows(detectors, routes, names, sources)

    def close(self) -> None:
        for task in [*self.tasks, *self.extra]:
            task.close()


def build_parts(
    sources: Sequence[Source],
    names: Sequence[str],
    model: str | Path,
    backend: str | Backend,
    backend_options: BackendOptions | None,
    postprocess: PostprocessOptions,
    options: PipelineOptions,
    depth: DepthOptions | None,
    on_degrade: Callable[[Change], None],
    sizes: Mapping[Size, SizedDetector] | None = None,
) -> Parts:
    """Load the run's tasks (their plans settled already: `pipeline.plan_run`). The sources of a
    frame size in `sizes` run that detector instead of the run's own (`pipeline.sizes`)."""
    # Tracking: the user's threshold starts tracks; ByteTrack's second stage also needs the
    # detector's boxes down to TRACK_LOW, which only ever extend tracks already there.
    high, low = postprocess.conf, min(TRACK_LOW, postprocess.conf)
    if options.tracking.tracker_runs:
        postprocess = replace(postprocess, conf=low)

    def make(chosen: SizedDetector, on: Sequence[Source], loaded: Backend | None = None) -> Task:
        runtime = loaded if loaded is not None else chosen.backend
        if options.tiling.tile:
            known = [size for s in on if (size := frame_size(s))]
            tiling = options.tiling
            return TiledDetectTask.for_sources(
                chosen.model, runtime, chosen.inference, postprocess, tiling, known
            )
        return DetectTask(chosen.model, runtime, chosen.inference, postprocess)

    own = SizedDetector(str(model), backend if isinstance(backend, str) else "",
                        backend_options or BackendOptions())  # fmt: skip
    loaded = None if isinstance(backend, str) else backend
    detector = make(own, sources, loaded)
    assert isinstance(detector, DetectTask | TiledDetectTask)
    parts = Parts(detector, [detector], [[0] for _ in sources], postprocess, high, low)
    parts.models.append(str(model))
    try:
        if depth is not None and depth.model:
            _add_depth(parts, depth, sources, names)
        elif depth is not None and depth.on:
            raise ConfigError("--depth-on names sources for a depth model: give --depth MODEL")
        if sizes:
            _add_sized(parts, sources, names, sizes, own, make)
        if options.slo.target_ms:
            live = any(s.live for s in sources)
            _add_degrade(parts, model, backend, backend_options, options, live, on_degrade)
        if options.motion.mode == "regions":
            _add_regions(parts, model, backend, backend_options, options, len(sources))
    except BaseException:
        parts.close()
        raise
    return parts


def _add_sized(
    parts: Parts,
    sources: Sequence[Source],
    names: Sequence[str],
    sizes: Mapping[Size, SizedDetector],
    own: SizedDetector,
    make: Callable[[SizedDetector, Sequence[Source]], Task],
) -> None:
    """The detectors of the sizes whose sources run another than the run's own, each source's
    schedule starting with its detector's lane, and the line saying which runs where."""
    made, index = build_sized(sources, sizes, own, make)
    first = len(parts.tasks)
    parts.sized = [task for task, _ in made]
    parts.models.extend(chosen.model for _, chosen in made)
    parts.sized_lanes = {size: first + i for size, i in index.items()}
    for source_id, source in enumerate(sources):
        parts.schedule[source_id][0] = parts.detector_lane(frame_size(source))
    if made:
        note = detectors_note(parts.detector_rows(names, sources))
        parts.notes.append(note)
        log.info("%s", note)


def _add_depth(
    parts: Parts, depth: DepthOptions, sources: Sequence[Source], names: Sequence[str]
) -> None:
    from visionrt.tasks.depth import DepthTask

    unknown = sorted(set(depth.on) - set(names))
    if unknown:
        raise ConfigError(
            f"--depth-on: no source named '{unknown[0]}' (sources: {', '.join(names)})"
        )
    on = [i for i, name in enumerate(names) if not depth.on or name in depth.on]
    task = DepthTask(
        depth.model,
        depth.backend,
        depth.inference,
        short_side=depth.input_short_side,
        on_nonfinite=depth.on_nonfinite,
        source_hw=getattr(sources[on[0]], "size", None) if on else None,
    )
    parts.tasks.append(task)
    parts.depth = depth
    for i in on:
        parts.schedule[i].append(len(parts.tasks) - 1)


def _add_degrade(
    parts: Parts,
    model: str | Path,
    backend: str | Backend,
    backend_options: BackendOptions | None,
    options: PipelineOptions,
    live: bool,
    on_degrade: Callable[[Change], None],
) -> None:
    """The ladder's detector variants (smaller inputs, then a lighter model) and its
    controller."""
    if not live:
        raise ConfigError(
            "--slo-ms: a latency target needs live sources (cameras, streams, or files with"
            " --realtime); file mode processes every frame and its latency is queueing"
        )
    variants, labels, notes = degrade_variants(
        model,
        backend,
        backend_options or BackendOptions(),
        options,
        parts.detector,
        parts.postprocess,
    )
    parts.variants.extend(variants)
    parts.notes.extend(notes)
    every = options.tracking.detect_every
    gating = ladder_gates(options)
    rungs = build_ladder(
        every, max(every, options.slo.max_every), options.tracking.tracker_runs, labels, gating
    )
    parts.degrader = Degrader(
        options.slo.target_ms / 1e3, rungs, options.slo.window, on_change=on_degrade
    )


def _add_regions(
    parts: Parts,
    model: str | Path,
    backend: str | Backend,
    backend_options: BackendOptions | None,
    options: PipelineOptions,
    sources: int,
) -> None:
    """The region detector (`pipeline.motion.region_model`, or the run's model resized) and the
    planner of its windows."""
    if not isinstance(backend, str):
        raise ConfigError("--motion regions: needs a backend name, not a loaded Backend")
    side = options.motion.region
    planner = RegionPlanner(sources, side, parts.detector.input_hw)
    parts.regions = RegionDetectTask(
        options.motion.region_model or model,
        backend,
        backend_options,
        parts.postprocess,
        side,
        planner.max_windows,
    )
    parts.planner = planner
