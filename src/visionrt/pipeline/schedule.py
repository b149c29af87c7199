"""Which lanes (tasks) run on each frame, or why the frame is dropped: live staleness, the
latency ladder's frame thinning and detector variants, detect-every-N with tracking, and motion
gating (an unchanged frame reuses the last results). One home for these rules; the graph only
carries out what `Scheduler.decide` says."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from visionrt.pipeline.degrade import Degrader
from visionrt.pipeline.options import PipelineOptions


@dataclass(frozen=True, slots=True)
class Decision:
    """`lanes` to run on the frame (the first being its detector, unless tracking alone covers
    it); `dropped` says why the frame goes no further ("": it goes on, maybe with no lanes);
    `reused`: no lane runs, the frame takes its source's last results (no motion); `full`: the
    detector runs on it."""

    lanes: tuple[int, ...] = ()
    dropped: str = ""
    reused: bool = False
    full: bool = False


class Scheduler:
    """`schedule[i]` lists the lanes run on source i's frames, its first the detector;
    `variants[j]` is the lane of the latency ladder's detector variant j + 1. Call `decide` once
    per frame, in order per source, from one thread; `observe` each delivered frame's latency."""

    def __init__(
        self,
        schedule: Sequence[Sequence[int]],
        options: PipelineOptions,
        live: Sequence[bool],
        degrader: Degrader | None = None,
        variants: Sequence[int] = (),
    ) -> None:
        self.schedule = [tuple(lanes) for lanes in schedule]
        self.live = list(live)
        self.stale_after = options.stale_after
        self.detect_every, self.track = options.detect_every, options.track
        self.motion, self.refresh = options.motion, options.motion_refresh
        self.degrader = degrader
        self.variants = tuple(variants)
        # Frames of each source until the detector runs again (detect-every-N), and frames
        # since the last kept one (the ladder's frame thinning without tracking).
        self._until_detect = [0] * len(self.schedule)
        self._skipped = [0] * len(self.schedule)
        # The video time of each source's last frame the models ran on (motion gating).
        self._ran_at: list[float | None] = [None] * len(self.schedule)

    def decide(
        self, source_id: int, age: float, timestamp: float = 0.0, moved: bool = True
    ) -> Decision:
        """The lanes for source `source_id`'s next frame, captured `age` seconds ago at
        `timestamp` seconds of its video; `moved`: it changed since the frame the models last
        ran on (motion gating; always True without it)."""
        if self.live[source_id] and age > self.stale_after:
            return Decision(dropped=f"older than {self.stale_after}s")
        rung = self.degrader.rung if self.degrader is not None else None
        every = rung.every if rung is not None else self.detect_every
        if every > 1 and not self.track:  # the ladder thins the frame rate
            self._skipped[source_id] = (self._skipped[source_id] + 1) % every
            if self._skipped[source_id]:
                return Decision(dropped=f"slo: 1 frame in {every}")
        if self.motion == "skip" and self._reusable(source_id, timestamp, moved):
            return Decision(reused=True)
        lanes = self.schedule[source_id]
        if rung is not None and rung.variant:
            lanes = (self.variants[rung.variant - 1], *lanes[1:])
        if self.track and every > 1:
            if self._until_detect[source_id] > 0:  # tracking alone on this frame
                self._until_detect[source_id] -= 1
                return Decision(lanes[1:])
            self._until_detect[source_id] = every - 1
        self._ran_at[source_id] = timestamp
        return Decision(lanes, full=True)

    def _reusable(self, source_id: int, timestamp: float, moved: bool) -> bool:
        """No motion since the models last ran, within the refresh interval of video time (a
        timestamp going back, a looped file or a restarted stream, refreshes)."""
        last = self._ran_at[source_id]
        return not moved and last is not None and 0 <= timestamp - last < self.refresh

    def observe(self, latency: float) -> None:
        """A frame was delivered `latency` seconds after capture (the ladder's input)."""
        if self.degrader is not None:
            self.degrader.observe(latency)
