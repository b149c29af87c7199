"""The config's `pipeline` section (queue depth, live-mode staleness, warm-up, helper threads,
and a section per policy: tracking, latency target, tiling, motion gating, the live audit) and
the depth model run beside the detector (the `depth` section's part the pipeline reads)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from visionrt.backends import BackendOptions
from visionrt.errors import ConfigError
from visionrt.fuse.track_options import TrackingOptions
from visionrt.preprocess.depth import DEFAULT_SHORT_SIDE, MAX_DEPTH_EVERY
from visionrt.preprocess.motion import MotionOptions
from visionrt.preprocess.tile import TileOptions
from visionrt.tasks.depth import MAX_SHORT_SIDE


@dataclass(frozen=True, slots=True)
class SloOptions:
    """The config's `pipeline.slo` section (the pipeline's degradation ladder, pipeline/degrade):
    live runs with a latency target. When glass-to-result p95 over `window` seconds passes
    `target_ms`, step down a ladder — detect every N up to `max_every`, then the detector at each
    of `sizes` (square input sides; empty: 0.8× and 0.6× of the model's, rounded to its stride),
    then `model` (a lighter detector) — and back up with hysteresis. 0: off. With motion gating
    off, the ladder's first step turns it on (skip) when `motion`."""

    target_ms: float = 0.0
    sizes: tuple[int, ...] = ()
    model: str = ""
    max_every: int = 3
    motion: bool = True
    window: float = 2.0

    def __post_init__(self) -> None:
        if self.target_ms < 0:
            raise ConfigError(
                f"pipeline.slo.target_ms: expected 0 (off) or milliseconds > 0, got"
                f" {self.target_ms}"
            )
        if self.window <= 0:
            raise ConfigError(f"pipeline.slo.window: expected > 0 seconds, got {self.window}")
        if self.max_every < 1:
            raise ConfigError(f"pipeline.slo.max_every: expected >= 1, got {self.max_every}")
        if any(size < 32 for size in self.sizes):
            raise ConfigError(f"pipeline.slo.sizes: expected sides >= 32, got {self.sizes}")


@dataclass(frozen=True, slots=True)
class AuditOptions:
    """The config's `pipeline.audit` section (the live accuracy audit, accuracy/audit): the FP32
    reference `reference` (an ONNX detector; "": the plan's source model) runs on a `share` of
    each source's frames (None: 0.02 when a reference is known and the run is not the reference
    itself, else off) in a low-priority lane; an event when mAP50 over the last `window`
    audited frames falls below `min_fidelity` (None: the plan's budget, else 0.95)."""

    share: float | None = None
    reference: str = ""
    min_fidelity: float | None = None
    window: int = 30

    def __post_init__(self) -> None:
        if self.share is not None and not 0 <= self.share <= 0.5:
            raise ConfigError(
                "pipeline.audit.share (--audit): expected a share of frames from 0 to 0.5"
                f" (0.02: one frame in 50), got {self.share:g}"
            )
        if self.min_fidelity is not None and not 0 <= self.min_fidelity <= 1:
            raise ConfigError(
                f"pipeline.audit.min_fidelity: expected 0 to 1, got {self.min_fidelity}"
            )
        if self.window < 1:
            raise ConfigError(f"pipeline.audit.window: expected >= 1, got {self.window}")


@dataclass(frozen=True, slots=True)
class PipelineOptions:
    """The config's `pipeline` section: the runner's own options, and one section per policy,
    each its component's options — `tracking` (fuse/track_options), `slo` (the degradation
    ladder), `tiling` (preprocess/tile), `motion` (preprocess/motion), `audit`.

    `queue_size` bounds each queue between stages; `stale_after` (seconds) is the live-mode
    age past which a frame is dropped before inference; `warmup` inferences run at load;
    `opencv_threads` sizes OpenCV's process-wide pool while the pipeline runs (0: its default)."""

    queue_size: int = 4
    stale_after: float = 0.5
    warmup: int = 2
    # OpenCV's own thread pool: its parallel resize only competes with the inference threads.
    opencv_threads: int = 1
    # Niceness of the decode and preprocess threads: they then run in the inference runtime's
    # idle moments instead of preempting its workers (which stalls all of them at the next
    # barrier). 0 leaves them at the process's priority.
    helper_nice: int = 10
    # Threads that read a run's files (pipeline/readers), never more than the files; each
    # takes the next file in turn for a few frames. 0: one per usable core, half of them when
    # the detector's device prepares the frames. A live source has its own thread whatever
    # this says.
    reader_threads: int = 0
    # How long an inference worker waits for more frames to fill a batch once it has one; 0
    # sends a batch with what is there (live mode should never wait for a stalled camera).
    batch_wait_ms: float = 0.0
    tracking: TrackingOptions = field(default_factory=TrackingOptions)
    slo: SloOptions = field(default_factory=SloOptions)
    # High-resolution sources: the detector runs on tiles, batched in one call per frame.
    tiling: TileOptions = field(default_factory=TileOptions)
    motion: MotionOptions = field(default_factory=MotionOptions)
    audit: AuditOptions = field(default_factory=AuditOptions)

    def __post_init__(self) -> None:
        if self.queue_size < 1:
            raise ConfigError(f"pipeline.queue_size: expected >= 1, got {self.queue_size}")
        if self.stale_after <= 0:
            raise ConfigError(f"pipeline.stale_after: expected > 0 seconds, got {self.stale_after}")
        if self.warmup < 0:
            raise ConfigError(f"pipeline.warmup: expected >= 0, got {self.warmup}")
        if not 0 <= self.helper_nice <= 19:
            raise ConfigError(f"pipeline.helper_nice: expected 0 to 19, got {self.helper_nice}")
        if not 0 <= self.batch_wait_ms <= 1000:
            raise ConfigError(
                f"pipeline.batch_wait_ms: expected 0 to 1000, got {self.batch_wait_ms}"
            )
        if self.reader_threads < 0:
            raise ConfigError(
                f"pipeline.reader_threads: expected 0 (one per core) or more, got"
                f" {self.reader_threads}"
            )
        if self.opencv_threads < 0:
            raise ConfigError(f"pipeline.opencv_threads: expected >= 0, got {self.opencv_threads}")
        if self.motion.mode == "regions" and self.tiling.tile:
            raise ConfigError(
                "--motion regions: tiling (--tile) already cuts each frame into windows; use"
                " --motion skip with it"
            )


@dataclass(frozen=True, slots=True)
class DepthOptions:
    """A depth model beside the detector (`model` "": none), on the sources named in `on`
    (empty: every source). `short_side` is its input's short side in pixels (a multiple of 14:
    266, 364 or 518; None: the depth plan's, else DEFAULT_SHORT_SIDE — `input_short_side`);
    `on_nonfinite` is what a NaN/Inf depth map does: "recompute" the frame in
    FP32, or "fail" the run; `smoothing` is the EMA weight of a source's previous depth map (0:
    off; for live depth that flickers); `every` N > 1 runs the depth model on 1 frame in N of
    each of its sources, the frames between taking that source's latest map (a tracked object
    keeps the distance measured on it there; other boxes are measured on the held map: stale
    where things moved); a run not given it takes the depth plan's (`tune --depth` measures
    it). The run configuration's `depth` section is this, plus its outputs
    (config.DepthConfig)."""

    model: str | Path = ""
    on: tuple[str, ...] = ()
    backend: str = ""
    inference: BackendOptions = field(default_factory=BackendOptions)
    short_side: int | None = None
    on_nonfinite: str = "recompute"
    smoothing: float = 0.0
    every: int = 1
    # The live audit's FP32 depth reference ("": the depth plan's source model) and its AbsRel
    # budget (None: the depth plan's, else 0.02); how often is PipelineOptions.audit.share.
    audit_reference: str | Path = ""
    audit_max_abs_rel: float | None = None
    # The short side the audit's reference runs at (None: the run's): the depth plan's
    # reference size, so that a smaller planned size is audited for what it loses.
    audit_short_side: int | None = None

    @property
    def input_short_side(self) -> int:
        return self.short_side or DEFAULT_SHORT_SIDE

    def __post_init__(self) -> None:
        for side in (self.short_side, self.audit_short_side):
            if side is not None:
                _check_side(side)
        if not all(name.strip() for name in self.on):
            raise ConfigError(
                f"depth.on (--depth-on): expected source names separated by commas, e.g."
                f" rgb,slam1; got an empty name in {','.join(self.on)!r}"
            )
        if self.on_nonfinite not in ("recompute", "fail"):
            raise ConfigError(
                f"depth.on_nonfinite: expected recompute or fail, got '{self.on_nonfinite}'"
            )
        if not 0.0 <= self.smoothing < 1.0:
            raise ConfigError(f"depth.smoothing: expected 0 <= alpha < 1, got {self.smoothing}")
        if not 1 <= self.every <= MAX_DEPTH_EVERY:
            raise ConfigError(
                f"depth.every (--depth-every): expected 1 (every frame) to {MAX_DEPTH_EVERY}"
                f" frames, got {self.every}"
            )
        if self.audit_max_abs_rel is not None and not self.audit_max_abs_rel > 0:
            raise ConfigError(
                f"depth.audit_max_abs_rel: expected > 0, got {self.audit_max_abs_rel}"
            )


def _check_side(side: int) -> None:
    """A depth input's short side: a multiple of the ViT's patch, at most MAX_SHORT_SIDE."""
    if side < 14 or side % 14:
        raise ConfigError(
            f"depth.short_side: expected a multiple of 14 (266, 364, 518), got {side}"
        )
    # The ViT's memory grows with the 4th power of the side: 3.8 GB at 1036 on the CPU,
    # ~190 GB at 2800 (measured and extrapolated in visionrt.tasks.depth).
    if side > MAX_SHORT_SIDE:
        raise ConfigError(
            f"depth.short_side (--depth-size): expected at most {MAX_SHORT_SIDE} (the"
            f" model's memory grows with the 4th power of the side: ~4 GB at"
            f" {MAX_SHORT_SIDE}), got {side}"
        )


# The `pipeline` section's keys before each policy had its own section (2026-11-28): read, for
# this release, as the key each names (a cached plan or a user's config may still hold them).
# `motion` and `audit` were values and are now sections: a value there is the first key's.
FLAT_KEYS = {
    "track": "tracking.enabled",
    "detect_every": "tracking.detect_every",
    "tracker": "tracking.tracker",
    "track_match_iou": "tracking.match_iou",
    "track_lost_seconds": "tracking.lost_seconds",
    "track_per_class": "tracking.per_class",
    "slo_ms": "slo.target_ms",
    "slo_sizes": "slo.sizes",
    "slo_model": "slo.model",
    "slo_max_every": "slo.max_every",
    "slo_motion": "slo.motion",
    "slo_window": "slo.window",
    "tile": "tiling.tile",
    "tile_overlap": "tiling.overlap",
    "tile_full_frame": "tiling.full_frame",
    "tile_merge": "tiling.merge_threshold",
    "motion": "motion.mode",
    "motion_threshold": "motion.threshold",
    "motion_min_area": "motion.min_area",
    "motion_refresh": "motion.refresh",
    "motion_dilate": "motion.dilate",
    "motion_region": "motion.region",
    "motion_region_model": "motion.region_model",
    "audit": "audit.share",
    "audit_reference": "audit.reference",
    "audit_min_fidelity": "audit.min_fidelity",
    "audit_window": "audit.window",
}


def nested_key(key: str) -> str:
    """A dotted config key with a flat `pipeline.*` key of before (FLAT_KEYS) as the key it
    names now; any other key as it is."""
    section, _, name = key.partition(".")
    if section == "pipeline" and name in FLAT_KEYS:
        return f"pipeline.{FLAT_KEYS[name]}"
    return key
