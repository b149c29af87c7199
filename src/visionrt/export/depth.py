"""Export of a monocular depth model (Depth Anything layout): recognizing one, its fixed input
size, calibration preprocessed the depth way, and the artifact's fidelity against ONNX Runtime
FP32 (AbsRel and δ<1.25 after per-frame scale-and-shift alignment)."""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from visionrt.backends import BackendOptions
from visionrt.errors import ConfigError, ModelLoadError, SourceError
from visionrt.export.calibration import (
    CalibrationSet,
    OrtCalibrationReader,
    Tensor,
    calibration_frames,
)
from visionrt.fidelity.depth import depth_fidelity
from visionrt.models import is_architecture_only, model_metadata
from visionrt.postprocess.depth import depth_plane
from visionrt.preprocess.depth import DEFAULT_SHORT_SIDE, PATCH, depth_input_size, depth_into
from visionrt.sources import SourceOptions, open_source

# Targets with a depth recipe (TensorRT would need an optimization profile for the dynamic
# size). ONNX Runtime's INT8 quantizes a copy fixed at the export size: its symbolic shape
# inference does not complete on the dynamic-size ViT.
DEPTH_TARGETS = ("openvino", "openvino-int8", "onnx-int8")
REFERENCE_BACKEND = "onnxruntime"
ARCHITECTURE_ONLY_NOTE = (
    "architecture-only model (random weights): this fidelity measures the runtime and the"
    " quantizer on this architecture, and says nothing about a trained model's"
)


def is_depth_model(path: Path) -> bool:
    """True for an ONNX model that says it gives depth (`depth` metadata, as
    scripts/build_depth_model.py writes), or whose one output is a map of the input's size:
    [N, H, W] or [N, 1, H, W] with H and W the input's (same values or same symbolic names).
    A detector's [N, 84, 8400] is not, nor is a file ONNX cannot read (the export then
    fails where a detector's would, with the detector's message)."""
    import onnx

    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception:  # onnx raises DecodeError and others for a damaged file
        return False
    if any(prop.key == "depth" for prop in model.metadata_props):
        return True
    graph = model.graph
    initializers = {init.name for init in graph.initializer}
    inputs = [i for i in graph.input if i.name not in initializers]
    if len(inputs) != 1 or len(graph.output) != 1:
        return False

    def dims(value: Any) -> list[str]:
        shape = value.type.tensor_type.shape.dim
        return [d.dim_param if d.dim_param else str(d.dim_value) for d in shape]

    given, made = dims(inputs[0]), dims(graph.output[0])
    if len(given) != 4 or given[1] != "3" or any(d in ("", "0") for d in given[2:]):
        return False
    return made[-2:] == given[2:] and (len(made) == 3 or (len(made) == 4 and made[1] == "1"))


def static_depth_hw(path: Path) -> tuple[int, int] | None:
    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph
    initializers = {init.name for init in graph.initializer}
    shape = next(i for i in graph.input if i.name not in initializers).type.tensor_type.shape
    height, width = (d.dim_value for d in shape.dim[2:4])
    return (height, width) if height > 0 and width > 0 else None


def _video_hw(video: Path) -> tuple[int, int] | None:
    source = open_source(str(video), 0, SourceOptions(mode="file", max_frames=1))
    try:
        size = getattr(source, "size", None)
        if size is None:
            image = next(iter(source.frames())).image
            size = image.shape[:2]
        return int(size[0]), int(size[1])
    except StopIteration:
        return None
    finally:
        source.close()


def depth_export_size(
    model: Path, size: int | tuple[int, int] | None, video: Path | None
) -> tuple[int, int]:
    """The fixed (height, width) a depth artifact is built, calibrated and scored at: the
    model's own static size; else `size` as (h, w); else `size` (default 518) as the short side
    with the long side keeping `video`'s aspect (square without a video), as DepthTask sizes a
    run on that video."""
    static = static_depth_hw(model)
    if static is not None:
        if size is not None and size != static and size != min(static):
            raise ConfigError(
                f"--depth-size {size}: {model.name} is exported at a fixed"
                f" {static[0]}x{static[1]}; export it with dynamic H/W"
            )
        return static
    if isinstance(size, tuple):
        if any(d < PATCH or d % PATCH for d in size):
            raise ConfigError(
                f"--depth-size: expected height and width multiples of {PATCH}, got {list(size)}"
            )
        return size
    short_side = size or DEFAULT_SHORT_SIDE
    source_hw = (_video_hw(video) if video is not None else None) or (short_side, short_side)
    return depth_input_size(source_hw, short_side)


class DepthCalibrationSet(CalibrationSet):
    """Calibration frames handed out as the depth task prepares them: resized to `input_hw`,
    RGB, ImageNet-normalized, (1, 3, H, W) float32."""

    def __getitem__(self, position: int) -> Tensor:
        tensor = np.empty((1, 3, *self.input_hw), np.float32)
        depth_into(self.images[position], tensor[0], self.input_hw)
        return tensor


def depth_calibration(
    video: Path, count: int, input_hw: tuple[int, int], on_frame: Callable[..., None]
) -> DepthCalibrationSet:
    """`count` frames spread over `video`, preprocessed the depth way."""
    frames = calibration_frames(video, count, input_hw, on_frame)
    return DepthCalibrationSet(frames.images, frames.indices, input_hw)


def build_depth(
    target: str,
    source: Path,
    artifact: Path,
    input_hw: tuple[int, int],
    calibration: CalibrationSet | None,
) -> dict[str, Any]:
    """Write the depth artifact for `target`; return the report's build section."""
    if target == "onnx-int8":
        if calibration is None:
            raise ConfigError("onnx-int8: a depth model's INT8 needs calibration frames")
        built = export_depth_onnx_int8(source, artifact, input_hw, calibration)
    else:
        from visionrt.export.openvino_ir import export_depth_ir

        built = export_depth_ir(source, artifact, input_hw, calibration)
    return {
        "input_hw": list(input_hw),
        "task": "depth",
        "architecture_only": is_architecture_only(source),
        **built,
    }


def export_depth_onnx_int8(
    source: Path, target: Path, input_hw: tuple[int, int], frames: CalibrationSet
) -> dict[str, Any]:
    """A depth ONNX → ONNX Runtime static QDQ INT8 at a fixed [1, 3, *input_hw]: the weight
    MatMuls and convolutions quantized (uint8 activations, int8 per-channel weights, MinMax
    ranges from `frames`); LayerNorm, Softmax, GELU and the adds stay float, as in NNCF's
    transformer recipe. Measured on the architecture-only v2-Small at 266×350 (Zen 5, 2 cores):
    103 ms against 129 ms FP32 in the same run (0.80×), far from OpenVINO INT8's 35 ms: ONNX
    Runtime keeps dequantizing around the float ops of a ViT."""
    import onnx
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    model = onnx.load(str(source))
    fixed = [1, 3, *input_hw]
    for dim, size in zip(model.graph.input[0].type.tensor_type.shape.dim, fixed, strict=True):
        dim.ClearField("dim_param")
        dim.dim_value = size
    for output in model.graph.output:  # let shape inference fill the now-static outputs
        for dim in output.type.tensor_type.shape.dim:
            dim.ClearField("dim_param")
    with tempfile.TemporaryDirectory(prefix="visionrt-depth-quant-") as tmp:
        static, prepared = Path(tmp) / "static.onnx", Path(tmp) / "prepared.onnx"
        onnx.save(model, str(static))
        quant_pre_process(str(static), str(prepared), skip_symbolic_shape=True)
        quantize_static(
            str(prepared),
            str(target),
            OrtCalibrationReader(model.graph.input[0].name, frames),
            quant_format=QuantFormat.QDQ,
            per_channel=True,
            activation_type=QuantType.QUInt8,
            weight_type=QuantType.QInt8,
            op_types_to_quantize=["MatMul", "Conv"],
            calibrate_method=CalibrationMethod.MinMax,
        )
    return {
        "quantizer": "onnxruntime",
        "format": "QDQ",
        "activations": "uint8",
        "weights": "int8 per-channel",
        "quantized_ops": ["MatMul", "Conv"],
        "static_input": fixed,
    }


@dataclass(frozen=True, slots=True)
class DepthFidelityReport:
    """An artifact's depth maps against the FP32 reference's over `frames` frames at
    `input_hw`, each frame aligned by least-squares scale and shift (inverse depth for a
    relative model): `abs_rel` and `delta1` are means over the frames, `worst_*` the worst
    frame's; `nonfinite_frames` counts frames whose candidate map held NaN/Inf (those pixels
    are left out). `architecture_only`: the scores say nothing about trained weights."""

    abs_rel: float
    delta1: float
    worst_abs_rel: float
    worst_delta1: float
    frames: int
    input_hw: tuple[int, int]
    nonfinite_frames: int = 0
    architecture_only: bool = False

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "kind": "depth",
            "abs_rel": round(self.abs_rel, 5),
            "delta1": round(self.delta1, 5),
            "worst_abs_rel": round(self.worst_abs_rel, 5),
            "worst_delta1": round(self.worst_delta1, 5),
            "frames": self.frames,
            "input_hw": list(self.input_hw),
            "nonfinite_frames": self.nonfinite_frames,
            "architecture_only": self.architecture_only,
        }
        if self.architecture_only:
            data["note"] = ARCHITECTURE_ONLY_NOTE
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> DepthFidelityReport:
        """The inverse of `to_json` (values as rounded there)."""
        height, width = data["input_hw"]
        return cls(
            abs_rel=float(data["abs_rel"]),
            delta1=float(data["delta1"]),
            worst_abs_rel=float(data["worst_abs_rel"]),
            worst_delta1=float(data["worst_delta1"]),
            frames=int(data["frames"]),
            input_hw=(int(height), int(width)),
            nonfinite_frames=int(data.get("nonfinite_frames", 0)),
            architecture_only=bool(data.get("architecture_only", False)),
        )

    def __str__(self) -> str:
        text = (
            f"AbsRel {self.abs_rel:.4f} (worst {self.worst_abs_rel:.4f}) · δ<1.25"
            f" {self.delta1:.2%} (worst {self.worst_delta1:.2%}) over {self.frames} frames"
        )
        return text + (" · architecture-only (random weights)" if self.architecture_only else "")


@dataclass(frozen=True, slots=True)
class ReferenceMaps:
    """The FP32 reference's raw maps of the first frames of a video, at `input_hw`: computed
    once, scored against by every candidate (a search recomputing them per candidate spent
    most of its time there)."""

    planes: tuple[npt.NDArray[np.float32], ...]
    input_hw: tuple[int, int]
    metric: bool
    architecture_only: bool


def reference_depth_maps(
    video: Path, reference: Path, frames: int, input_hw: tuple[int, int]
) -> ReferenceMaps:
    """`reference` in ONNX Runtime FP32 on the first `frames` frames of `video` at
    `input_hw`."""
    from visionrt.tasks.depth import DepthTask

    task = DepthTask(reference, REFERENCE_BACKEND, BackendOptions(input_size=input_hw))
    planes = []
    source = open_source(str(video), 0, SourceOptions(mode="file", max_frames=frames))
    try:
        buffer = task.new_buffer()
        for frame in source.frames():
            depth_into(frame.image, buffer[0], input_hw)
            plane = depth_plane(task.backend.infer({task.input_name: buffer})[0])
            planes.append(np.array(plane, np.float32))
    finally:
        source.close()
        task.close()
    if not planes:
        raise SourceError(f"fidelity video {video} gave no frames")
    return ReferenceMaps(
        tuple(planes),
        input_hw,
        model_metadata(reference).get("depth", "").startswith("metric"),
        is_architecture_only(reference),
    )


def compare_depth_to_reference(
    video: Path,
    reference: Path | ReferenceMaps,
    candidate: Path,
    backend: str,
    options: BackendOptions,
    frames: int,
    input_hw: tuple[int, int],
) -> DepthFidelityReport:
    """Score `candidate` on `backend` at `input_hw` against the reference model in ONNX
    Runtime FP32 (a model, run here at the same size, or its maps already computed, possibly
    at a larger size) on the first `frames` frames of `video`, each preprocessed the depth
    way. Raw maps at the model's resolution; a candidate run smaller than the reference is
    resized to the reference's (bilinear, as a run maps depth to the frame), so what a
    smaller depth size loses is in the score.

    Raw backend outputs, not DepthTask.infer: its NaN guard would recompute a bad frame in FP32
    and hide exactly what this check is for."""
    import cv2

    from visionrt.tasks.depth import DepthTask

    if not isinstance(reference, ReferenceMaps):
        reference = reference_depth_maps(video, reference, frames, input_hw)
    task = DepthTask(candidate, backend, replace(options, input_size=input_hw))
    if task.input_hw != input_hw:
        task.close()
        raise ModelLoadError(
            f"{candidate.name} runs at {list(task.input_hw)}, not {list(input_hw)}"
        )
    scores: list[Any] = []
    nonfinite = 0
    source = open_source(str(video), 0, SourceOptions(mode="file", max_frames=frames))
    try:
        buffer = task.new_buffer()
        for frame, want in zip(source.frames(), reference.planes, strict=False):
            depth_into(frame.image, buffer[0], input_hw)
            got = depth_plane(task.backend.infer({task.input_name: buffer})[0])
            if got.shape != want.shape:
                # OpenCV's stubs type every result as MatLike (any dtype); resizing keeps float32.
                got = cast(
                    "npt.NDArray[np.float32]",
                    cv2.resize(
                        np.ascontiguousarray(got, np.float32),
                        (want.shape[1], want.shape[0]),
                        interpolation=cv2.INTER_LINEAR,
                    ),
                )
            nonfinite += int(not np.isfinite(got).all())
            scores.append(depth_fidelity(got, want, inverse=not reference.metric))
    finally:
        source.close()
        task.close()
    if not scores:
        raise SourceError(f"fidelity video {video} gave no frames")
    abs_rel = [s.abs_rel for s in scores]
    delta1 = [s.delta1 for s in scores]
    return DepthFidelityReport(
        abs_rel=float(np.nanmean(abs_rel)),
        delta1=float(np.nanmean(delta1)),
        worst_abs_rel=float(np.nanmax(abs_rel)),
        worst_delta1=float(np.nanmin(delta1)),
        frames=len(scores),
        input_hw=input_hw,
        nonfinite_frames=nonfinite,
        architecture_only=reference.architecture_only,
    )
