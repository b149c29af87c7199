"""The config's `pipeline` section (queue depth, live-mode staleness, warm-up, helper threads,
tracking, latency target, tiling, motion gating, the live audit) and the depth model run beside
the detector (the `depth` section's part the pipeline reads)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from visionrt.backends import BackendOptions
from visionrt.errors import ConfigError
from visionrt.fuse.track_options import TRACKERS, TrackOptions
from visionrt.preprocess.depth import DEFAULT_SHORT_SIDE
from visionrt.preprocess.motion import MotionOptions
from visionrt.preprocess.tile import TileOptions
from visionrt.tasks.depth import MAX_SHORT_SIDE

MOTION_MODES = ("off", "skip", "regions")


@dataclass(frozen=True, slots=True)
class PipelineOptions:
    """`queue_size` bounds each queue between stages; `stale_after` (seconds) is the live-mode
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
    # How long an inference worker waits for more frames to fill a batch once it has one; 0
    # sends a batch with what is there (live mode should never wait for a stalled camera).
    batch_wait_ms: float = 0.0
    # A tracker per source gives each box a track id; with `detect_every` N > 1 the detector
    # runs on every Nth frame of each source and the frames between get the tracks' predicted
    # boxes (needs `track`).
    track: bool = False
    detect_every: int = 1
    tracker: str = "bytetrack"
    # The tracker's first-association IoU gate and lost-track window (seconds). 0.2 is
    # ByteTrack's own; 0.3 split more tracks across detect-every-N ≥ 3 without swapping fewer ids
    # (docs/benchmarks.md, "Tracking").
    track_match_iou: float = 0.2
    track_lost_seconds: float = 1.0
    # Tracks match detections of any class and take the latest one (a person whose class
    # flickers between Normal and Fall keeps one id); true keeps each track to one class.
    track_per_class: bool = False
    # Live runs with a latency target: when glass-to-result p95 over `slo_window` seconds passes
    # `slo_ms`, step down a ladder — detect every N up to `slo_max_every`, then the detector at
    # each of `slo_sizes` (square input sides; empty: 0.8× and 0.6× of the model's, rounded to
    # its stride), then `slo_model` (a lighter detector) — and back up with hysteresis. 0: off.
    slo_ms: float = 0.0
    slo_sizes: tuple[int, ...] = ()
    slo_model: str = ""
    slo_max_every: int = 3
    # With `motion` off, the ladder's first step turns motion gating on (skip), kept below.
    slo_motion: bool = True
    slo_window: float = 2.0
    # High-resolution sources: the detector runs on `tile`-pixel tiles overlapping by
    # `tile_overlap` (0: off), batched in one call per frame, plus the whole frame when
    # `tile_full_frame`, merged across tiles (IoU, or intersection-over-smaller for boxes a tile
    # edge cut, above `tile_merge`).
    tile: int = 0
    tile_overlap: float = 0.2
    tile_full_frame: bool = True
    tile_merge: float = 0.5
    # Fixed cameras: `motion` "skip" measures each frame's change since the frame the models last
    # ran on (pixels differing by `motion_threshold` grey levels on a small grey copy); a frame
    # under `motion_min_area` of the frame reuses that frame's results, but the models run again
    # at least every `motion_refresh` seconds of video (something that appeared without motion).
    motion: str = "off"
    motion_threshold: int = 25
    motion_min_area: float = 0.002
    motion_refresh: float = 2.0
    motion_dilate: int = 9  # regions: changed areas this close (160-px grey copy) are one box
    # Regions mode: on a frame that moved, the detector runs on square windows of
    # `motion_region` source pixels around the motion and around the objects last seen, at an
    # input of that size: `motion_region_model` (an artifact made at that size, e.g. by `visionrt
    # export --imgsz 320x320`; "": the run's model resized, which needs an ONNX model, or under
    # a plan the region model `pipeline.planned.planned_regions` finds).
    motion_region: int = 320
    motion_region_model: str = ""
    # The live accuracy audit: the FP32 reference `audit_reference` (an ONNX detector; "": the
    # plan's source model) runs on a share `audit` of each source's frames (None: 0.02 when a
    # reference is known and the run is not the reference itself, else off) in a low-priority
    # lane; an event when mAP50 over the last `audit_window` audited frames falls below
    # `audit_min_fidelity` (None: the plan's budget, else 0.95).
    audit: float | None = None
    audit_reference: str = ""
    audit_min_fidelity: float | None = None
    audit_window: int = 30

    def motion_options(self) -> MotionOptions:
        return MotionOptions(self.motion_threshold, self.motion_min_area, self.motion_dilate)

    def tracking(self, high: float, low: float) -> TrackOptions:
        """The tracker's options, `high` and `low` its confidence split (the run's threshold,
        and the detector's when tracking)."""
        return TrackOptions(
            self.tracker, high, low, self.track_match_iou, self.track_lost_seconds,
            self.track_per_class,
        )  # fmt: skip

    def tiling(self) -> TileOptions:
        return TileOptions(self.tile, self.tile_overlap, self.tile_full_frame, self.tile_merge)

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
        if self.detect_every < 1:
            raise ConfigError(f"pipeline.detect_every: expected >= 1, got {self.detect_every}")
        if self.detect_every > 1 and not self.track:
            raise ConfigError(
                "pipeline.detect_every: frames between detections need tracking: add --track"
            )
        if self.tracker not in TRACKERS:
            raise ConfigError(
                f"pipeline.tracker: expected one of {', '.join(TRACKERS)}, got '{self.tracker}'"
            )
        if not 0 < self.track_match_iou <= 1:
            raise ConfigError(
                f"pipeline.track_match_iou: expected 0 < IoU <= 1, got {self.track_match_iou}"
            )
        if not 0 <= self.track_lost_seconds <= 3600:
            raise ConfigError(
                "pipeline.track_lost_seconds: expected 0 to 3600 seconds, got"
                f" {self.track_lost_seconds}"
            )
        if self.slo_ms < 0:
            raise ConfigError(
                f"pipeline.slo_ms: expected 0 (off) or milliseconds > 0, got {self.slo_ms}"
            )
        if self.slo_window <= 0:
            raise ConfigError(f"pipeline.slo_window: expected > 0 seconds, got {self.slo_window}")
        if self.slo_max_every < 1:
            raise ConfigError(f"pipeline.slo_max_every: expected >= 1, got {self.slo_max_every}")
        if any(size < 32 for size in self.slo_sizes):
            raise ConfigError(f"pipeline.slo_sizes: expected sides >= 32, got {self.slo_sizes}")
        if self.tile:
            self.tiling()  # its own checks, with the flags' names
        if self.audit is not None and not 0 <= self.audit <= 0.5:
            raise ConfigError(
                "pipeline.audit (--audit): expected a share of frames from 0 to 0.5 (0.02: one"
                f" frame in 50), got {self.audit:g}"
            )
        if self.audit_min_fidelity is not None and not 0 <= self.audit_min_fidelity <= 1:
            raise ConfigError(
                f"pipeline.audit_min_fidelity: expected 0 to 1, got {self.audit_min_fidelity}"
            )
        if self.audit_window < 1:
            raise ConfigError(f"pipeline.audit_window: expected >= 1, got {self.audit_window}")
        if self.motion not in MOTION_MODES:
            raise ConfigError(
                f"pipeline.motion (--motion): expected off, skip or regions, got '{self.motion}'"
            )
        if self.motion == "regions" and self.tile:
            raise ConfigError(
                "--motion regions: tiling (--tile) already cuts each frame into windows; use"
                " --motion skip with it"
            )
        if not 64 <= self.motion_region <= 4096 or self.motion_region % 32:
            raise ConfigError(
                "pipeline.motion_region: expected a multiple of 32 from 64 to 4096 pixels, got"
                f" {self.motion_region}"
            )
        self.motion_options()  # its own checks
        if not 0 < self.motion_refresh <= 3600:
            raise ConfigError(
                "pipeline.motion_refresh: expected seconds > 0, at most 3600 (how often the"
                f" detector runs on a frame that did not move), got {self.motion_refresh:g}"
            )
        if self.opencv_threads < 0:
            raise ConfigError(f"pipeline.opencv_threads: expected >= 0, got {self.opencv_threads}")


@dataclass(frozen=True, slots=True)
class DepthOptions:
    """A depth model beside the detector (`model` "": none), on the sources named in `on`
    (empty: every source). `short_side` is its input's short side in pixels (a multiple of 14:
    266, 364 or 518; None: the depth plan's, else DEFAULT_SHORT_SIDE — `input_short_side`);
    `on_nonfinite` is what a NaN/Inf depth map does: "recompute" the frame in
    FP32, or "fail" the run; `smoothing` is the EMA weight of a source's previous depth map (0:
    off; for live depth that flickers). The run configuration's `depth` section is this, plus
    its outputs (config.DepthConfig)."""

    model: str | Path = ""
    on: tuple[str, ...] = ()
    backend: str = ""
    inference: BackendOptions = field(default_factory=BackendOptions)
    short_side: int | None = None
    on_nonfinite: str = "recompute"
    smoothing: float = 0.0
    # The live audit's FP32 depth reference ("": the depth plan's source model) and its AbsRel
    # budget (None: the depth plan's, else 0.02); how often is PipelineOptions.audit.
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
