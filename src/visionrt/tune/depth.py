"""`tune --depth`: the fastest configuration of a depth model on this machine within a depth
fidelity budget (AbsRel and δ<1.25 against ONNX Runtime FP32 after per-frame scale-and-shift
alignment), on the user's video at the run's depth size, cached as the depth model's plan."""

from __future__ import annotations

import datetime
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from visionrt.backends import BackendOptions
from visionrt.errors import Interrupted, VisionRTError
from visionrt.export import export_model
from visionrt.export.depth import compare_depth_to_reference, depth_export_size
from visionrt.models import is_architecture_only
from visionrt.paths import file_sha256
from visionrt.plans import Plan, machine_fingerprint, plan_path
from visionrt.tune.candidates import Machine
from visionrt.tune.search import INTERRUPTED

TIMED_CALLS = 8  # model-only runs per candidate after 2 of warm-up: depth calls are long


@dataclass(frozen=True, slots=True)
class DepthLimits:
    """The depth fidelity budget: most AbsRel and least δ<1.25 against FP32 (DESIGN.md)."""

    max_abs_rel: float = 0.02
    min_delta1: float = 0.95

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

    @property
    def label(self) -> str:
        return f"{self.backend} {self.precision}" + (f" ({self.export})" if self.export else "")


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
    """Reference first; OpenVINO FP32 (and BF16 where the CPU has it) on the ONNX model; INT8
    artifacts calibrated on the video where the CPU has VNNI."""
    found = [DepthCandidate("onnxruntime", "fp32", reference=True)]
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
    size = None if candidate.export else input_hw
    options = BackendOptions(precision=candidate.precision, input_size=size)
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


def tune_depth(
    video: str | Path,
    model: Path,
    short_side: int,
    limits: DepthLimits | None = None,
    frames: int = 30,
    calibration_frames: int = 32,
    plans_root: Path | None = None,
    on_trial: Callable[[DepthTrial], None] | None = None,
    stop: threading.Event | None = None,
) -> tuple[Plan, Path, list[DepthTrial]]:
    """Measure each candidate (model-only ms; fidelity on `frames` frames of `video`), choose
    the fastest within `limits` (the reference when none is), and cache it as the depth model's
    plan for this machine."""
    from visionrt.tune.tuner import this_machine

    limits = limits or DepthLimits()
    video = Path(video)
    input_hw = depth_export_size(model, short_side, video)
    trials: list[DepthTrial] = []
    for candidate in depth_candidates(this_machine()):
        if stop is not None and stop.is_set():
            raise Interrupted(INTERRUPTED)
        trial = DepthTrial(candidate)
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
                options = BackendOptions(precision=candidate.precision)
                report = compare_depth_to_reference(
                    video, model, trial.model, candidate.backend, options, frames, input_hw
                )
                trial.abs_rel, trial.delta1 = report.abs_rel, report.delta1
                trial.why_out = limits.why(report.abs_rel, report.delta1, report.nonfinite_frames)
        except (VisionRTError, RuntimeError, MemoryError) as err:
            if stop is not None and stop.is_set():
                raise Interrupted(INTERRUPTED) from err
            trial.why_out = (str(err).splitlines() or [type(err).__name__])[0]
        trials.append(trial)
        if on_trial is not None:
            on_trial(trial)
    feasible = [t for t in trials if not t.why_out and t.ms]
    best = min(feasible, key=lambda t: t.ms) if feasible else trials[0]
    plan = _depth_plan(model, video, short_side, input_hw, best, trials, limits)
    path = plan.save(plan_path(model, plan.fingerprint, plans_root))
    return plan, path, trials


def _depth_plan(
    model: Path,
    video: Path,
    short_side: int,
    input_hw: tuple[int, int],
    best: DepthTrial,
    trials: list[DepthTrial],
    limits: DepthLimits,
) -> Plan:
    reference = trials[0]
    candidate = best.candidate
    inference = {"precision": candidate.precision}
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
            "short_side": short_side,
            "input_hw": list(input_hw),
            "limits": {"max_abs_rel": limits.max_abs_rel, "min_delta1": limits.min_delta1},
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
