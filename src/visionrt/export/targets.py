"""The export targets: one declarative row per kind of artifact, carrying the function that
builds a detector's artifact of that kind."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from visionrt.backends import BackendOptions
from visionrt.export.progress import Progress
from visionrt.models import ModelSpec

if TYPE_CHECKING:
    from visionrt.export.calibration import CalibrationSet


@dataclass(frozen=True, slots=True)
class BuildJob:
    """What a builder gets: the ONNX model to convert (already reshaped and rebatched), where
    the artifact goes, the model's facts, the calibration frames (INT8 targets only) and the
    progress display."""

    source: Path
    artifact: Path
    spec: ModelSpec
    calibration: CalibrationSet | None
    progress: Progress


Builder = Callable[[BuildJob], dict[str, Any]]


@dataclass(frozen=True, slots=True)
class Target:
    """One kind of artifact: its file name, whether it needs calibration, the backend (with
    device and precision) that runs it for the fidelity check, and its builder (which returns
    the report's build section)."""

    name: str
    filename: str
    int8: bool
    backend: str
    device: str
    precision: str
    # Bump when the recipe changes, so older cached artifacts are not reused (IR -2: exported
    # to run at any batch).
    recipe: str
    build: Builder

    def options(self) -> BackendOptions:
        """How the fidelity check loads the artifact."""
        return BackendOptions(device=self.device, precision=self.precision)


def _calibrated(job: BuildJob) -> CalibrationSet:
    assert job.calibration is not None, "INT8 targets are calibrated before they are built"
    return job.calibration


def _onnx_fp16(job: BuildJob) -> dict[str, Any]:
    from visionrt.export.onnx_variants import export_fp16

    return export_fp16(job.source, job.artifact)


def _onnx_int8(job: BuildJob, symmetric: bool) -> dict[str, Any]:
    from visionrt.export.onnx_variants import export_int8

    calibration = _calibrated(job)
    with job.progress.bar():
        on_pass = job.progress.task("calibrating (ONNX Runtime)", len(calibration))
        return export_int8(
            job.source, job.artifact, job.spec.input_name, calibration, on_pass, symmetric
        )


def _openvino(job: BuildJob) -> dict[str, Any]:
    from visionrt.export.openvino_ir import export_ir

    return export_ir(job.source, job.artifact)


def _openvino_int8(job: BuildJob) -> dict[str, Any]:
    from visionrt.export.openvino_ir import export_ir_int8

    return export_ir_int8(job.source, job.artifact, _calibrated(job))  # NNCF shows its progress


def _openvino_int8_controlled(job: BuildJob) -> dict[str, Any]:
    from visionrt.export.accuracy_control import export_ir_int8_controlled

    with job.progress.status("INT8 with accuracy control: the costliest layers back in float"):
        return export_ir_int8_controlled(job.source, job.artifact, _calibrated(job), job.spec)


def _tensorrt(job: BuildJob) -> dict[str, Any]:
    from visionrt.export.tensorrt import export_engine

    with job.progress.status("building the TensorRT engine (minutes)"):
        return export_engine(job.source, job.artifact)


TARGETS: dict[str, Target] = {
    t.name: t
    for t in (
        Target(
            "onnx-fp16", "model.onnx", False, "onnxruntime", "cpu", "fp16", "fp16-keepio-1",
            _onnx_fp16,
        ),
        Target(
            "onnx-int8", "model.onnx", True, "onnxruntime", "cpu", "int8", "qdq-u8s8-pc-1",
            partial(_onnx_int8, symmetric=False),
        ),
        # For TensorRT (`--backend tensorrt --precision int8`); its fidelity is checked on the
        # QDQ graph with ONNX Runtime's CPU kernels, which TensorRT's own only approximate.
        Target(
            "onnx-int8-sym", "model.onnx", True, "onnxruntime", "cpu", "int8", "qdq-s8s8-conv-1",
            partial(_onnx_int8, symmetric=True),
        ),
        Target(
            "openvino", "model.xml", False, "openvino", "cpu", "fp32", "ir-fp32-2", _openvino
        ),
        Target(
            "openvino-int8", "model.xml", True, "openvino", "cpu", "int8", "nncf-mixed-2",
            _openvino_int8,
        ),
        # INT8 where it holds the budget, float where quantizing cost the most (issue #49).
        Target(
            "openvino-int8-ac", "model.xml", True, "openvino", "cpu", "int8", "nncf-mixed-ac-1",
            _openvino_int8_controlled,
        ),
        Target(
            "tensorrt", "model.engine", False, "tensorrt", "cuda", "fp16", "trt-fp16-1",
            _tensorrt,
        ),
    )
}  # fmt: skip
