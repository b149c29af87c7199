"""Sources of several frame sizes each run what the plan proved on their size: one detector per
distinct configuration, loaded once and batching its own sources (issue #32: a run of cameras
of two sizes ran every camera at the safest size's configuration, at half the speed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import run_cli, write_tiny_detector, write_video
from test_geometry import _no_check, _plan, _use

from visionrt import Pipeline, PipelineOptions
from visionrt.accuracy import geometry
from visionrt.accuracy.geometry import settle
from visionrt.backends import BackendOptions
from visionrt.config import load_config, pipeline_options
from visionrt.config.sizes import SizedDetector
from visionrt.errors import ConfigError
from visionrt.pipeline.degrade import Degrader, Rung
from visionrt.pipeline.schedule import Decision, Scheduler
from visionrt.plans import machine_fingerprint, plan_path
from visionrt.plans.proof import record
from visionrt.sources import SourceOptions

WIDE, SMALL = (96, 128), (48, 64)


@pytest.fixture
def clips(tmp_path: Path) -> dict[str, Path]:
    return {
        "wide": write_video(tmp_path / "wide.mp4", frames=12, width=128, height=96),
        "small": write_video(tmp_path / "small.mp4", frames=12, width=64, height=48),
        "small2": write_video(tmp_path / "small2.mp4", frames=10, width=64, height=48),
    }


@pytest.fixture
def other_model(tmp_path: Path) -> Path:
    """A detector whose one box is elsewhere (centred at (16, 16) of its 64×64 input)."""
    return write_tiny_detector(tmp_path / "other.onnx", [(16, 16, 10, 10, 0.9, 0.0)])


def test_each_size_keeps_what_was_proven_on_it(
    tiny_model: Path, clips: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    plan = _plan(tiny_model, tiny_model)
    record(plan, WIDE, {"run": "plan", "label": "the plan", "fidelity": 0.97, "frames": 60})
    change = {"inference": {"input_size": [96, 96]}}
    record(plan, SMALL, {"run": change, "label": "resized", "fidelity": 0.96, "frames": 60})
    monkeypatch.setattr(geometry, "prove", _no_check)
    both = settle(_use(plan), [str(clips["wide"]), str(clips["small"]), "rtsp://127.0.0.1:1/cam"])
    # The safest choice still runs where the size is not known; the plan's own size keeps it.
    assert both.sections is not None
    assert both.sections["inference"]["input_size"] == [96, 96]
    assert both.by_size == {WIDE: _use(plan).sections}
    assert "cam: size unknown before the run, resized runs unproven there" in both.note
    # A size that fell back to the reference: the other size still runs the plan.
    record(plan, SMALL, {"run": "reference", "label": "the FP32 reference", "fidelity": 1.0})
    mixed = settle(_use(plan), [str(clips["wide"]), str(clips["small"])])
    assert mixed.sections is None
    assert mixed.by_size == {WIDE: _use(plan).sections}
    assert mixed.runs
    # One size: nothing by size.
    assert settle(_use(plan), [str(clips["wide"])]).by_size == {}


def _run(pipeline: Pipeline) -> list:
    try:
        return list(pipeline)
    finally:
        pipeline.close()


def test_sources_run_their_sizes_detector_one_per_configuration(
    tiny_model: Path, other_model: Path, clips: dict[str, Path]
) -> None:
    sized = SizedDetector(str(other_model), "onnxruntime")
    pipeline = Pipeline(
        [f"wide={clips['wide']}", f"a={clips['small']}", f"b={clips['small2']}"],
        tiny_model,
        "onnxruntime",
        options=pipeline_options(track=True),
        plan=False,
        sizes={SMALL: sized},
    )
    results = _run(pipeline)
    assert len(pipeline.parts.sized) == 1  # two sources of one size: one more detector
    assert pipeline.parts.schedule == [[0], [1], [1]]
    by_source: dict[str, list] = {"wide": [], "a": [], "b": []}
    for result in results:
        by_source[pipeline.names[result.frame.source_id]].append(result)
    assert {name: len(found) for name, found in by_source.items()} == {"wide": 12, "a": 12, "b": 10}
    for result in by_source["wide"]:
        assert "infer" in result.timings
        assert "detect2_infer" not in result.timings
        # The run's own detector: its box centred at (32, 32) of 64×64 → (64, 48) of 128×96.
        assert result.detections.xyxy[0].tolist() == pytest.approx([44, 38, 84, 58], abs=1)
    for result in by_source["a"] + by_source["b"]:
        assert "detect2_infer" in result.timings
        assert "infer" not in result.timings
        # The other size's detector: (16, 16) of 64×64 → (16, 8) of 64×48, with its track.
        assert result.detections.xyxy[0].tolist() == pytest.approx([11, 3, 21, 13], abs=1)
        assert result.tracks is not None
        assert len(result.tracks) == 1
    summary = pipeline.summary()
    assert summary.frames_out == summary.frames_in == 34
    rows = summary.backend["detectors"]
    assert [(r["sources"], r["sizes"]) for r in rows] == [
        (["wide"], ["96x128"]),
        (["a", "b"], ["48x64"]),
    ]
    assert rows[1]["label"] == "onnxruntime fp32 64×64 (other.onnx)"
    assert {s["name"]: s["detector"] for s in summary.sources} == {
        "wide": "onnxruntime fp32 64×64 (tiny.onnx)",
        "a": "onnxruntime fp32 64×64 (other.onnx)",
        "b": "onnxruntime fp32 64×64 (other.onnx)",
    }
    assert any(n.startswith("detectors: wide (96×128) on onnxruntime") for n in summary.notes)


def test_a_size_whose_detector_is_the_runs_own_loads_none_more(
    tiny_model: Path, clips: dict[str, Path]
) -> None:
    same = SizedDetector(str(tiny_model), "onnxruntime", BackendOptions())
    absent = SizedDetector(str(tiny_model), "onnxruntime", BackendOptions(input_size=(96, 96)))
    pipeline = Pipeline(
        [str(clips["wide"]), str(clips["small"])],
        tiny_model,
        "onnxruntime",
        plan=False,
        sizes={SMALL: same, (720, 1280): absent},  # no source of 720×1280: not loaded
        source_options=SourceOptions(max_frames=2),
    )
    results = _run(pipeline)
    assert pipeline.parts.sized == []
    assert len(results) == 4
    assert "detectors" not in pipeline.summary().backend


def test_the_audit_watches_every_sources_detector(
    tiny_model: Path, other_model: Path, clips: dict[str, Path]
) -> None:
    # The run's own detector is its own reference; the other size's is not: still audited.
    pipeline = Pipeline(
        [f"wide={clips['wide']}", f"small={clips['small']}"],
        tiny_model,
        "onnxruntime",
        options=pipeline_options(audit=0.5, audit_reference=str(tiny_model)),
        plan=False,
        sizes={SMALL: SizedDetector(str(other_model), "onnxruntime")},
    )
    _run(pipeline)
    audit = pipeline.summary().audit["sources"]
    assert audit["wide"]["fidelity"]["map50"] == 1.0
    assert audit["small"]["fidelity"]["map50"] == 0.0  # the other box is not the reference's


def test_a_ladders_variant_replaces_only_the_runs_own_detector() -> None:
    rungs = [Rung(1, 0, "as configured"), Rung(1, 1, "input 512")]
    degrader = Degrader(0.1, rungs, window=1.0)
    degrader.level = 1
    # Source 0 runs the run's own detector (lane 0), source 1 its size's (lane 2).
    scheduler = Scheduler([[0, 1], [2]], PipelineOptions(), [True, True], degrader, variants=[3])
    assert scheduler.decide(0, 0.0) == Decision((3, 1), full=True)
    assert scheduler.decide(1, 0.0) == Decision((2,), full=True)


def test_the_sizes_section_is_read_and_checked(tiny_model: Path) -> None:
    cfg = load_config(
        overrides=[f"sizes.480x640.model={tiny_model}", "sizes.480x640.inference.precision=bf16"]
    )
    assert cfg.sizes == {
        "480x640": SizedDetector(str(tiny_model), "", BackendOptions(precision="bf16"))
    }
    for bad, says in (
        (["sizes.480.model=m.onnx"], "sizes: '480': expected a frame size HEIGHTxWIDTH"),
        (["sizes.480x640.backend=openvino"], "sizes.480x640: expected a section with a model"),
        (["sizes.480x640.model=m.onnx", "sizes.480x640.colour=red"], "unknown option"),
    ):
        with pytest.raises(ConfigError, match=says):
            load_config(overrides=bad)


def test_run_gives_each_size_its_plans_configuration(
    tiny_model: Path,
    other_model: Path,
    clips: dict[str, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    root = tmp_path / "plans"
    monkeypatch.setenv("VISIONRT_PLANS", str(root))
    plan = _plan(tiny_model, tiny_model)
    record(plan, WIDE, {"run": "plan", "label": "the plan (64×64)", "fidelity": 0.97, "frames": 60})
    change = {"model": str(other_model), "inference": {"precision": "fp32"}}
    record(plan, SMALL, {"run": change, "label": "other", "fidelity": 0.96, "frames": 60})
    plan.save(plan_path(tiny_model, machine_fingerprint(), root))
    out = tmp_path / "out"
    args = ["run", f"wide={clips['wide']}", f"small={clips['small']}", "--model", str(tiny_model)]
    code, err = run_cli([*args, "--out", str(out), "--no-video", "--quiet"], capsys)
    assert code == 0, err
    # The safest choice (the other size's) is the run's own; the plan's size runs the plan.
    assert "detectors: small (48×64) on onnxruntime fp32 64×64 (other.onnx); wide (96×128) on" in (
        err.replace("\n", " ")
    )
    summary = json.loads((out / "summary.json").read_text())
    assert {s["name"]: (s["detector"], s["frames_out"]) for s in summary["sources"]} == {
        "wide": ("onnxruntime fp32 64×64 (tiny.onnx)", 12),
        "small": ("onnxruntime fp32 64×64 (other.onnx)", 12),
    }
    lines = (out / "detections.jsonl").read_text().splitlines()
    assert len(lines) == 24
