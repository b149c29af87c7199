"""Issue #49: INT8 with accuracy control, its metric the project's own (mAP50 against the FP32
ONNX model's boxes on the calibration frames). NNCF's search itself takes minutes on 2 cores
(docs/benchmarks.md has its run on a real camera): here a stand-in for it checks what the export
hands it and does with what it returns."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest
from conftest import INT8_CALIBRATION_FRAMES

from visionrt.export import TARGETS, export_model

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("openvino") is None or importlib.util.find_spec("nncf") is None,
    reason="openvino and nncf not installed (pip install 'visionrt[openvino]')",
)


def test_the_export_scores_by_the_fp32_models_boxes_and_bounds_the_search(
    demo_model: Path, demo_video: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import nncf

    seen: dict[str, Any] = {}

    def accuracy_control(model: Any, calibration: Any, validation: Any, validate: Any,
                         **options: Any) -> Any:  # fmt: skip
        import openvino as ov

        items = list(validation.get_data())
        seen.update(options, items=items, calibration=len(list(calibration.get_inference_data())))
        # The FP32 IR against the FP32 ONNX model: the same boxes, on every frame and on a subset.
        seen["fp32"], _ = validate(ov.compile_model(model, "CPU"), items)
        seen["subset"], _ = validate(ov.compile_model(model, "CPU"), items[:4])
        return model  # nothing quantized: the export saves and scores what it gets

    monkeypatch.setattr(nncf, "quantize_with_accuracy_control", accuracy_control)
    result = export_model(demo_model, "openvino-int8-ac", calibrate=demo_video,
                          frames=INT8_CALIBRATION_FRAMES, out=tmp_path, progress=False,
                          fidelity_frames=0)  # fmt: skip
    assert result.path.name == "model.xml"
    assert seen["items"] == list(range(INT8_CALIBRATION_FRAMES))
    assert seen["calibration"] == INT8_CALIBRATION_FRAMES
    control = result.report["accuracy_control"]
    # The float IR runs bf16 where the CPU has it (as a run's float layers do): near, not at, 1.
    assert seen["fp32"] > 0.95
    assert control["float_ir"] == round(seen["fp32"], 4)
    assert seen["subset"] > 0.9
    assert seen["max_drop"] == pytest.approx(max(0.005, seen["fp32"] - 0.97))
    restorer = seen["advanced_accuracy_restorer_parameters"]
    assert (restorer.max_num_iterations, restorer.ranking_subset_size) == (8, 16)
    assert "/model.22/" in " ".join(seen["ignored_scope"].names)  # the head stays float
    assert control["final"] == control["float_ir"]  # what came back is what is scored
    assert TARGETS["openvino-int8-ac"].options().precision == "int8"
