"""The detector `--motion regions` runs on its windows under a plan whose artifact is made at one
size (the region model tune made, the same export at the region size from the export cache, or
else the FP32 reference resized: a run builds nothing), with one line saying which."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from visionrt.backends import ROWS
from visionrt.config.pipeline import PipelineOptions
from visionrt.errors import ConfigError, ModelLoadError
from visionrt.models import demo_model_path, read_model_spec
from visionrt.paths import DEMO_VIDEO
from visionrt.plans import Plan


def planned_regions(
    options: PipelineOptions, plan: Plan | None, model: str | Path, asked: str | Path | None = None
) -> tuple[PipelineOptions, str]:
    """`options` with `motion_region_model` set where regions run under a plan and the user
    named no region model, and the line saying which; as they were otherwise. `model` is the
    file the run loads (the plan's artifact), `asked` the model the user named (an ONNX file:
    the plan's FP32 reference, as the plan's `source_model` is).

    In order: the region model tune made for the plan, the same export made at the region size
    in the export cache (`visionrt export --imgsz`), and for an artifact that cannot be resized
    (an OpenVINO IR, say) the FP32 reference resized, on the plan's runtime at fp32 — a
    ConfigError where that runtime would build an engine for it (TensorRT)."""
    if plan is None or options.motion.mode != "regions" or options.motion.region_model:
        return options, ""
    from visionrt.models.cache import default_root, export_report, sized_export

    artifact, side = Path(model), options.motion.region
    square = f"{side}×{side}"
    made = str((plan.tuned.get("motion") or {}).get("region_model") or "")
    if made and _made_at(Path(made), side):
        note = f"motion regions: the {square} region model tune made for the plan ({made})"
        return replace(options, motion=replace(options.motion, region_model=made)), note
    report = export_report(artifact) or {}
    target = str(report.get("target") or (plan.tuned.get("artifact") or {}).get("export") or "")
    cached = sized_export(artifact, (side, side), (default_root(),))
    if cached is not None:
        note = f"motion regions: the {square} {target} export from the cache ({cached})"
        return replace(options, motion=replace(options.motion, region_model=str(cached))), note
    reference = _reference(plan, asked)
    if artifact.suffix == ".onnx" or reference is None:
        return options, ""  # resized as it is; or nothing else to run (the task says why)
    size = report.get("input_hw") or plan.tuned.get("input_hw") or ["?", "?"]
    backend = str(plan.run.get("backend") or "its runtime")
    command = _export_command(reference, target, side, report, plan)
    if any(row.name == backend and reference.suffix in row.builds_from for row in ROWS):
        raise ConfigError(
            f"--motion regions: {artifact.name} is made at {size[0]}×{size[1]} and no {square}"
            f" export of it is cached; {backend} would build an engine for the FP32 reference,"
            f" which a run does not: `{command}` makes one"
        )
    note = (
        f"motion regions: {artifact.name} is made at {size[0]}×{size[1]} and no {square}"
        f" {target + ' ' if target else ''}export of it is cached, so the windows run the FP32"
        f" reference {reference.name} resized to {square} on {backend} (a run builds nothing);"
        f" `{command}` makes one, which later runs take"
    )
    return replace(options, motion=replace(options.motion, region_model=str(reference))), note


def _made_at(path: Path, side: int) -> bool:
    """The file is there and runs windows of `side` pixels (an ONNX file is resized)."""
    if not path.is_file():
        return False
    try:
        return path.suffix == ".onnx" or read_model_spec(path).input_size == (side, side)
    except ModelLoadError:
        return False


def _reference(plan: Plan, asked: str | Path | None) -> Path | None:
    """The plan's FP32 reference: the ONNX model the user named, or the one it was tuned from."""
    for candidate in (asked, plan.tuned.get("source_model")):
        path = Path(str(candidate or ""))
        if candidate and path.suffix == ".onnx" and path.is_file():
            return path
    return None


def _export_command(
    reference: Path, target: str, side: int, report: dict[str, object], plan: Plan
) -> str:
    """`visionrt export [MODEL] --to TARGET --imgsz SxS [--calibrate VIDEO]`: the plan's own
    export at the region size (the model and video left out where they are the demo's)."""
    try:
        demo = demo_model_path().resolve()
    except ModelLoadError:
        demo = None
    words = ["visionrt export"]
    words += [] if reference.resolve() == demo else [str(reference)]
    words += [f"--to {target or 'openvino-int8'}", f"--imgsz {side}x{side}"]
    calibration = report.get("calibration")
    video = (calibration.get("video") if isinstance(calibration, dict) else None) or (
        plan.tuned.get("video")
    )
    if video and Path(str(video)) != DEMO_VIDEO:
        words.append(f"--calibrate {video}")
    return " ".join(words)
