"""Which lanes (tasks) run on each frame, or why the frame is dropped: live staleness, the
latency ladder's frame thinning and detector variants, detect-every-N with tracking, depth on 1
frame in N, and motion gating (an unchanged frame reuses the last results; a moving one may run
the detector on regions only). One home for these rules; the graph only carries out what
`Scheduler.decide` says."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from visionrt.config.pipeline import PipelineOptions
from visionrt.pipeline.degrade import Degrader


@dataclass(frozen=True, slots=True)
class Decision:
    """`lanes` to run on the frame (the first being its detector, unless tracking alone covers
    it); `dropped` says why the frame goes no further ("": it goes on, maybe with no lanes);
    `reused`: no lane runs, the frame takes its source's last results (no motion); `full`: the
    detector runs on the whole frame; `windows`: it runs on these windows of it instead (its
    lane the region detector's; (K, 4) x1, y1, x2, y2 source pixels)."""

    lanes: tuple[int, ...] = ()
    dropped: str = ""
    reused: bool = False
    full: bool = False
    windows: Any = None

    @property
    def detected(self) -> bool:
        """The detector runs on the frame, whole or on windows."""
        return self.full or self.windows is not None


class Scheduler:
    """`schedule[i]` lists the lanes run on source i's frames, its first the detector (lane 0,
    the run's own, or the one its frame size runs); `variants[j]` is the lane of the latency
    ladder's variant j + 1 of the run's own detector; `region_lane` the
    region detector's (motion regions); the lanes after a source's first (depth) run on 1 of
    its frames in `depth_every`. Call `decide` once per frame, in order per source, from one
    thread; `observe` each delivered frame's latency."""

    def __init__(
        self,
        schedule: Sequence[Sequence[int]],
        options: PipelineOptions,
        live: Sequence[bool],
        degrader: Degrader | None = None,
        variants: Sequence[int] = (),
        region_lane: int = -1,
        depth_every: int = 1,
    ) -> None:
        self.schedule = [tuple(lanes) for lanes in schedule]
        self.live = list(live)
        self.stale_after = options.stale_after
        self.detect_every = options.tracking.detect_every
        self.track = options.tracking.tracker_runs
        self.motion, self.refresh = options.motion.mode, options.motion.refresh
        self.degrader = degrader
        self.variants, self.region_lane = tuple(variants), region_lane
        # Frames of each source until the detector runs again (detect-every-N), and frames
        # since the last kept one (the ladder's frame thinning without tracking).
        self._until_detect = [0] * len(self.schedule)
        # Frames of each source until depth runs again (0: on its next frame that runs lanes).
        self.depth_every, self._until_depth = depth_every, [0] * len(self.schedule)
        self._skipped = [0] * len(self.schedule)
        # The video time of each source's last frame the detector ran on whole (motion gating).
        self._full_at: list[float | None] = [None] * len(self.schedule)

    def add_source(self, lanes: Sequence[int], live: bool) -> None:
        """One more source, numbered next (a service's camera added while it runs). Lists grow
        by appending, so the preprocess thread reading an older source is undisturbed."""
        self._until_detect.append(0)
        self._until_depth.append(0)
        self._skipped.append(0)
        self._full_at.append(None)
        self.live.append(live)
        self.schedule.append(tuple(lanes))

    def resume(self, source_id: int, since_detect: int) -> None:
        """Source `source_id` resumes after a frame `since_detect` frames past the last one the
        detector ran on (a cluster's retry): detect-every-N keeps its step, as in one run."""
        if self.track and self.detect_every > 1:
            self._until_detect[source_id] = max(0, self.detect_every - 1 - since_detect)

    def decide(
        self,
        source_id: int,
        age: float,
        timestamp: float = 0.0,
        moved: bool = True,
        regions: Callable[[], Any] | None = None,
    ) -> Decision:
        """The lanes for source `source_id`'s next frame, captured `age` seconds ago at
        `timestamp` seconds of its video; `moved`: it changed since the frame the models last
        ran on (motion gating; always True without it); `regions()`: the windows to run the
        detector on instead of the whole frame, or None (regions mode)."""
        if self.live[source_id] and age > self.stale_after:
            return Decision(dropped=f"older than {self.stale_after}s")
        rung = self.degrader.rung if self.degrader is not None else None
        every = rung.every if rung is not None else self.detect_every
        motion = (rung.motion or self.motion) if rung is not None else self.motion
        if every > 1 and not self.track:  # the ladder thins the frame rate
            self._skipped[source_id] = (self._skipped[source_id] + 1) % every
            if self._skipped[source_id]:
                return Decision(dropped=f"slo: 1 frame in {every}")
        refresh = motion != "off" and self._refresh_due(source_id, timestamp)
        if motion != "off" and not refresh and not moved:
            return Decision(reused=True)
        lanes = self.schedule[source_id]
        # The variants are the run's own detector's (lane 0): a source whose frame size runs
        # another detector keeps it on those rungs (frames are still thinned, gated).
        if rung is not None and rung.variant and lanes[0] == 0:
            lanes = (self.variants[rung.variant - 1], *lanes[1:])
        lanes = self._depth_due(source_id, lanes)
        if self.track and every > 1:
            if self._until_detect[source_id] > 0:  # tracking alone on this frame
                self._until_detect[source_id] -= 1
                return Decision(lanes[1:])
            self._until_detect[source_id] = every - 1
        if motion == "regions" and not refresh and regions is not None:
            windows = regions()
            if windows is not None:
                return Decision((self.region_lane, *lanes[1:]), windows=windows)
        self._full_at[source_id] = timestamp
        return Decision(lanes, full=True)

    def _depth_due(self, source_id: int, lanes: tuple[int, ...]) -> tuple[int, ...]:
        """`lanes` on a frame depth runs on (1 in `depth_every` of the source's frames that run
        lanes), else its detector's alone: the fusers give the frame its source's latest map."""
        if self.depth_every == 1 or len(lanes) == 1:
            return lanes
        if self._until_depth[source_id] > 0:
            self._until_depth[source_id] -= 1
            return lanes[:1]
        self._until_depth[source_id] = self.depth_every - 1
        return lanes

    def _refresh_due(self, source_id: int, timestamp: float) -> bool:
        """The detector has not run on a whole frame of the source within the refresh interval
        of video time (a timestamp going back, a looped file or a restarted stream, counts)."""
        last = self._full_at[source_id]
        return last is None or not 0 <= timestamp - last < self.refresh

    def observe(self, latency: float) -> None:
        """A frame was delivered `latency` seconds after capture (the ladder's input)."""
        if self.degrader is not None:
            self.degrader.observe(latency)
