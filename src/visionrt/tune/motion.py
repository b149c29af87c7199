"""Whether the detector may skip work on the user's video: the chosen configuration measured
with gating off, motion gating's `skip` and `regions`, and detection on every 2nd and 3rd frame
only (`every 2`, `every 3`: a tracker gives the frames between their predicted boxes, without
track ids unless the run asks for them), on the same frames. Each is scored on every frame
(reused and predicted ones included) against the FP32 reference, and the fastest mode kept that
holds the budget and clearly beats the configuration alone."""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from visionrt.errors import Interrupted, VisionRTError
from visionrt.fuse.track_options import TrackingOptions
from visionrt.pipeline import PipelineOptions
from visionrt.plans.gating import every_section
from visionrt.preprocess.motion import MotionOptions
from visionrt.tune.candidates import Candidate
from visionrt.tune.search import Limits, Measurement, OutOfTime

# The same plan measured twice on this project's 2-core machines spreads by 2-3 %
# (docs/benchmarks.md, "Motion gating"): a difference under this is noise.
NOISE = 0.05
# A gating mode is kept only when its median FPS over the repeats is at least this much above
# the configuration alone ("off"). Gating is not free: on footage other than the tune video its
# reused frames can be stale until the audit's reused-frame window turns it off for that source
# (a plan's skip at ×1.09 with fidelity 0.969 on vtest.avi scored 0.883 on box.mp4: issue #47),
# and a frame's latency grows when the scene moves. Under 15 % it does not pay for that.
MIN_GAIN = 0.15
# Runs per mode, alternating the order between repeats (a machine that warms up or slows down
# favours no mode); the median FPS decides, the worst fidelity is held to the budget.
REPEATS = 3
# Skip is measured at these shares of the frame that must change (`motion_min_area`). Only the
# default for now: tune scores the first 300 frames, and on vtest 0.005 held the budget there
# (0.963 at ×1.2) but not over the whole video (0.948, the plan 0.963: docs/benchmarks.md), which
# the live audit then reported. A larger area is a bet on the rest of the video being like its
# start; the sweep comes back once tune scores spans spread over the video.
SKIP_AREAS: tuple[float, ...] = (0.002,)
# Detect-every-N: the detector on 1 frame in N. Measured on 300 frames of vtest.avi with the
# demo plan (issue #49): every 2nd 1.8× at fidelity 0.961, every 3rd 2.3× at 0.941 (out at 0.95).
EVERY: tuple[int, ...] = (2, 3)
RULE = (
    f"the fastest mode by median FPS within the fidelity budget (worst run), at least"
    f" {MIN_GAIN:.0%} faster than off, that spared the detector work"
)

Say = Callable[[str], None]


class GatedEvaluator(Protocol):
    """What the step needs of `tune.evaluate.VideoEvaluator`."""

    def gated(self, candidate: Candidate, frames: int, options: PipelineOptions) -> Measurement: ...

    def every_frame_reference(self) -> list[Any]: ...

    def artifact(self, candidate: Candidate) -> Any: ...


@dataclass(frozen=True, slots=True)
class GatingMode:
    """One mode to measure: the pipeline options it runs with, or why it cannot (`error`)."""

    name: str
    options: PipelineOptions | None = None
    error: str = ""


@dataclass(slots=True)
class ModeResult:
    """A mode and its runs; `why_out` says why it was not kept ("" for the one chosen)."""

    mode: GatingMode
    runs: list[Measurement] = field(default_factory=list)
    why_out: str = ""

    @property
    def error(self) -> str:
        """Why the mode could not be measured ("" when every run went through)."""
        return self.mode.error or next((run.error for run in self.runs if run.error), "")

    def combined(self) -> Measurement:
        """The runs as one: median speed and latency, the worst fidelity and frame count."""
        runs = [run for run in self.runs if not run.error]
        if not runs:
            return Measurement(0.0, 0.0, 0.0, 0.0, 0, error=self.error or "not measured")
        return Measurement(
            fps=statistics.median(run.fps for run in runs),
            p50_ms=statistics.median(run.p50_ms for run in runs),
            p99_ms=statistics.median(run.p99_ms for run in runs),
            fidelity=min(run.fidelity for run in runs),
            frames=min(run.frames for run in runs),
            motion=runs[-1].motion,
        )


@dataclass(frozen=True, slots=True)
class MotionOutcome:
    """Every mode measured and the one chosen ("off": gating does not pay here); `skipped`
    says why nothing was measured."""

    results: tuple[ModeResult, ...]
    chosen: str = "off"
    frames: int = 0
    skipped: str = ""

    def options(self) -> PipelineOptions | None:
        """The chosen mode's pipeline options (None: gating off)."""
        found = next((r for r in self.results if r.mode.name == self.chosen), None)
        return found.mode.options if found is not None and self.chosen != "off" else None

    def pipeline_section(self) -> dict[str, Any]:
        """The plan's `pipeline:` section: the chosen mode's motion options that differ from
        the defaults, or its detect-every-N (empty when gating is off)."""
        options = self.options()
        if options is None:
            return {}
        if options.tracking.detect_every > 1:
            return every_section(options.tracking.detect_every)
        motion, defaults = options.motion, MotionOptions()
        changed = {
            item.name: getattr(motion, item.name)
            for item in dataclasses.fields(motion)
            if getattr(motion, item.name) != getattr(defaults, item.name)
        }
        return {"motion": changed}

    def record(self) -> dict[str, Any]:
        """What the plan keeps under `tuned.motion`: the choice, the rule, and per mode its
        figures or why it was not kept."""
        if self.skipped:
            return {"chosen": "off", "skipped": self.skipped}
        off = next((r for r in self.results if r.mode.name == "off"), None)
        base = off.combined().fps if off is not None else 0.0
        regions = next((r.mode.options for r in self.results if r.mode.name == "regions"), None)
        # Kept whichever mode won: a run that asks for regions itself can use it.
        region_model = regions.motion.region_model if regions is not None else ""
        return {
            "chosen": self.chosen,
            "rule": RULE,
            "frames": self.frames,
            "repeats": max((len(r.runs) for r in self.results), default=0),
            **({"region_model": region_model} if region_model else {}),
            "modes": {r.mode.name: mode_record(r, base, self.chosen) for r in self.results},
        }


def mode_record(result: ModeResult, base_fps: float, chosen: str) -> dict[str, Any]:
    """One mode's figures as the plan records them."""
    record: dict[str, Any] = {"chosen": result.mode.name == chosen}
    if result.error:
        return {**record, "error": result.error}
    combined = result.combined()
    record.update(
        fps=round(combined.fps, 2),
        fps_runs=[round(run.fps, 2) for run in result.runs],
        speedup=round(combined.fps / base_fps, 3) if base_fps else 0.0,
        p50_ms=round(combined.p50_ms, 2),
        p99_ms=round(combined.p99_ms, 2),
        fidelity=round(combined.fidelity, 4),
        frames=combined.frames,
    )
    for key, name in (("share", "reused_share"), ("pixel_share", "pixel_share")):
        if key in combined.motion:
            record[name] = combined.motion[key]
    if result.why_out:
        record["why_not"] = result.why_out
    return record


def choose(results: Sequence[ModeResult], limits: Limits, min_gain: float = MIN_GAIN) -> str:
    """The mode to keep (see RULE), setting each other mode's `why_out`. Without a measured
    "off" there is nothing to beat: gating stays off."""
    off = next((r for r in results if r.mode.name == "off"), None)
    gating = [r for r in results if r is not off]
    if off is None or off.error or not off.runs:
        baseline = off.error if off is not None and off.error else "not measured"
        for result in gating:
            result.why_out = result.error or f"no baseline: off {baseline}"
        return "off"
    base = off.combined()
    for result in gating:
        result.why_out = why_not(result, base, limits, min_gain)
    kept = [r for r in gating if not r.why_out]
    if not kept:
        return "off"
    best = max(kept, key=lambda r: r.combined().fps)
    for result in kept:
        if result is not best:
            result.why_out = f"{best.mode.name} is faster"
    return best.mode.name


def why_not(result: ModeResult, base: Measurement, limits: Limits, min_gain: float) -> str:
    """Why a gating mode is not kept against the configuration alone (`base`); "" when it
    may be."""
    if result.error:
        return result.error
    if not result.runs:
        return "not measured (budget)"
    measured = result.combined()
    out = limits.why(measured)  # the fidelity budget, and the p99 limit when one is set
    if out:
        return out
    floor = base.fps * (1 + min_gain)
    if measured.fps < floor:
        return f"{measured.fps:.1f} FPS: not ≥ {1 + min_gain:.2f}× off's {base.fps:.1f}"
    if spared_work(measured.motion) is False:
        return "it spared the detector no work here: a gain would be noise"
    # For the latency objective, gating must not lengthen the frames it runs on: it lowers the
    # average work, not the tail.
    if limits.objective == "latency" and measured.p99_ms > base.p99_ms * (1 + NOISE):
        return f"p99 {measured.p99_ms:.0f} ms above off's {base.p99_ms:.0f} ms"
    return ""


def spared_work(motion: Mapping[str, Any]) -> bool | None:
    """Whether gating left the detector less to do than every frame whole, from a run's motion
    summary: its detector pixels under every frame's, or else some frames reused (None: the run
    does not say). A mode that spared nothing cannot be faster but by chance."""
    if "pixel_share" in motion:
        return float(motion["pixel_share"]) < 1
    if "share" in motion:
        return float(motion["share"]) > 0
    return None


def measure_modes(
    modes: Sequence[GatingMode],
    measure: Callable[[GatingMode], Measurement],
    repeats: int = REPEATS,
    deadline: float = float("inf"),
    clock: Callable[[], float] = time.monotonic,
    say: Say | None = None,
) -> list[ModeResult]:
    """Run each mode that can run `repeats` times, the order reversed every other repeat; a
    mode that fails is not run again; no new repeat starts past `deadline` (the first always
    runs: without it nothing is compared), and a run the evaluator abandons at the search's
    budget (OutOfTime) ends the measuring with what was measured before it."""
    results = [ModeResult(mode) for mode in modes]
    for result in results:
        if result.mode.error and say is not None:
            say(f"motion {result.mode.name}: out: {result.mode.error}")
    for repeat in range(repeats):
        if repeat and clock() > deadline:
            if say is not None:
                say(f"motion: budget reached after {repeat} of {repeats} repeats")
            break
        for result in results if repeat % 2 == 0 else results[::-1]:
            if result.error:
                continue
            try:
                run = measure(result.mode)
            except OutOfTime:
                if say is not None:
                    say(f"motion: budget reached during repeat {repeat + 1} of {repeats}")
                return results
            result.runs.append(run)
            if say is not None:
                say(_progress(result.mode.name, run, f"{repeat + 1}/{repeats}"))
    return results


def _progress(mode: str, run: Measurement, count: str) -> str:
    """'motion skip · 300 frames (1/3): 61.0 FPS, fidelity 0.968, 62% reused'."""
    if run.error:
        return f"motion {mode} ({count}): out: {run.error}"
    reused = f", {run.motion['share']:.0%} reused" if "share" in run.motion else ""
    return (
        f"motion {mode} · {run.frames} frames ({count}): {run.fps:.1f} FPS, fidelity"
        f" {run.fidelity:.3f}{reused}"
    )


def region_mode(candidate: Candidate, evaluator: GatedEvaluator, say: Say | None) -> GatingMode:
    """`regions` for the candidate: with its artifact made at the region size (the same export,
    cached by content so it is made once) when the candidate runs one, the run's model resized
    otherwise; or why it cannot be built."""
    size = MotionOptions().region
    try:
        model = ""
        if candidate.export:
            if say is not None:
                say(f"motion regions: the {size}×{size} region model ({candidate.export}; made"
                    " once, then cached)")  # fmt: skip
            model = str(evaluator.artifact(replace(candidate, input_size=(size, size))))
        return GatingMode("regions", _gated(MotionOptions(mode="regions", region_model=model)))
    except Interrupted:
        raise
    except (VisionRTError, RuntimeError, OSError, ValueError, ImportError) as err:
        first = (str(err).splitlines() or [type(err).__name__])[0]
        return GatingMode("regions", error=f"cannot build its region model: {first}")


def _gated(motion: MotionOptions) -> PipelineOptions:
    return PipelineOptions(motion=motion)


def every_mode(every: int) -> GatingMode:
    """The detector on 1 frame in `every`, the tracker's boxes between, no track ids."""
    tracking = TrackingOptions(detect_every=every, predict_between=True)
    return GatingMode(f"every {every}", PipelineOptions(tracking=tracking))


def skip_name(min_area: float) -> str:
    """'skip' at the default area, 'skip 0.005' at another."""
    return "skip" if min_area == MotionOptions().min_area else f"skip {min_area:g}"


def tune_motion(
    candidate: Candidate,
    evaluator: GatedEvaluator,
    limits: Limits,
    frames: int,
    deadline: float = float("inf"),
    say: Say | None = None,
    repeats: int = REPEATS,
    clock: Callable[[], float] = time.monotonic,
) -> MotionOutcome:
    """Measure `candidate` with gating off, `skip` (at each of SKIP_AREAS), `regions` and
    detection on 1 frame in each of EVERY on the first `frames` frames
    (at most as many as the reference ran on every frame) and choose (`choose`)."""
    frames = min(frames, len(evaluator.every_frame_reference()))
    if frames < 1:
        return MotionOutcome((), skipped="no every-frame reference to score gated runs against")
    if clock() > deadline:
        return MotionOutcome((), skipped="the search's budget was spent")
    modes = [
        GatingMode("off", PipelineOptions()),
        *(
            GatingMode(skip_name(area), _gated(MotionOptions(mode="skip", min_area=area)))
            for area in SKIP_AREAS
        ),
        region_mode(candidate, evaluator, say),
        *(every_mode(every) for every in EVERY),
    ]

    def measure(mode: GatingMode) -> Measurement:
        assert mode.options is not None  # modes without options are never measured
        return evaluator.gated(candidate, frames, mode.options)

    results = measure_modes(modes, measure, repeats, deadline, clock, say)
    chosen = choose(results, limits)
    return MotionOutcome(tuple(results), chosen, frames)
