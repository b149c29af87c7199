"""`tune`: search this machine's configurations on the user's video, write and cache the plan."""

from __future__ import annotations

import datetime
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from visionrt import hardware
from visionrt.backends.registry import find_row, unavailable_reason
from visionrt.errors import ConfigError, ModelLoadError
from visionrt.model import read_model_spec
from visionrt.sources import SourceOptions, open_source
from visionrt.tune.candidates import Machine, candidates
from visionrt.tune.evaluate import VideoEvaluator
from visionrt.tune.plan import Plan, machine_fingerprint, plan_path
from visionrt.tune.search import Limits, SearchResult, Trial, successive_halving


@dataclass(frozen=True, slots=True)
class TuneOutcome:
    plan: Plan | None
    path: Path | None
    search: SearchResult


def this_machine() -> Machine:
    runtimes = frozenset(
        name for name in ("onnxruntime", "openvino") if unavailable_reason(find_row(name)) is None
    )
    return Machine(
        runtimes=runtimes,
        cpu_features=hardware.cpu_features(),
        int8_export="openvino" in runtimes and importlib.util.find_spec("nncf") is not None,
    )


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


def tune(
    video: str | Path,
    model: Path,
    limits: Limits,
    rounds: tuple[int, ...] = (60, 150, 300),
    on_trial: Callable[[Trial, int], None] | None = None,
    plans_root: Path | None = None,
    progress: bool = False,
) -> TuneOutcome:
    """Find the best configuration for `model` on `video` within `limits`; save the plan."""
    if model.suffix != ".onnx":
        raise ConfigError(f"tune: expected an ONNX detector, got {model.name}")
    if limits.objective not in ("throughput", "latency"):
        raise ConfigError(f"--objective: expected throughput or latency, got {limits.objective}")
    if not 0 <= limits.min_fidelity <= 1:
        raise ConfigError(f"--min-fidelity: expected 0 to 1, got {limits.min_fidelity}")
    spec = read_model_spec(model)
    space = candidates(this_machine(), spec.input_size, _source_hw(str(video)), limits.objective)
    evaluator = VideoEvaluator(video, model, fidelity_frames=min(60, rounds[0]), progress=progress)
    search = successive_halving(space, evaluator, limits, rounds, on_trial=on_trial)
    best = search.best
    if best is None:
        return TuneOutcome(None, None, search)
    fingerprint = machine_fingerprint()
    reference = search.reference.last if search.reference and search.reference.runs else None
    measured = best.last
    plan = Plan(
        run=evaluator.run_config(best.candidate),
        tuned={
            "label": best.candidate.label,
            "at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "source_model": str(model),
            "video": str(video),
            "objective": limits.objective,
            "limits": {"min_fidelity": limits.min_fidelity, "max_p99_ms": limits.max_p99_ms},
            "input_hw": list(best.candidate.input_size or spec.input_size),
            "measured": {
                "fps": round(measured.fps, 2),
                "p50_ms": round(measured.p50_ms, 2),
                "p99_ms": round(measured.p99_ms, 2),
                "fidelity": round(measured.fidelity, 4),
                "frames": measured.frames,
            },
            "reference": {"label": search.reference.candidate.label, "fps": round(reference.fps, 2)}
            if reference and search.reference
            else {},
            "search_seconds": round(search.seconds, 1),
            "fingerprint": fingerprint,
        },
    )
    path = plan.save(plan_path(model, fingerprint, plans_root))
    return TuneOutcome(plan, path, search)
