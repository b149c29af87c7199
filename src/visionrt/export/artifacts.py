"""`export_model`: make (or reuse) one optimized artifact of a model (a detector or a depth
model), and measure its fidelity."""

from __future__ import annotations

import errno
import importlib
import importlib.util
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from visionrt.bench.reference import compare_to_reference
from visionrt.errors import (
    ConfigError,
    ModelLoadError,
    SinkError,
    SourceNotFoundError,
    VisionRTError,
)
from visionrt.export.depth import (
    DEPTH_TARGETS,
    DepthFidelityReport,
    compare_depth_to_reference,
    depth_export_size,
    is_depth_model,
)
from visionrt.export.progress import Progress as _Progress
from visionrt.export.targets import TARGETS, BuildJob, Target
from visionrt.fidelity import FidelityReport
from visionrt.models import ModelSpec, cache, demo_model_path, read_model_spec, rebatch_onnx
from visionrt.paths import DEMO_VIDEO, file_sha256
from visionrt.sinks.base import reason

if TYPE_CHECKING:
    from visionrt.export.calibration import CalibrationSet

__all__ = ["TARGETS", "ExportResult", "Target", "export_model"]


@dataclass(frozen=True, slots=True)
class ExportResult:
    """The artifact, its report (what report.json holds), whether it came from the cache, and
    its fidelity against the ONNX Runtime FP32 reference (None when not measured): detection
    AP for a detector, AbsRel/δ<1.25 for a depth model."""

    path: Path
    report: dict[str, Any]
    cached: bool
    fidelity: FidelityReport | DepthFidelityReport | None = None


# What a write that fails for want of room or permission says (an export's other OSErrors are
# not about where it writes).
_CANNOT_WRITE = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS)


@contextmanager
def _writing(root: Path) -> Iterator[None]:
    """A full disk (or quota, or read-only place) while the artifact or its report is written
    as the one-line SinkError naming the cache folder, not a traceback from deep in a
    converter; the staging folder is gone by then (`cache.staging`)."""
    try:
        yield
    except OSError as err:
        if isinstance(err, VisionRTError) or err.errno not in _CANNOT_WRITE:
            raise
        raise SinkError(f"cannot write the artifact in {root}: {reason(err)}") from err


def _runtime_version(target: Target) -> str:
    if target.name.startswith("onnx-"):
        import onnxruntime as ort

        return "ort" + ort.__version__
    if target.name.startswith("openvino"):
        from visionrt.export.openvino_ir import require_openvino, runtime_version

        require_openvino(int8=target.int8)
        return runtime_version(int8=target.int8)
    from visionrt.export.tensorrt import require_tensorrt
    from visionrt.export.tensorrt import runtime_version as tensorrt_version

    require_tensorrt()
    return tensorrt_version()


def _reshape(source: Path, imgsz: tuple[int, int], target: Path) -> Path:
    if importlib.util.find_spec("visionrt.models.reshape") is None:
        raise ConfigError(
            f"--imgsz {imgsz[0]}x{imgsz[1]}: this visionrt has no model reshaping"
            " (visionrt.models.reshape); export at the model's own size"
        )
    reshape = importlib.import_module("visionrt.models.reshape").reshape_detector_onnx
    reshape(source, imgsz[0], imgsz[1], target)
    return target


def _build(
    target: Target,
    source: Path,
    folder: Path,
    imgsz: tuple[int, int] | None,
    videos: Sequence[Path],
    frames: int,
    progress: _Progress,
) -> dict[str, Any]:
    """Write the artifact into `folder`; return the report's build section."""
    spec = read_model_spec(source)
    if imgsz is not None and spec.input_size != imgsz:
        source = _reshape(source, imgsz, folder / "reshaped.onnx")
        spec = read_model_spec(source)
    artifact = folder / target.filename
    built: dict[str, Any] = {"input_hw": list(spec.input_size)}
    source = _any_batch(target, source, spec, folder / "anybatch.onnx", built)
    calibration: CalibrationSet | None = None
    if target.int8:
        from visionrt.export.calibration import calibration_over

        with progress.bar():
            on_frame = progress.task("calibration frames", frames)
            calibration = calibration_over(videos, frames, spec.input_size, on_frame)
        built["calibration"] = {
            "video": str(videos[0]),
            **({"videos": [str(v) for v in videos]} if len(videos) > 1 else {}),
            "frames": len(calibration),
            "indices": calibration.indices,
        }
    started = time.perf_counter()
    built.update(target.build(BuildJob(source, artifact, spec, calibration, progress)))
    built["convert_s"] = round(time.perf_counter() - started, 2)
    (folder / "reshaped.onnx").unlink(missing_ok=True)
    (folder / "anybatch.onnx").unlink(missing_ok=True)
    return built


def _any_batch(
    target: Target, source: Path, spec: ModelSpec, scratch: Path, built: dict[str, Any]
) -> Path:
    """The model to export, rewritten first to run at any batch when its batch axis is fixed at
    1, so that an OpenVINO IR serves `--batch N`, tiles and cameras batched together (one
    calibration, every batch). ONNX artifacts stay as they are (the detector task rewrites an
    ONNX file's batch when it loads; ONNX Runtime's quantizer refuses the rewritten graph's
    shapes), and TensorRT engines keep a fixed batch (an optimization profile would be needed).
    `built["batch"]` says which: "any" or the fixed number."""
    if spec.batch != 1 or not target.name.startswith("openvino"):
        built["batch"] = "any" if spec.batch == -1 else spec.batch
        return source
    try:
        rebatched = rebatch_onnx(source, scratch)
    except ModelLoadError as err:
        built["batch"], built["batch_note"] = 1, str(err)
        return source
    built["batch"] = "any"
    return rebatched


def _build_depth(
    target: Target,
    source: Path,
    folder: Path,
    input_hw: tuple[int, int],
    video: Path,
    frames: int,
    progress: _Progress,
) -> dict[str, Any]:
    """Write a depth model's artifact into `folder` (calibrated at `input_hw` for INT8)."""
    from visionrt.export.depth import build_depth, depth_calibration

    calibration = None
    calibrated: dict[str, Any] = {}
    if target.int8:
        with progress.bar():
            on_frame = progress.task("calibration frames", frames)
            calibration = depth_calibration(video, frames, input_hw, on_frame)
        calibrated["calibration"] = {
            "video": str(video),
            "frames": len(calibration),
            "indices": calibration.indices,
            "preprocess": "depth",
        }
    started = time.perf_counter()  # NNCF shows its own progress
    built = build_depth(target.name, source, folder / target.filename, input_hw, calibration)
    return {**built, **calibrated, "convert_s": round(time.perf_counter() - started, 2)}


def _fidelity(
    target: Target,
    artifact: Path,
    reference: Path,
    video: Path,
    frames: int,
    conf: float,
    progress: _Progress,
) -> FidelityReport:
    options = target.options()
    with progress.status(f"fidelity: FP32 reference vs {target.name} on {frames} frames"):
        return compare_to_reference(
            video, reference, target.backend, options, frames, conf, candidate_model=artifact
        )


def export_model(
    model: str | Path | None,
    target: str,
    calibrate: str | Path | Sequence[str | Path] | None = None,
    frames: int = 300,
    imgsz: tuple[int, int] | None = None,
    out: str | Path | None = None,
    progress: bool = True,
    fidelity_frames: int = 100,
    conf: float = 0.25,
    depth_size: int | tuple[int, int] | None = None,
) -> ExportResult:
    """Export `model` (default: the demo model) to `target`, or reuse the cached artifact.

    INT8 targets calibrate on `frames` frames spread over `calibrate` (default: the demo video;
    several videos share the frames evenly: cameras of several sizes), letterboxed as the
    pipeline does; fidelity is measured on the first. Artifacts live in `out` (default
    ~/.cache/visionrt/artifacts) under a folder named by model hash, target, runtime version and
    settings, next to a report.json. With `fidelity_frames` > 0 the artifact is scored against
    the ONNX Runtime FP32 reference on that many frames of the video (kept in the report).

    A depth model (`is_depth_model`: Depth Anything's layout) is built at one fixed input size,
    `depth_size`: (h, w), or a short side (default 518) with the video's aspect; calibration
    frames are preprocessed the depth way, and fidelity is AbsRel/δ<1.25 against FP32 after
    per-frame scale-and-shift alignment (`DepthFidelityReport`). Depth targets: DEPTH_TARGETS."""
    if target not in TARGETS:
        raise ConfigError(f"export target '{target}': expected one of {', '.join(TARGETS)}")
    spec = TARGETS[target]
    model_path = Path(model) if model else demo_model_path()
    if not model_path.is_file():
        raise ModelLoadError(f"model file not found: {model_path}")
    if model_path.suffix not in (".onnx", ".pt"):
        raise ModelLoadError(f"{model_path}: expected an ONNX model (.onnx) or a .pt checkpoint")
    if model_path.suffix == ".pt":
        from visionrt.export.onnx_variants import require_ultralytics

        require_ultralytics(model_path)
    if imgsz is not None and any(d < 32 or d % 32 for d in imgsz):
        raise ConfigError(f"--imgsz: expected height and width multiples of 32, got {list(imgsz)}")
    if frames < 1:
        raise ConfigError(f"--frames: expected >= 1, got {frames}")
    given = (
        calibrate
        if isinstance(calibrate, Sequence) and not isinstance(calibrate, str)
        else [calibrate or DEMO_VIDEO]
    )
    videos = [Path(v) for v in given]
    if not videos:
        raise ConfigError("calibrate: expected a video, got an empty list")
    video = videos[0]
    for each in videos if spec.int8 or fidelity_frames > 0 else []:
        if not each.is_file():
            raise SourceNotFoundError(f"calibration video not found: {each}")
    depth = model_path.suffix == ".onnx" and is_depth_model(model_path)
    input_hw: tuple[int, int] | None = None
    if depth:
        if target not in DEPTH_TARGETS:
            raise ConfigError(
                f"export target '{target}': {model_path.name} is a depth model; depth models"
                f" export to {', '.join(DEPTH_TARGETS)}"
            )
        if imgsz is not None:
            raise ConfigError("--imgsz reshapes detectors; size a depth model with --depth-size")
        if len(videos) > 1:
            raise ConfigError("--calibrate: a depth model calibrates on one video, got several")
        input_hw = depth_export_size(model_path, depth_size, video if video.is_file() else None)
    elif depth_size is not None:
        raise ConfigError(f"--depth-size: {model_path.name} is not a depth model")
    runtime = _runtime_version(spec)
    model_hash = file_sha256(model_path)
    settings: dict[str, Any] = {"recipe": spec.recipe, "imgsz": list(imgsz) if imgsz else None}
    if input_hw is not None:
        settings["depth_input_hw"] = list(input_hw)
    if spec.int8 and len(videos) > 1:
        fingerprints = [cache.video_fingerprint(v) for v in videos]
        settings["calibration"] = {"videos": fingerprints, "frames": frames}
    elif spec.int8:
        settings["calibration"] = {"video": cache.video_fingerprint(video), "frames": frames}
    if target == "tensorrt":
        from visionrt.export.tensorrt import gpu_name

        settings["gpu"] = gpu_name()
    root = Path(out).expanduser() if out else cache.default_root()
    folder = cache.artifact_dir(root, model_hash, target, runtime, settings)
    show = _Progress(progress)

    found = cache.read_cached(folder, spec.filename)
    cached = found is not None
    if found is not None:
        artifact, report = found
    else:
        started = time.perf_counter()
        with _writing(root), cache.staging(folder) as scratch:
            source = model_path
            if model_path.suffix == ".pt":
                from visionrt.export.onnx_variants import export_from_pytorch

                source = export_from_pytorch(model_path, scratch / "reference.onnx", imgsz)
            if input_hw is not None:
                built = _build_depth(spec, source, scratch, input_hw, video, frames, show)
            else:
                built = _build(spec, source, scratch, imgsz, videos, frames, show)
            report = {
                "model": str(model_path),
                "model_sha256": model_hash,
                "reference_model": str(folder / source.name) if source != model_path else None,
                "target": target,
                "runtime": runtime,
                "settings": settings,
                **built,
                "duration_s": round(time.perf_counter() - started, 2),
            }
            cache.write_report(scratch, report)
        artifact = folder / spec.filename
    result_fidelity: FidelityReport | DepthFidelityReport | None = None
    if fidelity_frames > 0 and input_hw is not None:
        result_fidelity = _depth_fidelity(
            spec, artifact, model_path, report, folder, video, fidelity_frames, input_hw, show
        )
    elif fidelity_frames > 0:
        reference = Path(report.get("reference_model") or model_path)
        previous = report.get("fidelity") or {}
        key = {"video": str(video), "frames": fidelity_frames, "conf": conf}
        if previous.get("measured_on") == key:
            result_fidelity = FidelityReport.from_json(previous)
        else:
            measured = _fidelity(spec, artifact, reference, video, fidelity_frames, conf, show)
            report["fidelity"] = {**measured.to_json(), "measured_on": key}
            with _writing(root):
                cache.write_report(folder, report)
            # As the report holds it, so a cache hit returns exactly the same values.
            result_fidelity = FidelityReport.from_json(report["fidelity"])
    return ExportResult(artifact, report, cached, result_fidelity)


def _depth_fidelity(
    target: Target,
    artifact: Path,
    reference: Path,
    report: dict[str, Any],
    folder: Path,
    video: Path,
    frames: int,
    input_hw: tuple[int, int],
    progress: _Progress,
) -> DepthFidelityReport:
    """The depth artifact's fidelity, measured once per (video, frames, metric) and kept in
    the report as the detector's is."""
    from visionrt.fidelity.depth import FAR_QUANTILE

    previous = report.get("fidelity") or {}
    # The metric's depth cap is part of the key: a report measured without it is stale.
    key = {"video": str(video), "frames": frames, "far_quantile": FAR_QUANTILE}
    if previous.get("kind") == "depth" and previous.get("measured_on") == key:
        return DepthFidelityReport.from_json(previous)
    with progress.status(f"depth fidelity: FP32 reference vs {target.name} on {frames} frames"):
        measured = compare_depth_to_reference(
            video, reference, artifact, target.backend, target.options(), frames, input_hw
        )
    report["fidelity"] = {**measured.to_json(), "measured_on": key}
    cache.write_report(folder, report)
    return DepthFidelityReport.from_json(report["fidelity"])
