"""Motion gating's part of the preprocess stage: each frame's change since the frame the models last
ran on (for the scheduler), where it moved and which windows the region detector would run on
(regions mode), and the events that account for it."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from visionrt.config.pipeline import PipelineOptions
from visionrt.pipeline.flow import Item
from visionrt.pipeline.schedule import Decision
from visionrt.preprocess.motion import MotionGate, MotionOptions, i420_grey
from visionrt.preprocess.regions import RegionPlanner
from visionrt.telemetry import Telemetry

MOTION_SKIPPED = "motion: skipped"  # an event per frame that reused its source's last results
MOTION_REGIONS = "motion: regions"  # an event per frame whose detector ran on windows
MOTION_WINDOWS = "motion: windows"  # those frames' windows
# The detector input pixels run, whole frames and windows: against frames × a whole frame's,
# the share of the detector's work that gating left.
MOTION_PIXELS = "motion: detector pixels"
MOTION_WHOLE = "motion: whole frames"  # an event per frame the detector ran on whole


class Gating:
    """`gates[i]` measures source i's motion (each with `options`); `planner` (regions mode)
    picks the windows; `full_pixels` and `window_pixels` are a whole frame's and a window's
    detector input. Used from the preprocess thread only (`add_source` before the new source's
    first frame)."""

    def __init__(
        self,
        options: MotionOptions,
        sources: int,
        telemetry: Telemetry,
        full_pixels: int,
        planner: RegionPlanner | None = None,
        window_pixels: int = 0,
    ) -> None:
        self.options, self.telemetry, self.planner = options, telemetry, planner
        self.gates = [MotionGate(options) for _ in range(sources)]
        self.full_pixels, self.window_pixels = full_pixels, window_pixels
        # Sources whose frames all count as moved from now on: the audit found their reused
        # frames below the budget (`turn_off`, from the audit's thread; a set's add and
        # membership are atomic under the GIL).
        self.off: set[int] = set()

    def turn_off(self, source_id: int) -> None:
        """Gate source `source_id` no more: each of its frames runs the models whole."""
        self.off.add(source_id)

    def add_source(self) -> None:
        """A gate for one more source, numbered next (its first frame is always "moved")."""
        self.gates.append(MotionGate(self.options))

    def forget(self, source_id: int) -> None:
        """A source that will see no more frames: its gate's reference frame is let go."""
        self.gates[source_id] = MotionGate(self.options)

    def measure(self, item: Item) -> tuple[bool, Callable[[], Any] | None]:
        """Whether the frame moved, and (regions mode) how to plan its windows when the
        scheduler asks."""
        frame = item.frame
        if frame.source_id in self.off:
            return True, None
        gate = self.gates[frame.source_id]
        started = time.perf_counter()
        # An I420 frame (decoded in a worker process) is measured on its Y plane: converting it
        # to BGR took half the gate's time, and the device path needs no BGR at all.
        pixels = frame.pixels if frame.pixels.ndim == 3 else i420_grey(frame.pixels)
        motion = gate.measure(pixels, boxes=self.planner is not None)
        item.timings["motion"] = seconds = time.perf_counter() - started
        self.telemetry.record("motion", seconds)
        moved = motion.share >= gate.options.min_area
        if self.planner is None:
            return moved, None
        item.motion_boxes = motion.boxes
        planner, source_id, hw = self.planner, frame.source_id, frame.size
        return moved, lambda: planner.plan(source_id, motion.boxes, (int(hw[0]), int(hw[1])))

    def decided(self, item: Item, decision: Decision, label: str) -> None:
        """The scheduler's decision on a frame it kept: count it, and make the frame the
        reference when the detector runs on all of it."""
        item.reused, item.windows = decision.reused, decision.windows
        if decision.reused:
            self.telemetry.count(MOTION_SKIPPED, label)
        elif decision.windows is not None:
            windows = len(decision.windows)
            self.telemetry.count(MOTION_REGIONS, label)
            self.telemetry.count(MOTION_WINDOWS, label, windows)
            self.telemetry.count(MOTION_PIXELS, label, windows * self.window_pixels)
        elif decision.full:
            self.telemetry.count(MOTION_WHOLE, label)
            self.telemetry.count(MOTION_PIXELS, label, self.full_pixels)
        # The reference: the last frame the detector saw whole. A frame seen in windows is not
        # one: motion then adds up over the frames since that one, so a person walking slowly
        # (under the threshold from frame to frame) is still looked at, and the boxes carried
        # over outside the windows are those of a scene that did not change.
        if decision.full:
            self.gates[item.frame.source_id].keep()


def processed(item: Item) -> str:
    """How the models saw the frame: reused, on K windows, or whole."""
    if item.reused:
        return "reused"
    return "full" if item.windows is None else f"regions: {len(item.windows)}"


def motion_summary(
    options: PipelineOptions, input_hw: tuple[int, int], events: Mapping[str, int], out: int
) -> dict[str, Any]:
    """Motion gating's settings and what it left the detector over `out` frames (see
    motion_figures), a whole frame's detector input `input_hw`."""
    height, width = input_hw
    settings: dict[str, Any] = {
        "mode": options.motion.mode,
        "threshold": options.motion.threshold,
        "min_area": options.motion.min_area,
        "refresh": options.motion.refresh,
    }
    if options.motion.mode == "regions":
        settings["region"] = options.motion.region
    return motion_figures(settings, events, out, out * height * width)


def motion_figures(
    settings: Mapping[str, Any], events: Mapping[str, int], out: int, whole: int
) -> dict[str, Any]:
    """`settings` (motion_summary's) with what gating left the detector, from its `events` over
    `out` frames: frames reused, frames run on windows (and windows per such frame) in regions
    mode, detector input pixels run against `whole` (every frame's whole input). A cluster run
    adds its workers' events and frames up into one run's. A run cut short decided on frames it
    never delivered: its shares are over the frames gating decided on (over `out`, a share
    passed 100 %)."""
    reused, regions = events.get(MOTION_SKIPPED, 0), events.get(MOTION_REGIONS, 0)
    decided = reused + regions + events.get(MOTION_WHOLE, 0)
    if decided > out > 0:
        whole, out = round(whole * decided / out), decided
    motion: dict[str, Any] = {
        **settings,
        "frames": out,
        "reused": reused,
        "share": round(reused / out, 4) if out else 0.0,
        "pixel_share": round(events.get(MOTION_PIXELS, 0) / whole, 4) if whole else 0.0,
    }
    if settings["mode"] == "regions":
        motion["regions"] = regions
        motion["windows_per_region_frame"] = (
            round(events.get(MOTION_WINDOWS, 0) / regions, 3) if regions else 0.0
        )
    return motion


def ladder_gates(options: PipelineOptions) -> bool:
    """The latency ladder may turn motion gating on (a rung of its own)."""
    return bool(options.slo.target_ms) and options.slo.motion and options.motion.mode == "off"
