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
    live runs with a latency target. When glass-to-result p95 passes it, step down a ladder —
    motion gating, detect every N, smaller inputs, a lighter model — and back up with
    hysteresis."""

    target_ms: float = 0.0
    """The glass-to-result p95 to hold, in milliseconds (0: off)."""
    sizes: tuple[int, ...] = ()
    """The ladder's detector input sizes after detect every N, square sides of 32 or more
    (empty: 0.8× and 0.6× of the model's, rounded to its stride)."""
    model: str = ""
    """A lighter detector, the ladder's last step ("": none)."""
    max_every: int = 3
    """The ladder detects on 1 frame in N, N up to this (1 or more, at least
    `pipeline.tracking.detect_every`)."""
    motion: bool = True
    """With motion gating off, the ladder's first step turns it on (skip)."""
    window: float = 2.0
    """Seconds of results the p95 is measured over, and held after each step (above 0)."""

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
    """The config's `pipeline.audit` section (the live accuracy audit, accuracy/audit): an FP32
    reference detector runs on a share of each source's frames in a low-priority lane, and an
    event says when the run's results fall below the fidelity asked for."""

    share: float | None = None
    """The share of each source's frames the reference runs on, 0 to 0.5 (None: 0.02 when a
    reference is known and the run is not the reference itself, else off)."""
    reference: str = ""
    """The FP32 reference, an ONNX detector ("": the plan's source model)."""
    min_fidelity: float | None = None
    """An event when mAP50 against the reference over the last `window` audited frames falls
    below this, 0 to 1 (None: the plan's budget, else 0.95)."""
    window: int = 30
    """Audited frames the fidelity is measured over (1 or more)."""

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
    ladder), `tiling` (preprocess/tile), `motion` (preprocess/motion), `audit`."""

    queue_size: int = 4
    """Frames of each source that may wait between stages, 1 or more (in file mode; a live run
    lets a frame or two wait, so latency cannot build up)."""
    stale_after: float = 0.5
    """Live mode: a frame older than this many seconds is dropped before inference (above 0)."""
    warmup: int = 2
    """Inferences run at load, before the first frame (0 or more)."""
    opencv_threads: int = 1
    """Threads of OpenCV's process-wide pool while the pipeline runs (0: its default); 1, as
    its parallel resize only competes with the inference threads."""
    # (Preempting the runtime's workers stalls all of them at the next barrier.)
    helper_nice: int = 10
    """Niceness of the decode and preprocess threads, 0 to 19 (0: the process's), so that they
    run in the inference runtime's idle moments instead of preempting its workers."""
    reader_threads: int = 0  # pipeline/readers
    """Threads that read a run's files, each taking the next file in turn for a few frames;
    never more than the files, and a live source has its own (0: one per usable core, half of
    them when the detector's device prepares the frames)."""
    batch_wait_ms: float = 0.0
    """How long an inference worker waits for more frames to fill a batch once it has one, 0 to
    1000 ms (0: it sends what is there; live mode should never wait for a stalled camera)."""
    tracking: TrackingOptions = field(default_factory=TrackingOptions)
    """Tracking: a track id per box, and the detector on 1 frame in N (its section below)."""
    slo: SloOptions = field(default_factory=SloOptions)
    """A latency target for live runs, held by doing less (its section below)."""
    tiling: TileOptions = field(default_factory=TileOptions)
    """High-resolution sources: the detector runs on tiles, batched in one call per frame (its
    section below)."""
    motion: MotionOptions = field(default_factory=MotionOptions)
    """Motion gating for fixed cameras (its section below)."""
    audit: AuditOptions = field(default_factory=AuditOptions)
    """The live accuracy audit against an FP32 reference (its section below)."""

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
    """A depth model beside the detector, whose maps give each detection a distance. The run
    configuration's `depth` section is this, plus its outputs (config.DepthConfig)."""

    model: str | Path = ""
    """The depth model (Depth Anything v2, ONNX or OpenVINO IR) run beside the detector ("":
    none)."""
    on: tuple[str, ...] = ()
    """The sources it runs on, by name (empty: every source)."""
    backend: str = ""
    """Its runtime, as `backend` is the detector's ("": the one that reads its file)."""
    inference: BackendOptions = field(default_factory=BackendOptions)
    """Its runtime options, as `inference` are the detector's (its section below)."""
    short_side: int | None = None
    """Its input's short side in pixels, a multiple of 14 up to 1036: 266, 364 or 518 (None:
    the depth plan's, else 518)."""
    on_nonfinite: str = "recompute"
    """What a NaN/Inf depth map does: recompute (the frame again in FP32) or fail (the run)."""
    smoothing: float = 0.0
    """The EMA weight of a source's previous depth map, in [0, 1) (0: off; for live depth that
    flickers)."""
    # A tracked object keeps the distance measured on it at its last depth frame; other boxes
    # are measured on the held map.
    every: int = 1
    """Run the depth model on 1 frame in N of each of its sources, 1 to 30, the frames between
    taking that source's latest map (stale where things moved); a run not given it takes the
    depth plan's (`tune --depth` measures it)."""
    audit_reference: str | Path = ""
    """The live audit's FP32 depth reference ("": the depth plan's source model); how often it
    runs is `pipeline.audit.share`."""
    audit_max_abs_rel: float | None = None
    """The live audit's AbsRel budget, above 0 (None: the depth plan's, else 0.02)."""
    audit_short_side: int | None = None
    """The short side the audit's reference runs at (None: the run's): the depth plan's
    reference size, so that a smaller planned size is audited for what it loses."""

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
