"""`tune --depth`: the fastest configuration of a depth model on this machine — runtime,
precision and input size — within a depth fidelity budget (AbsRel and δ<1.25 against ONNX
Runtime FP32 at the largest size searched, after per-frame scale-and-shift alignment), on the
user's video, cached as the depth model's plan (`run --depth` takes its size unless given).
Given the detector, the plan also says on how many frames depth must run (`depth_every`)."""

from __future__ import annotations

import datetime
import statistics
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from visionrt.backends import BackendOptions
from visionrt.errors import Interrupted, VisionRTError
from visionrt.export import export_model
from visionrt.export.depth import (
    ReferenceMaps,
    compare_depth_to_reference,
    depth_export_size,
    reference_depth_maps,
    static_depth_hw,
)
from visionrt.export.tensorrt import building
from visionrt.models import is_architecture_only
from visionrt.paths import file_sha256
from visionrt.plans import Plan, machine_fingerprint, plan_path
from visionrt.preprocess.depth import SHORT_SIDES
from visionrt.tune.candidates import Machine
from visionrt.tune.depth_every import (
    DEFAULT_MAX_HELD_ERROR,
    FRAMES,
    TRIED,
    choose_every,
    depth_and_boxes,
    held_errors,
)
from visionrt.tune.search import INTERRUPTED

TIMED_CALLS = 8  # model-only runs per candidate after 2 of warm-up: depth calls are long
# The short sides searched when none is given, the first the reference's: Depth Anything's own
# size and two smaller ones (the ViT's cost falls with the square of the side).
DEPTH_SIZES = tuple(sorted(SHORT_SIDES, reverse=True))


@dataclass(frozen=True, slots=True)
class DepthLimits:
    """The depth fidelity budget: most AbsRel and least δ<1.25 against FP32 (DESIGN.md); and
    most p90 relative error a held map may put into the distances at the boxes (`depth_every`;
    0: depth on every frame)."""

    max_abs_rel: float = 0.02
    min_delta1: float = 0.95
    max_held_error: float = DEFAULT_MAX_HELD_ERROR

    def why(self, abs_rel: float, delta1: float, nonfinite: int) -> str:
        if nonfinite:
            return f"{nonfinite} frame(s) with NaN/Inf"
        if not abs_rel <= self.max_abs_rel:
            return f"AbsRel {abs_rel:.3f} > {self.max_abs_rel}"
        if not delta1 >= self.min_delta1:
            return f"δ<1.25 {delta1:.3f} < {self.min_delta1}"
        return ""


@dataclass(frozen=True, slots=True)
class DepthCandidate:
    backend: str
    precision: str
    export: str = ""  # the artifact target it runs ("": the ONNX model itself)
    reference: bool = False
    short_side: int = 0  # the input's short side (0: not set yet)
    device: str = "cpu"
    cuda_graphs: bool = False  # torch on CUDA: one graph per input shape

    @property
    def label(self) -> str:
        where = f" {self.device}" if self.device != "cpu" else ""
        graphs = " graphs" if self.cuda_graphs else ""
        size = f" @{self.short_side}" if self.short_side else ""
        export = f" ({self.export})" if self.export else ""
        return f"{self.backend}{where} {self.precision}{graphs}{export}{size}"

    def options(self, input_hw: tuple[int, int] | None = None) -> BackendOptions:
        """The backend options it runs with (`input_hw`: the ONNX model sized here)."""
        settings = {"cuda_graphs": "true"} if self.cuda_graphs else {}
        return BackendOptions(
            precision=self.precision, device=self.device, input_size=input_hw, settings=settings
        )

    def inference(self) -> dict[str, Any]:
        """Its plan's inference section."""
        section: dict[str, Any] = {"precision": self.precision}
        if self.device != "cpu":
            section["device"] = self.device
        if self.cuda_graphs:
            section["settings"] = {"cuda_graphs": "true"}
        return section


@dataclass(slots=True)
class DepthTrial:
    candidate: DepthCandidate
    ms: float = 0.0  # model-only median per frame
    spread: tuple[float, float] = (0.0, 0.0)
    abs_rel: float = 0.0
    delta1: float = 1.0
    why_out: str = ""
    model: Path | None = None


def depth_candidates(machine: Machine) -> list[DepthCandidate]:
    """Reference first; torch on an NVIDIA GPU (fp32, and fp16 with CUDA graphs: LayerNorm
    and softmax accumulate in fp32) where there is one; OpenVINO FP32 (and BF16 where the CPU
    has it) on the ONNX model; INT8 artifacts calibrated on the video where the CPU has VNNI."""
    found = [DepthCandidate("onnxruntime", "fp32", reference=True)]
    if ("torch", "cuda") in machine.gpu:
        found.append(DepthCandidate("torch", "fp32", device="cuda"))
        found.append(DepthCandidate("torch", "fp16", device="cuda", cuda_graphs=True))
    if "openvino" in machine.runtimes:
        found.append(DepthCandidate("openvino", "fp32"))
        if machine.bf16:
            found.append(DepthCandidate("openvino", "bf16"))
        if machine.int8_export and machine.int8:
            found.append(DepthCandidate("openvino", "int8", export="openvino-int8"))
    if machine.int8:
        found.append(DepthCandidate("onnxruntime", "int8", export="onnx-int8"))
    return found


def _time_model(model: Path, candidate: DepthCandidate, input_hw: tuple[int, int]) -> list[float]:
    from visionrt.tasks.depth import DepthTask

    # An artifact is fixed at the size it was made at; the ONNX model is sized here.
    options = candidate.options(None if candidate.export else input_hw)
    task = DepthTask(model, candidate.backend, options)
    try:
        blank = np.random.default_rng(0).standard_normal(task.new_buffer().shape)
        blank = blank.astype(np.float32)
        for _ in range(2):
            task.backend.infer({task.input_name: blank})
        times = []
        for _ in range(TIMED_CALLS):
            started = time.perf_counter()
            task.backend.infer({task.input_name: blank})
            times.append((time.perf_counter() - started) * 1e3)
        return times
    finally:
        task.close()


@building()  # tune builds the TensorRT engines it measures
def tune_depth(
    video: str | Path,
    model: Path,
    short_side: int | None = None,
    limits: DepthLimits | None = None,
    frames: int = 30,
    calibration_frames: int = 32,
    plans_root: Path | None = None,
    on_trial: Callable[[DepthTrial], None] | None = None,
    stop: threading.Event | None = None,
    sizes: Sequence[int] = DEPTH_SIZES,
    detector: Path | None = None,
    every_frames: int = FRAMES,
) -> tuple[Plan, Path, list[DepthTrial]]:
    """Measure each candidate at each short side (`short_side` alone when given, else
    `sizes`, largest first; a model exported at a fixed size: that size): model-only ms, and
    fidelity on `frames` frames of `video` against the FP32 reference at the largest size.
    Choose the fastest within `limits` (the reference when none is) and cache it, with its
    size, as the depth model's plan for this machine. At a smaller size only the candidates
    that held the budget at the size above it are tried: the size's loss adds to theirs.
    With the `detector`, the chosen configuration's held maps are measured at its boxes on
    `every_frames` consecutive frames (`depth_every`): the plan's `every`."""
    from visionrt.tune.tuner import this_machine

    limits = limits or DepthLimits()
    video = Path(video)
    searched = _sizes(model, video, short_side, sizes)
    reference_hw = depth_export_size(model, searched[0], video)
    maps: ReferenceMaps | None = None
    trials: list[DepthTrial] = []
    space = depth_candidates(this_machine())
    for number, side in enumerate(searched):
        input_hw = depth_export_size(model, side, video)
        if number:
            above = searched[number - 1]
            held = {
                _kind(t.candidate)
                for t in trials
                if t.candidate.short_side == above and not t.why_out and t.ms
            }
            # Below the reference's size the FP32 model is a candidate like any other.
            space = [replace(c, reference=False) for c in space if _kind(c) in held]
            if not space:  # said, so that a size missing from the table is not a mystery
                skipped = DepthTrial(replace(trials[0].candidate, reference=False, short_side=side))
                skipped.why_out = f"not tried: nothing held the budget at {above}"
                trials.append(skipped)
                if on_trial is not None:
                    on_trial(skipped)
                continue
        for candidate in space:
            if stop is not None and stop.is_set():
                raise Interrupted(INTERRUPTED)
            trial = DepthTrial(replace(candidate, short_side=side))
            if maps is None and not candidate.reference:
                maps = reference_depth_maps(video, model, frames, reference_hw)
            _measure(trial, model, video, input_hw, maps, frames, calibration_frames, limits, stop)
            trials.append(trial)
            if on_trial is not None:
                on_trial(trial)
    feasible = [t for t in trials if not t.why_out and t.ms]
    best = min(feasible, key=lambda t: t.ms) if feasible else trials[0]
    chosen_hw = depth_export_size(model, best.candidate.short_side, video)
    every = None
    if detector is not None:
        every = _every(video, model, best, chosen_hw, detector, limits, every_frames, stop)
    plan = _depth_plan(model, video, searched, chosen_hw, best, trials, limits, every)
    path = plan.save(plan_path(model, plan.fingerprint, plans_root))
    return plan, path, trials


def _sizes(
    model: Path, video: Path, short_side: int | None, sizes: Sequence[int]
) -> tuple[int, ...]:
    """The short sides searched, largest first: the one asked, else `sizes`; a model whose
    export fixed its size, that size alone."""
    if short_side is not None:
        return (short_side,)
    fixed = static_depth_hw(model)
    if fixed is not None:
        return (min(fixed),)
    return tuple(sorted(set(sizes), reverse=True))


def _kind(candidate: DepthCandidate) -> tuple[str, str, str]:
    return candidate.backend, candidate.precision, candidate.export


def _measure(
    trial: DepthTrial,
    model: Path,
    video: Path,
    input_hw: tuple[int, int],
    maps: ReferenceMaps | None,
    frames: int,
    calibration_frames: int,
    limits: DepthLimits,
    stop: threading.Event | None,
) -> None:
    """Time `trial`'s candidate at `input_hw` and score it against `maps` (not the
    reference itself); its error or its miss of the budget goes in `why_out`."""
    candidate = trial.candidate
    try:
        trial.model = model
        if candidate.export:
            built = export_model(
                model,
                candidate.export,
                calibrate=video,
                frames=calibration_frames,
                progress=False,
                fidelity_frames=0,
                depth_size=input_hw,
            )
            trial.model = built.path
        times = _time_model(trial.model, candidate, input_hw)
        trial.ms, trial.spread = statistics.median(times), (min(times), max(times))
        if not candidate.reference:
            assert maps is not None
            options = candidate.options()
            report = compare_depth_to_reference(
                video, maps, trial.model, candidate.backend, options, frames, input_hw
            )
            trial.abs_rel, trial.delta1 = report.abs_rel, report.delta1
            trial.why_out = limits.why(report.abs_rel, report.delta1, report.nonfinite_frames)
    except (VisionRTError, RuntimeError, MemoryError) as err:
        if stop is not None and stop.is_set():
            raise Interrupted(INTERRUPTED) from err
        trial.why_out = (str(err).splitlines() or [type(err).__name__])[0]


def _every(
    video: Path,
    model: Path,
    best: DepthTrial,
    input_hw: tuple[int, int],
    detector: Path,
    limits: DepthLimits,
    frames: int,
    stop: threading.Event | None,
) -> dict[str, Any]:
    """The plan's `every` section: N chosen, why not more, and each N's error at the boxes."""
    candidate = best.candidate
    options = candidate.options(None if candidate.export else input_hw)
    section: dict[str, Any] = {
        "chosen": 1, "why": "", "max_held_error": limits.max_held_error, "frames": frames,
        "detector": str(detector), "tried": [],
    }  # fmt: skip
    if not limits.max_held_error > 0:
        section["why"] = choose_every([], limits.max_held_error)[1]
        return section
    measured = depth_and_boxes(
        video, best.model or model, candidate.backend, options, detector, frames, stop
    )
    try:
        errors = held_errors(measured, TRIED)
    except Interrupted:
        raise
    except (VisionRTError, RuntimeError, MemoryError) as err:
        if stop is not None and stop.is_set():
            raise Interrupted(INTERRUPTED) from err
        section["why"] = "not measured: " + (str(err).splitlines() or [type(err).__name__])[0]
        return section
    section["chosen"], section["why"] = choose_every(errors, limits.max_held_error)
    section["tried"] = [error.as_dict() for error in errors]
    return section


def _depth_plan(
    model: Path,
    video: Path,
    searched: Sequence[int],
    input_hw: tuple[int, int],
    best: DepthTrial,
    trials: list[DepthTrial],
    limits: DepthLimits,
    every: dict[str, Any] | None = None,
) -> Plan:
    reference = trials[0]
    candidate = best.candidate
    inference = candidate.inference()
    return Plan(
        run={
            "model": str(best.model or model),
            "backend": candidate.backend,
            "inference": inference,
        },
        tuned={
            "task": "depth",
            "label": candidate.label,
            "at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "source_model": str(model),
            "source_sha256": file_sha256(model),
            # Artifacts are fixed at this size; the ONNX model runs at any.
            "artifact": {
                "batch": 1 if candidate.export else "any",
                "fixed_hw": list(input_hw) if candidate.export else None,
            },
            "video": str(video),
            "short_side": candidate.short_side,
            "input_hw": list(input_hw),
            # Fidelity is against FP32 at the first; the plan's size is the one chosen.
            "sizes_searched": list(searched),
            "limits": {"max_abs_rel": limits.max_abs_rel, "min_delta1": limits.min_delta1},
            # On how many frames depth runs (`depth.every`); absent: 1, not measured.
            **({"every": every} if every is not None else {}),
            "architecture_only": is_architecture_only(model),
            "measured": {
                "ms": round(best.ms, 2),
                "abs_rel": round(best.abs_rel, 4),
                "delta1": round(best.delta1, 4),
            },
            "reference": {"label": reference.candidate.label, "ms": round(reference.ms, 2)},
            "trials": [
                {
                    "label": t.candidate.label,
                    "short_side": t.candidate.short_side,
                    "ms": round(t.ms, 2),
                    "ms_range": [round(t.spread[0], 2), round(t.spread[1], 2)],
                    "abs_rel": round(t.abs_rel, 4),
                    "delta1": round(t.delta1, 4),
                    "why_out": t.why_out,
                }
                for t in trials
            ],
            "fingerprint": machine_fingerprint(),
        },
    )
