"""`tune`: search this machine's configurations on the user's video, write and cache the plan."""

from __future__ import annotations

import datetime
import importlib.util
import statistics
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from visionrt import hardware
from visionrt.backends.gpus import gpu_runtimes
from visionrt.backends.registry import find_row, unavailable_reason
from visionrt.errors import ConfigError, ModelLoadError
from visionrt.export.tensorrt import building
from visionrt.models import read_model_spec
from visionrt.paths import file_sha256
from visionrt.plans import Plan, machine_fingerprint, plan_path
from visionrt.plans.proof import record, tune_proof
from visionrt.plans.store import LIVE_KEY, PIPELINE_KEY
from visionrt.sources import SourceOptions, open_source
from visionrt.tune.batch import BatchPoint, BatchSearch, batch_throughput, search_batch
from visionrt.tune.candidates import Candidate, Machine, candidates
from visionrt.tune.evaluate import VideoEvaluator, backend_options
from visionrt.tune.ladder import Ladder, descend
from visionrt.tune.mixed import try_mixed
from visionrt.tune.motion import MotionOutcome, Say, tune_motion
from visionrt.tune.search import (
    Evaluate,
    Limits,
    Measurement,
    OutOfTime,
    SearchResult,
    Trial,
    successive_halving,
)


@dataclass(frozen=True, slots=True)
class TuneOutcome:
    plan: Plan | None
    path: Path | None
    search: SearchResult
    batch: BatchSearch | None = None  # the GPU batch search, when the chosen plan is on a GPU
    # Motion gating measured with the chosen configuration (`skipped` says why it was not).
    motion: MotionOutcome | None = None
    # The smaller input sizes tried below the search's choice (None: nothing was chosen).
    ladder: Ladder | None = None


def this_machine() -> Machine:
    runtimes = frozenset(
        name for name in ("onnxruntime", "openvino") if unavailable_reason(find_row(name)) is None
    )
    return Machine(
        runtimes=runtimes,
        cpu_features=hardware.cpu_features(),
        int8_export="openvino" in runtimes and importlib.util.find_spec("nncf") is not None,
        gpu=gpu_runtimes(),
    )


# End-to-end runs of batch 1 and of the batch the model-only search found, alternating, that
# decide between them: one run each kept a batch of 453 FPS over batch 1's 472 on an H200, the
# machine's drift between the two runs larger than their difference.
CONFIRM_RUNS = 3


@building()  # tune builds the TensorRT engines it measures
def tune_gpu_batch(
    search: SearchResult,
    evaluate: Evaluate,
    limits: Limits,
    frames: int,
    measure_for: Callable[[Candidate], Callable[[int], float]],
    on_point: Callable[[BatchPoint], None] | None = None,
    on_trial: Callable[[Trial, int], None] | None = None,
) -> BatchSearch | None:
    """On a GPU, the batch for the chosen candidate: the largest that fits and pays model-only
    (`search_batch`: doubling, bisection after an out-of-memory error), then confirmed end to
    end over `frames` frames against batch 1, CONFIRM_RUNS runs of each alternating. The
    batched candidate becomes the choice when it stays within the limits (a batch adds
    latency) and its median scores better than batch 1's; either way it joins the table."""
    chosen = search.best
    if chosen is None or not chosen.candidate.on_gpu or search.out_of_time:
        return None
    found = search_batch(measure_for(chosen.candidate), on_point=on_point)
    if found.best <= 1:
        return found
    trial = Trial(replace(chosen.candidate, batch=found.best))
    single: list[Measurement] = []
    for _ in range(CONFIRM_RUNS):
        single.append(evaluate(chosen.candidate, frames))
        trial.runs.append(evaluate(trial.candidate, frames))
    batched = [m for m in trial.runs if not m.error]
    single = [m for m in single if not m.error]
    trial.reached = chosen.reached
    trial.why_out = limits.why(trial.last) if batched else (trial.last.error or "failed")
    search.trials.append(trial)
    if on_trial is not None:
        on_trial(trial, frames)
    if trial.why_out or not batched:
        return found
    batched_score = statistics.median(limits.score(m) for m in batched)
    single_score = statistics.median(limits.score(m) for m in single or [chosen.last])
    found.confirmed = (
        f"end to end, median of {len(batched)}: batch {found.best}"
        f" {statistics.median(m.fps for m in batched):.1f} FPS, batch 1"
        f" {statistics.median(m.fps for m in single or [chosen.last]):.1f} FPS"
    )
    if batched_score > single_score:
        search.best = trial
    else:
        trial.why_out = f"no faster than batch 1 end to end ({found.confirmed})"
    return found


def _source_hw(video: str) -> tuple[int, int]:
    source = open_source(video, 0, SourceOptions(mode="file", max_frames=1))
    try:
        frame = next(iter(source.frames()), None)
    finally:
        source.close()
    if frame is None:
        raise ModelLoadError(f"{video}: no frame to tune on")
    height, width = frame.image.shape[:2]
    return int(height), int(width)


@building()  # tune builds the TensorRT engines it measures
def tune(
    video: str | Path,
    model: Path,
    limits: Limits,
    rounds: tuple[int, ...] = (60, 150, 300),
    on_trial: Callable[[Trial, int], None] | None = None,
    plans_root: Path | None = None,
    progress: bool = False,
    on_batch: Callable[[BatchPoint], None] | None = None,
    stop: threading.Event | None = None,
    motion: bool = True,
    on_motion: Say | None = None,
    calibrate_too: Sequence[str | Path] = (),
    clock: Callable[[], float] = time.monotonic,
) -> TuneOutcome:
    """Find the best configuration for `model` on `video` within `limits` (the search; where
    full INT8 fell short, its mixed-precision twin: `tune.mixed`; then the ladder of smaller
    input sizes below the choice: `tune.ladder`); save the plan.
    INT8 artifacts calibrate on `video` and `calibrate_too` (the other videos `tune` was given:
    cameras of other frame sizes), which the plan records (`tuned.videos`).
    With `motion`, then learn whether motion gating pays with it on this video (`tune.motion`;
    `on_motion` hears each step); the plan's `pipeline` section keeps the mode that does.

    Setting `stop` (a signal handler does) ends the search at the next frame with `Interrupted`
    and nothing cached.

    `limits.budget_s` (on `clock`) bounds every phase: the search, the GPU batch, the live twin
    and motion gating. Past it no measurement or export starts and the measurement under way is
    abandoned (an export under way finishes; the reference's first run always does); the plan
    keeps the best measured by then and records that the budget was reached."""
    started = clock()
    deadline = started + limits.budget_s
    if model.suffix != ".onnx":
        raise ConfigError(f"tune: expected an ONNX detector, got {model.name}")
    if limits.objective not in ("throughput", "latency"):
        raise ConfigError(f"--objective: expected throughput or latency, got {limits.objective}")
    if not 0 <= limits.min_fidelity <= 1:
        raise ConfigError(f"--min-fidelity: expected 0 to 1, got {limits.min_fidelity}")
    spec = read_model_spec(model)
    source_hw = _source_hw(str(video))
    space = candidates(this_machine(), spec.input_size, source_hw, limits.objective)
    evaluator = VideoEvaluator(
        video,
        model,
        fidelity_frames=min(60, rounds[0]),
        progress=progress,
        calibrate_too=calibrate_too,
        deadline=deadline,
        clock=clock,
    )
    if stop is not None:
        evaluator.stop = stop
    search = successive_halving(
        space, evaluator, limits, rounds, clock=clock, on_trial=on_trial, started=started
    )

    ladder = None
    if not search.out_of_time:
        try:
            try_mixed(search, evaluator, limits, rounds[-1], on_trial,
                      lambda: deadline - clock(), on_motion)  # fmt: skip
            ladder = descend(
                search,
                evaluator,
                limits,
                rounds[-1],
                source_hw,
                spec.input_size,
                on_trial,
                over=lambda: clock() > deadline,
            )
        except OutOfTime:
            search.out_of_time = True

    def measure_for(candidate: Candidate) -> Callable[[int], float]:
        config = evaluator.run_config(candidate)
        options = backend_options(config["inference"])
        measure = batch_throughput(config["model"], candidate.backend, options, str(video))

        def within_budget(batch: int) -> float:
            if clock() > deadline:
                raise OutOfTime
            return measure(batch)

        return within_budget

    batching = None
    try:
        batching = tune_gpu_batch(
            search, evaluator, limits, rounds[-1], measure_for, on_batch, on_trial
        )
    except OutOfTime:
        search.out_of_time = True
    best = search.best
    if best is None:
        return TuneOutcome(None, None, search, batching, ladder=ladder)
    live = None
    if not search.out_of_time:
        try:
            live = tune_live(best, evaluator, limits, rounds[-1], on_trial)
        except OutOfTime:
            search.out_of_time = True
    if live is not None:
        search.trials.append(live)
        search.live = live
    gating = _gating(
        motion, search, best, evaluator, limits, rounds[-1], (deadline, clock), on_motion
    )
    # A phase that began within the budget may have ended past it (an export runs to its end).
    search.out_of_time = search.out_of_time or clock() > deadline
    search.seconds = clock() - started
    fingerprint = machine_fingerprint()
    reference = search.reference.last if search.reference and search.reference.runs else None
    measured = best.last
    run = evaluator.run_config(best.candidate)
    if live is not None and not live.why_out:
        run[LIVE_KEY] = {"inference": _differences(best.candidate, live.candidate)}
    if gating.pipeline_section():
        run[PIPELINE_KEY] = gating.pipeline_section()
    plan = Plan(
        run=run,
        tuned={
            "label": best.candidate.label,
            "at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "source_model": str(model),
            "source_sha256": file_sha256(model),
            "artifact": evaluator.artifact_facts(best.candidate),
            "video": str(video),
            **({"videos": evaluator.calibration} if len(evaluator.calibration) > 1 else {}),
            "objective": limits.objective,
            "limits": {"min_fidelity": limits.min_fidelity, "max_p99_ms": limits.max_p99_ms},
            "input_hw": list(best.candidate.input_size or spec.input_size),
            "measured": _figures(measured),
            "reference": {"label": search.reference.candidate.label, "fps": round(reference.fps, 2)}
            if reference and search.reference
            else {},
            **({"live": _live_record(live)} if live is not None else {}),
            "search_seconds": round(search.seconds, 1),  # every phase, batch and motion too
            # A search the budget cut short kept the best measured by then (a time-boxed plan).
            "budget": {"minutes": round(limits.budget_s / 60, 2), "reached": search.out_of_time},
            **({"batch_search": batching.to_json()} if batching else {}),
            **({"ladder": ladder.to_json()} if ladder is not None else {}),
            "motion": gating.record(),
            "fingerprint": fingerprint,
        },
    )
    # What it was proven on: this video's frame size (a run on another size checks first).
    proven_hw = tuple(plan.tuned["input_hw"])
    record(
        plan,
        source_hw,
        tune_proof(
            Path(video).name, source_hw, proven_hw, plan.tuned["measured"], plan.tuned["at"]
        ),
    )
    path = plan.save(plan_path(model, fingerprint, plans_root))
    return TuneOutcome(plan, path, search, batching, gating, ladder)


def _gating(
    asked: bool,
    search: SearchResult,
    best: Trial,
    evaluator: VideoEvaluator,
    limits: Limits,
    frames: int,
    budget: tuple[float, Callable[[], float]],
    say: Say | None,
) -> MotionOutcome:
    """Motion gating measured with the chosen configuration, or why it was not; `budget` is
    the deadline and the clock it is on."""
    spent = MotionOutcome((), skipped="the search's budget was spent")
    if not asked:
        return MotionOutcome((), skipped="not measured (tune --no-motion)")
    if search.out_of_time:
        return spent
    deadline, clock = budget
    try:
        return tune_motion(best.candidate, evaluator, limits, frames, deadline, say, clock=clock)
    except OutOfTime:  # before any mode ran (its region model's export)
        search.out_of_time = True
        return spent


def live_twin(candidate: Candidate) -> Candidate | None:
    """The lowest-latency form of the chosen configuration, for live sources: one frame per
    call, and OpenVINO's latency hint (all threads on one request) instead of throughput
    streams. None when the candidate already is that."""
    settings = dict(candidate.settings)
    if candidate.backend == "openvino" and settings.get("hint") == "throughput":
        settings["hint"] = "latency"
    twin = replace(candidate, settings=tuple(sorted(settings.items())), batch=1)
    return None if twin == candidate else twin


@building()  # tune builds the TensorRT engines it measures
def tune_live(
    best: Trial,
    evaluate: Evaluate,
    limits: Limits,
    frames: int,
    on_trial: Callable[[Trial, int], None] | None = None,
) -> Trial | None:
    """Measure the chosen configuration's live twin (`live_twin`) on the final round's frames;
    it becomes the plan's `live` settings when its per-frame latency (p50) is lower and it
    stays within the limits. The trial joins the table either way."""
    twin = live_twin(best.candidate)
    if twin is None:
        return None
    trial = Trial(twin)
    trial.runs.append(evaluate(twin, frames))
    trial.reached = best.reached
    trial.why_out = limits.why(trial.last)
    if not trial.why_out and trial.last.p50_ms >= best.last.p50_ms:
        trial.why_out = f"p50 {trial.last.p50_ms:.0f} ms, not below {best.last.p50_ms:.0f} ms"
    if on_trial is not None:
        on_trial(trial, frames)
    return trial


def _differences(chosen: Candidate, twin: Candidate) -> dict[str, object]:
    """The inference settings of `twin` that differ from `chosen` (a plan's `live` section)."""
    ours, theirs = chosen.options(), twin.options()
    changed: dict[str, object] = {
        k: v for k, v in theirs.items() if k != "settings" and ours.get(k) != v
    }
    settings = {k: v for k, v in theirs["settings"].items() if ours["settings"].get(k) != v}
    if settings:
        changed["settings"] = settings
    return changed


def _live_record(trial: Trial) -> dict[str, object]:
    return {
        "label": trial.candidate.label,
        "chosen": not trial.why_out,
        **({"why_not": trial.why_out} if trial.why_out else {}),
        "measured": _figures(trial.last),
    }


def _figures(measured: Measurement) -> dict[str, float | int]:
    """A measurement as a plan records it."""
    return {
        "fps": round(measured.fps, 2),
        "p50_ms": round(measured.p50_ms, 2),
        "p99_ms": round(measured.p99_ms, 2),
        "fidelity": round(measured.fidelity, 4),
        "frames": measured.frames,
    }
