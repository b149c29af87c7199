"""Which configuration a run takes from a plan: the plan's sections when it was tuned for the
run's model and its artifact serves what the run asks (a batch, tiles, live sources), or none —
always with one line saying which and why. The CLI, `profile` and the Python API share it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from visionrt.backends import BackendOptions
from visionrt.errors import ModelLoadError
from visionrt.models import demo_model_path
from visionrt.paths import file_sha256
from visionrt.plans.gpu import GpuReference, gpu_reference
from visionrt.plans.store import (
    LIVE_KEY,
    RUN_KEYS,
    Plan,
    cached_plan,
    cached_plans,
    fingerprint_differences,
)
from visionrt.preprocess.depth import DEFAULT_SHORT_SIDE

# Inference settings that choose a configuration: given any of them, the user's choice wins over
# a cached plan. `threads` and `batch` do not: they compose with whatever the plan runs, and
# neither does a `device` of the kind the plan runs on (`--device cpu` with a CPU plan,
# `--device cuda:1` with a CUDA plan): the user's device then runs the plan.
CHOICES = ("device", "precision", "input_size", "fold_preprocess", "settings")
REFERENCE = "the FP32 reference"


@dataclass(frozen=True, slots=True)
class PlanRequest:
    """What a run asks of its detector, as far as a plan is concerned. `model` is the file the
    run names (None: the plan's own, or the demo model for a cached plan); `chosen` the settings
    the user gave that pick a configuration (`pipeline.plan_run`: the keys the user gave)."""

    model: Path | None = None
    chosen: tuple[str, ...] = ()
    device: str = ""  # the device the user named ("": none)
    batch: int = 1  # frames per inference call
    tile: bool = False  # tiles run as a batch of rows per frame
    live: bool = False  # cameras, streams or --realtime: the plan's `live` settings apply


@dataclass(frozen=True, slots=True)
class PlanUse:
    """`sections` (model, backend, inference) to layer under the run's own settings, with the
    model replaced by the plan's artifact; None: the run goes on without a plan. `note` is the
    line to show ("" when there is nothing to say). `by_size`: the sections proven on a source
    frame size (height, width) where they differ from `sections` (None: the reference), which
    the sources of that size run instead (`accuracy.geometry.settle` fills it)."""

    sections: dict[str, Any] | None
    note: str
    plan: Plan | None = None
    path: Path | None = None  # the cached plan file (None: the user's --plan file, not ours)
    by_size: dict[tuple[int, int], dict[str, Any] | None] = field(default_factory=dict)

    @property
    def runs(self) -> bool:
        """Some configuration of the plan runs (on every source, or on those of some size)."""
        return self.sections is not None or any(s is not None for s in self.by_size.values())


def layered(options: BackendOptions, inference: Mapping[str, Any]) -> BackendOptions:
    """`options` with a plan's (or a run config's) `inference` section over them."""
    values = dict(inference)
    size = values.pop("input_size", None)
    return replace(options, **values, input_size=tuple(size) if size else None)


def use_plan(
    request: PlanRequest,
    plan_file: str | Path | None = None,
    root: Path | None = None,
    fingerprint: dict[str, Any] | None = None,
) -> PlanUse:
    """The plan a run uses: `plan_file` when given (the user's settings still override single
    values), else the one cached for the model on this machine (or the machine `fingerprint`
    describes: a cluster's node) unless the user chose a configuration. A plan tuned for
    another model, or whose artifact cannot serve the run, is set aside with the reason —
    never an error."""
    if plan_file is not None:
        plan, where, path = Plan.load(plan_file), f"plan {plan_file}", None
        warnings = "".join(
            f"\nwarning: this machine differs from the plan's: {difference}"
            for difference in fingerprint_differences(plan, fingerprint)
        )
    else:
        model = request.model or _demo_model()
        if model is None or model.suffix != ".onnx" or not model.is_file():
            return PlanUse(None, "")
        found = cached_plan(model, root, fingerprint)
        if found is not None and found[0].tuned.get("task") == "depth":
            found = None  # a depth model's plan: not a detector's
        if found is None:
            gpu = _gpu(model, fingerprint, request.chosen, request.device)
            cpu = _device_only(request.chosen, request.device, "cpu")
            if request.chosen and gpu.sections is None and not cpu:
                return PlanUse(None, "")
            where = f" {gpu.where}" if gpu.where else ""
            lost = _lost_artifact(model, root, fingerprint)
            if lost is not None:
                return PlanUse(
                    gpu.sections,
                    f"plan {lost[0].name} set aside: its artifact {lost[1]} is missing; running"
                    f" {REFERENCE}{where}; `visionrt tune` again builds it (minutes, once)",
                )
            return PlanUse(
                gpu.sections,
                f"no tuned plan for {model.name} on {_machine(fingerprint)}: running"
                f" {REFERENCE}{where}; `visionrt tune` finds the fastest configuration here"
                " (minutes, once)",
            )
        plan, path = found
        where, warnings = f"plan {path.name}", ""
        if request.chosen and not _plan_device(request.chosen, request.device, plan):
            chose = _other_device("--device", request.chosen, request.device, plan)
            return PlanUse(
                None,
                f"{where} not used: {chose or _flags(request.chosen)} chose the configuration"
                " (--plan FILE applies a plan under your settings)",
                plan,
            )
    why = _why_not(plan, request)
    if why:
        running = request.model.name if request.model else REFERENCE
        return PlanUse(None, f"{where} set aside: {why}; running {running}{warnings}", plan)
    sections = {key: plan.run[key] for key in RUN_KEYS if key in plan.run}
    live_settings = (plan.run.get(LIVE_KEY) or {}).get("inference") or {}
    mode = ""
    if request.live and live_settings:
        sections["inference"] = _merged(sections.get("inference") or {}, live_settings)
        mode = f" · live: {_describe(live_settings)}"
    elif plan.run.get(LIVE_KEY):
        mode = " · file mode: throughput settings"
    tail = "" if plan_file is not None else " (--no-plan: the reference)"
    note = f"{where}: {plan.summary_line()}{mode}{tail}{warnings}"
    return PlanUse(sections, note, plan, path)


def _lost_artifact(
    model: Path, root: Path | None, fingerprint: dict[str, Any] | None, depth: bool = False
) -> tuple[Path, Path] | None:
    """A plan cached for `model` on this machine (`fingerprint`'s) that `cached_plan` passes
    over because the artifact it runs is gone: the plan file and that artifact (None: no such
    plan)."""
    for plan, path in cached_plans(model, root, fingerprint):
        if (plan.tuned.get("task") == "depth") != depth:
            continue
        artifact = Path(str(plan.run.get("model", "")))
        if not artifact.is_file():
            return path, artifact
    return None


def _machine(fingerprint: dict[str, Any] | None) -> str:
    return "this machine" if fingerprint is None else "that machine"


def _demo_model() -> Path | None:
    try:
        return demo_model_path()
    except ModelLoadError:
        return None


def _device_kind(device: str) -> str:
    """`cuda:1` → `cuda`; OpenVINO's `GPU.0` → `gpu`."""
    return device.split(":")[0].split(".")[0].strip().lower()


def _planned_device(plan: Plan) -> str:
    return str((plan.run.get("inference") or {}).get("device") or "")


def _device_only(chosen: tuple[str, ...], device: str, kind: str) -> bool:
    """The user chose a device alone, and of this kind."""
    return chosen == ("device",) and _device_kind(device) == kind


def _plan_device(chosen: tuple[str, ...], device: str, plan: Plan) -> bool:
    """The user chose only a device, of the kind the plan runs on: the plan serves it."""
    planned = _planned_device(plan)
    return bool(planned) and _device_only(chosen, device, _device_kind(planned))


def _other_device(flag: str, chosen: tuple[str, ...], device: str, plan: Plan) -> str:
    """ "FLAG X (the plan runs on Y)" where a device alone set the plan aside ("" otherwise)."""
    planned = _planned_device(plan)
    if chosen != ("device",) or not planned:
        return ""
    return f"{flag} {device} (the plan runs on {planned})"


def _flags(chosen: tuple[str, ...]) -> str:
    names = {"input_size": "--imgsz", "fold_preprocess": "inference.fold_preprocess",
             "settings": "inference.settings"}  # fmt: skip
    return ", ".join(names.get(c, f"--{c}") for c in chosen)


def _merged(inference: Mapping[str, Any], live: Mapping[str, Any]) -> dict[str, Any]:
    merged = {**inference, **live}
    if "settings" in live:  # settings merge key by key, as config layers do
        merged["settings"] = {**(inference.get("settings") or {}), **live["settings"]}
    return merged


def _describe(settings: Mapping[str, Any]) -> str:
    flat = {
        **{k: v for k, v in settings.items() if k != "settings"},
        **settings.get("settings", {}),
    }
    return ", ".join(f"{k}={v}" for k, v in flat.items())


def plan_model_sha256(plan: Plan) -> str:
    """The content hash of the model the plan was tuned for ("" when the plan cannot say)."""
    recorded = str(plan.tuned.get("source_sha256") or "")
    if recorded:
        return recorded
    source = Path(str(plan.tuned.get("source_model") or ""))
    return file_sha256(source) if source.is_file() else ""


def batch_ready(plan: Plan) -> bool:
    """True when the plan's model runs at any batch: an ONNX file (the batch rewrite serves it),
    or an artifact exported with a dynamic batch axis (`tuned.artifact.batch: any`)."""
    if Path(str(plan.run.get("model", ""))).suffix == ".onnx":
        return True
    return (plan.tuned.get("artifact") or {}).get("batch") == "any"


def _why_not(plan: Plan, request: PlanRequest) -> str:
    """Why the plan cannot serve the request ("" when it can)."""
    artifact = Path(str(plan.run.get("model", "")))
    if request.model is not None and request.model.resolve() != artifact.resolve():
        tuned_for = plan_model_sha256(plan)
        if not tuned_for:
            return (
                "it does not record which model it was tuned for, and"
                f" {request.model.name} is not its artifact"
            )
        if file_sha256(request.model) != tuned_for:
            source = Path(str(plan.tuned.get("source_model") or "another model")).name
            return f"it was tuned for {source} ({tuned_for[:12]}), not {request.model.name}"
    if (request.batch > 1 or request.tile) and not batch_ready(plan):
        asked = f"--batch {request.batch}" if request.batch > 1 else "--tile (a batch of tiles)"
        return (
            f"its artifact {artifact.name} runs one frame per call and {asked} needs a batch"
            " (`visionrt tune` again makes batch-ready artifacts)"
        )
    return ""


def use_depth_plan(
    model: Path,
    chosen: tuple[str, ...],
    short_side: int | None,
    root: Path | None = None,
    fingerprint: dict[str, Any] | None = None,
    device: str = "",
) -> PlanUse:
    """The depth model's cached plan (`tune --depth`) on this machine (or the one `fingerprint`
    describes), unless the user chose its backend or precision (a `device` of the plan's kind
    alone is no other choice, as for the detector), or asks a size its fixed-size artifact
    cannot run. `short_side` None: the user gave no size, and the plan's (its sections'
    `short_side`) runs; with no plan, DEFAULT_SHORT_SIDE."""
    if model.suffix != ".onnx" or not model.is_file():
        return PlanUse(None, "")
    found = cached_plan(model, root, fingerprint)
    if found is None or found[0].tuned.get("task") != "depth":
        gpu = _gpu(model, fingerprint, chosen, device)
        if chosen and gpu.sections is None and not _device_only(chosen, device, "cpu"):
            return PlanUse(None, "")
        side = short_side or DEFAULT_SHORT_SIDE
        where = (
            gpu.where
            if gpu.sections is not None
            else "on ONNX Runtime" + (f" ({gpu.where})" if gpu.where else "")
        )
        lost = _lost_artifact(model, root, fingerprint, depth=True)
        if lost is not None:
            return PlanUse(
                None if gpu.sections is None else {**gpu.sections, "short_side": side},
                f"depth plan {lost[0].name} set aside: its artifact {lost[1]} is missing;"
                f" running it FP32 {where} at short side {side}; `visionrt tune --depth"
                f" {model.name}` again builds it",
            )
        return PlanUse(
            None if gpu.sections is None else {**gpu.sections, "short_side": side},
            f"no tuned depth plan for {model.name} on {_machine(fingerprint)}: running it FP32"
            f" {where} at short side {side}; `visionrt tune --depth {model.name}` plans its"
            " runtime and size",
        )
    plan, path = found
    where = f"depth plan {path.name}"
    if chosen and not _plan_device(chosen, device, plan):
        given = _other_device("depth.device", chosen, device, plan)
        given = given or f"depth.{', depth.'.join(chosen)}"
        return PlanUse(None, f"{where} not used: {given} given", plan)
    fixed = (plan.tuned.get("artifact") or {}).get("fixed_hw")
    tuned_side = int(plan.tuned.get("short_side") or DEFAULT_SHORT_SIDE)
    if fixed and short_side is not None and tuned_side != short_side:
        return PlanUse(
            None,
            f"{where} set aside: its artifact is fixed at {fixed[0]}×{fixed[1]} (short side"
            f" {tuned_side}) and the run asks short side {short_side}; `visionrt tune --depth"
            f" {model.name} --depth-size {short_side}` plans that size",
            plan,
        )
    sections = {key: plan.run[key] for key in RUN_KEYS if key in plan.run}
    sections["short_side"] = tuned_side if short_side is None else short_side
    sections["every"] = plan.depth_every
    tuned_at = "" if short_side in (None, tuned_side) else f" (tuned at short side {tuned_side})"
    return PlanUse(sections, f"{where}: {plan.summary_line()}{tuned_at}", plan)


def _gpu(
    model: Path, fingerprint: dict[str, Any] | None, chosen: tuple[str, ...], device: str
) -> GpuReference:
    """The FP32 reference on this machine's GPU, where there is one and the user chose no
    configuration but, at most, a CUDA device; a cluster node's GPU (`fingerprint`: not this
    machine) is its own worker's to find."""
    # A CUDA device alone runs it too, as no flag does: torch eager in fp32, the registry's
    # pick for `--device cuda`, was slower than both.
    if fingerprint is not None or (chosen and not _device_only(chosen, device, "cuda")):
        return GpuReference(None, "")
    return gpu_reference(model)
