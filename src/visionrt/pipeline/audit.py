"""What a run audits against and how often: the references and budgets a plan gives, the rate
(on by default when a reference is known), and the reference tasks the lane builds — from the
loaded tasks and the options, not from the Pipeline."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from visionrt.accuracy.audit import Auditor
from visionrt.accuracy.audit_window import AuditEvent, AuditSettings, sample_period
from visionrt.backends import BackendOptions
from visionrt.errors import ConfigError, ModelLoadError
from visionrt.fidelity import REFERENCE_BACKEND
from visionrt.models import is_architecture_only
from visionrt.pipeline.gating import Gating
from visionrt.tasks.base import Task

if TYPE_CHECKING:
    from visionrt.config.pipeline import DepthOptions, PipelineOptions
    from visionrt.pipeline.parts import Parts
    from visionrt.plans import Plan, PlanUse
    from visionrt.sources import Source
    from visionrt.telemetry import Telemetry

DEFAULT_RATE = 0.02  # cost measured in docs/results/audit_cost.json (scripts/bench_audit.py)
DEFAULT_MIN_FIDELITY = 0.95  # tune's own default budget
DEFAULT_MAX_ABS_REL = 0.02  # tune --depth's own default budget
# The reference's idle workers must not spin: at nice 19 they would only take idle cycles, but
# spinning keeps cores awake that the run's own runtime wants. Results are the same.
REFERENCE_OPTIONS = BackendOptions(settings={"spin": "0"})

Depth = TypeVar("Depth", bound="DepthOptions")

log = logging.getLogger("visionrt")


def planned_audit(options: PipelineOptions, plan: Plan | None) -> PipelineOptions:
    """`options` with the audit's reference and budget taken from `plan` where the caller left
    them unset: the model the plan was tuned from (its FP32 reference) and the limit it was
    tuned under."""
    audit = options.audit
    source, limit = _from_plan(plan, audit.reference, audit.min_fidelity, "min_fidelity")
    changed = _set(reference=source, min_fidelity=limit)
    return replace(options, audit=replace(audit, **changed)) if changed else options


def planned_depth_audit(depth: Depth, plan: Plan | None) -> Depth:
    """The depth section with its audit's reference, budget and size taken from the depth
    `plan` where the caller left them unset (as planned_audit)."""
    source, limit = _from_plan(plan, depth.audit_reference, depth.audit_max_abs_rel, "max_abs_rel")
    # A depth plan that chose a smaller size than it scored against: audit against that one.
    searched = (plan.tuned.get("sizes_searched") or []) if plan is not None else []
    side = int(searched[0]) if searched and depth.audit_short_side is None else None
    changed = _set(audit_reference=source, audit_max_abs_rel=limit, audit_short_side=side)
    return replace(depth, **changed) if changed else depth


def _from_plan(
    plan: Plan | None, reference: object, limit: float | None, key: str
) -> tuple[str | None, float | None]:
    """The plan's source model where the caller's `reference` is unset, and its limit `key`
    where the caller's `limit` is (None: the caller's stays)."""
    if plan is None:
        return None, None
    source, limits = plan.tuned.get("source_model"), plan.tuned.get("limits") or {}
    return (
        str(source) if source and not reference else None,
        float(limits[key]) if limit is None and key in limits else None,
    )


def _set(**values: Any) -> dict[str, Any]:
    """The values that are set (not None)."""
    return {name: value for name, value in values.items() if value is not None}


def build_auditor(
    parts: Parts,
    options: PipelineOptions,
    model: str | Path,
    sources: Sequence[Source],
    names: Sequence[str],
    telemetry: Telemetry,
    live: bool,
    tell: Callable[[AuditEvent], None],
) -> tuple[Auditor | None, list[str]]:
    """The run's audit lane (None: no audit) and the lines saying what it audits, over the
    loaded tasks (`parts`); `model` is the detector file the run loads, `tell` is told of each
    event (on the audit's thread). A ConfigError when an audit was asked for (`pipeline.audit.share`
    given) that cannot run."""
    if options.audit.share == 0:
        return None, []
    explicit = options.audit.share is not None
    notes: list[str] = []
    detect = _reference(options.audit.reference, model, explicit, "detector", notes)
    if detect is None and explicit and not options.audit.reference:
        raise ConfigError(
            f"--audit: no FP32 reference for {Path(model).name}: set pipeline.audit.reference"
            " to the ONNX model it was made from"
        )
    if detect is not None and _detector_is(parts, options, model, detect[0]):
        detect = _as_itself(detect, "detector", explicit, notes)
    depth_options, depth = parts.depth, None
    if depth_options is not None:
        given, model = depth_options.audit_reference, depth_options.model
        depth = _reference(given, model, explicit, "depth model", notes)
        if depth is not None and _depth_is(parts.tasks[1], depth_options, depth[0]):
            depth = _as_itself(depth, "depth model", explicit, notes)
    if detect is None and depth is None:
        return None, notes
    rate = options.audit.share if options.audit.share is not None else DEFAULT_RATE
    avoid = max(
        options.tracking.detect_every, options.slo.max_every if options.slo.target_ms else 1
    )
    max_abs_rel = depth_options.audit_max_abs_rel if depth_options is not None else None
    settings = AuditSettings(
        rate=rate,
        period=sample_period(rate, avoid),
        reference=str(detect[0]) if detect else "",
        depth_reference=str(depth[0]) if depth else "",
        min_fidelity=_or(options.audit.min_fidelity, DEFAULT_MIN_FIDELITY),
        max_abs_rel=_or(max_abs_rel, DEFAULT_MAX_ABS_REL),
        window=options.audit.window,
        architecture_only=bool(detect and detect[1]),
        depth_architecture_only=bool(depth and depth[1]),
    )
    auditor = Auditor(
        settings,
        names,
        telemetry,
        detect=_detect_builder(parts, options, detect[0]) if detect else None,
        depth=_depth_builder(parts, sources, depth_options, depth[0])
        if depth_options and depth
        else None,
        on_event=tell,
        live=live,
    )
    against = " and ".join(
        found[0].name + (" (architecture-only: random weights)" if found[1] else "")
        for found in (detect, depth)
        if found
    )
    budgets = [f"mAP50 ≥ {settings.min_fidelity:g}"] if detect else []
    budgets += [f"depth AbsRel ≤ {settings.max_abs_rel:g}"] if depth else []
    notes.append(
        f"audit: 1 frame in {settings.period} per source against {against} (ONNX Runtime FP32)"
        f" in a low-priority lane; budget {', '.join(budgets)} over the last {settings.window}"
        " audited frames (--audit 0: off)"
    )
    return auditor, notes


Reference = tuple[Path, bool]  # the file, and whether it says it is architecture-only


def _reference(
    given: str | Path, model: str | Path, explicit: bool, what: str, notes: list[str]
) -> Reference | None:
    """The FP32 reference of the detector or depth model (`what`): the one given, else (when
    the audit was asked for) the run's own ONNX model. One that is not there or not readable is
    a ConfigError when the audit was asked for, else a note and no audit of that model."""
    key = "pipeline.audit.reference" if what == "detector" else "depth.audit_reference"
    if not given:
        if explicit and Path(model).suffix == ".onnx":
            given = model
        elif explicit and what != "detector":
            notes.append(
                f"audit: the {what} {Path(model).name} is not audited: set {key} to the ONNX"
                " model it was made from"
            )
            return None
        else:
            return None
    path = Path(given)
    problem = "not found" if not path.is_file() else ""
    problem = problem or ("not an ONNX model" if path.suffix != ".onnx" else "")
    architecture_only = False
    if not problem:
        try:
            architecture_only = is_architecture_only(path)
        except ModelLoadError as err:
            problem = f"not readable ({err})"
    if not problem:
        return path, architecture_only
    if explicit:
        raise ConfigError(f"{key}: {path}: {problem}")
    notes.append(f"audit: the {what} is not audited: its reference {path} is {problem}")
    return None


def _as_itself(
    reference: Reference, what: str, explicit: bool, notes: list[str]
) -> Reference | None:
    """The run is its own reference: pointless by default; audited when asked, with a note."""
    if not explicit:
        return None
    notes.append(
        f"audit: the {what} runs as its own FP32 reference ({reference[0].name}, ONNX Runtime"
        " FP32): its fidelity is 1 by construction on frames it runs whole; the audit measures"
        " its cost, and what motion gating's spared frames lose"
    )
    return reference


def _same(a: str | Path, b: str | Path) -> bool:
    return Path(a).resolve() == Path(b).resolve()


def _plain(task: Task) -> bool:
    info = task.backend.info
    return (info.runtime, info.precision, info.device) == (REFERENCE_BACKEND, "fp32", "cpu")


def _detector_is(
    parts: Parts, options: PipelineOptions, model: str | Path, reference: Path
) -> bool:
    """The run delivers what the reference sees: the same file in ONNX Runtime FP32 at its own
    input size on every source (no detectors of other frame sizes), no tiles, tracking or
    latency ladder."""
    task = parts.detector
    return (
        _same(model, reference)
        and _plain(task)
        and task.input_hw == task.spec.input_size
        and not (
            options.tracking.tracker_runs
            or options.tiling.tile
            or options.slo.target_ms
            or parts.sized
        )
    )


def _depth_is(task: Task, depth: DepthOptions, reference: Path) -> bool:
    resized = depth.audit_short_side not in (None, depth.input_short_side)
    return _same(depth.model, reference) and _plain(task) and not (depth.smoothing or resized)


def _detect_builder(parts: Parts, options: PipelineOptions, reference: Path) -> Callable[[], Task]:
    from visionrt.tasks import DetectTask, TiledDetectTask

    # The user's threshold: tracking lowers the detector's for ByteTrack's second stage only.
    post = replace(parts.postprocess, conf=parts.tracker_high)
    if options.tiling.tile:
        source_hw = parts.detector.source_hw  # type: ignore[union-attr]
        return lambda: TiledDetectTask(
            reference, REFERENCE_BACKEND, REFERENCE_OPTIONS, post,
            tiling=options.tiling, source_hw=source_hw,
        )  # fmt: skip
    return lambda: DetectTask(reference, REFERENCE_BACKEND, REFERENCE_OPTIONS, post)


def _depth_builder(
    parts: Parts, sources: Sequence[Source], depth: DepthOptions, reference: Path
) -> Callable[[], Task]:
    from visionrt.tasks.depth import DepthTask

    on = [i for i, lanes in enumerate(parts.schedule) if len(lanes) > 1]
    first = sources[on[0]]
    size = getattr(first, "size", None)
    return lambda: DepthTask(
        reference,
        REFERENCE_BACKEND,
        REFERENCE_OPTIONS,
        short_side=depth.audit_short_side or depth.input_short_side,
        on_nonfinite="fail",  # FP32 already: NaN is the model's, and the sample is skipped
        source_hw=size,
    )


def _or(value: float | None, default: float) -> float:
    return default if value is None else float(value)


def finish_audit(
    auditor: Auditor,
    names: Sequence[str],
    sources: Sequence[Source],
    plan_use: PlanUse,
    drain: bool,
) -> list[str]:
    """The run ended: let the lane finish (`drain`: file mode waits for what is queued), and
    give its verdict on each file source's frame size back to the cached plan
    (`geometry.remember_audit`); a note line for each size it refuted."""
    from visionrt.accuracy.geometry import remember_audit

    auditor.finish(drain=drain)
    files = zip(names, sources, strict=True)
    sizes = {n: size for n, s in files if not s.live and (size := getattr(s, "size", None))}
    lines = remember_audit(plan_use, sizes, auditor.report())
    for line in lines:
        log.info("%s", line)
    return lines


def stop_gating(
    gating: Gating, names: Sequence[str], note: Callable[[str], None], event: AuditEvent
) -> None:
    """The audit found the frames gating spared on a source below the budget: gating stops
    there (the latest source of that name: a service's camera added again under it)."""
    gating.turn_off(len(names) - 1 - list(names)[::-1].index(event.source))
    note(
        f"motion gating off for {event.source}: the frames it spared scored {event.value:.3f}"
        f" against the FP32 reference (budget {event.budget:g}, {event.frames} frames); from"
        f" frame {event.frame} on, the detector runs on each of its frames, whole"
    )
