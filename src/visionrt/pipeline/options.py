"""The pipeline's own options: queue depth, live-mode staleness, warm-up, helper-thread settings."""

from __future__ import annotations

from dataclasses import dataclass

from visionrt.errors import ConfigError


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
        if self.opencv_threads < 0:
            raise ConfigError(f"pipeline.opencv_threads: expected >= 0, got {self.opencv_threads}")
