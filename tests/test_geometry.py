"""A plan runs what was proven on each source's frame size: its record for that size, or the first
configuration that holds the budget on the source's first frames (then recorded)."""

from __future__ import annotations

import shutil
from pathlib import Path

import cv2
import numpy as np
import pytest
from conftest import run_cli, write_tiny_detector, write_video

from visionrt.accuracy import check, geometry
from visionrt.accuracy.geometry import settle, source_sizes
from visionrt.cli.tune import tune_sources
from visionrt.config import pipeline_options
from visionrt.plans import Plan, PlanUse, machine_fingerprint, plan_path
from visionrt.plans.proof import proof, record, sections_for
from visionrt.plans.store import file_sha256

SECTIONS = {
    "model": "/artifacts/model.xml",
    "backend": "openvino",
    "inference": {"precision": "int8", "settings": {"hint": "latency"}, "input_size": None},
}


def _plan(model: Path, artifact: Path, backend: str = "onnxruntime", **tuned: object) -> Plan:
    return Plan(
        run={"model": str(artifact), "backend": backend, "inference": {"precision": "fp32"}},
        tuned={
            "at": "2026-11-24T10:00:00+00:00",
            "measured": {"fps": 50.0, "fidelity": 0.98, "frames": 300},
            "input_hw": [64, 64],
            "source_model": str(model),
            "source_sha256": file_sha256(model),
            "limits": {"min_fidelity": 0.95},
            "fingerprint": machine_fingerprint(),
            **tuned,
        },
    )


def _use(plan: Plan, path: Path | None = None) -> PlanUse:
    sections = {k: plan.run[k] for k in ("model", "backend", "inference")}
    return PlanUse(sections, "plan p: …", plan, path)


@pytest.fixture
def videos(tmp_path: Path) -> dict[str, Path]:
    return {
        "wide": write_video(tmp_path / "wide.mp4", frames=12, width=128, height=96),
        "small": write_video(tmp_path / "small.mp4", frames=12, width=64, height=48),
    }


def test_a_proof_names_what_runs_over_the_plans_sections() -> None:
    assert sections_for(SECTIONS, {"run": "plan"}) == SECTIONS
    assert sections_for(SECTIONS, {"run": "reference"}) is None
    change = {"model": "/artifacts/own/model.xml", "inference": {"input_size": [640, 640]}}
    resized = sections_for(SECTIONS, {"run": change})
    assert resized is not None
    assert resized["model"] == "/artifacts/own/model.xml"
    # The run's own settings (here the live hint) still apply to what runs instead.
    assert resized["inference"] == {**SECTIONS["inference"], "input_size": [640, 640]}


def test_sizes_are_read_from_files_and_cameras_are_not_opened(videos: dict[str, Path]) -> None:
    sizes, unknown = source_sizes(
        [f"a={videos['wide']}", str(videos["small"]), str(videos["wide"]), "rtsp://cam/1",
         "missing.mp4"]
    )  # fmt: skip
    assert sizes == {(96, 128): str(videos["wide"]), (48, 64): str(videos["small"])}
    assert unknown == ["rtsp://cam/1"]  # a missing file is the run's own error, not a note


def test_proven_sizes_run_their_record_without_a_check(
    tiny_model: Path, videos: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    plan = _plan(tiny_model, tiny_model)
    record(plan, (96, 128), {"run": "plan", "label": "the plan", "fidelity": 0.97, "frames": 60})
    change = {"inference": {"input_size": [96, 96]}}
    record(plan, (48, 64), {"run": change, "label": "resized", "fidelity": 0.96, "frames": 60})
    monkeypatch.setattr(geometry, "prove", _no_check)
    one = settle(_use(plan), [str(videos["wide"])])
    assert one.sections == _use(plan).sections
    assert "96×128: the plan, fidelity 0.970 over 60 frames" in one.note
    # Sources of two sizes share one detector: the safer of their records runs.
    both = settle(_use(plan), [str(videos["wide"]), str(videos["small"])])
    assert both.sections is not None
    assert both.sections["inference"]["input_size"] == [96, 96]
    record(plan, (48, 64), {"run": "reference", "label": "the FP32 reference", "fidelity": 1.0})
    assert settle(_use(plan), [str(videos["wide"]), str(videos["small"])]).sections is None


def test_an_unproven_size_is_checked_once_and_recorded(
    tiny_model: Path, videos: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    artifact = tmp_path / "same.onnx"
    shutil.copy(tiny_model, artifact)  # the same detector: it reproduces the reference
    plan = _plan(tiny_model, artifact)
    path = plan.save(tmp_path / "plan.yaml")
    lines: list[str] = []
    use = settle(_use(plan, path), [str(videos["wide"])], say=lines.append, frames=8)
    assert lines == [
        f"checking the plan on 96×128 (8 frames of {videos['wide'].name})",
        f"proved 96×128: recorded in the plan {path}",
    ]
    assert use.sections == _use(plan).sections
    assert "(recorded in the plan)" in use.note
    saved = proof(Plan.load(path), (96, 128))
    assert saved is not None
    assert saved["run"] == "plan"
    assert saved["fidelity"] == 1.0
    assert saved["frames"] == 8
    assert saved["letterbox"] == {"scale": 0.5, "top": 8, "left": 0}
    monkeypatch.setattr(geometry, "prove", _no_check)
    again = settle(_use(Plan.load(path), path), [str(videos["wide"])])
    assert again.sections == _use(plan).sections
    assert "recorded" not in again.note


def test_a_live_source_runs_the_plan_unproven_and_says_so(tiny_model: Path) -> None:
    plan = _plan(tiny_model, tiny_model)
    use = settle(_use(plan), ["rtsp://127.0.0.1:1/cam"])
    assert use.sections == _use(plan).sections
    assert "cam: size unknown before the run, the plan runs unproven" in use.note


def test_a_plan_whose_model_is_gone_runs_unproven_and_records_nothing(
    tiny_model: Path, videos: dict[str, Path], tmp_path: Path
) -> None:
    model = tmp_path / "gone.onnx"
    shutil.copy(tiny_model, model)
    plan = _plan(model, tiny_model)
    model.unlink()
    use = settle(_use(plan, tmp_path / "plan.yaml"), [str(videos["wide"])])
    assert use.sections is not None
    assert "unproven" in use.note
    assert proof(plan, (96, 128)) is None
    assert not (tmp_path / "plan.yaml").exists()


def test_a_bad_artifact_is_refused_on_the_first_frames(
    tiny_model: Path, videos: dict[str, Path], tmp_path: Path
) -> None:
    # Another fixed box than the reference's: nothing it finds is what the reference finds.
    bad = write_tiny_detector(tmp_path / "bad.onnx", [(16, 16, 10, 10, 0.9, 0.0)])
    plan = _plan(tiny_model, bad)
    use = settle(_use(plan), [str(videos["wide"])], frames=6)
    assert use.sections is None  # the reference runs
    entry = proof(plan, (96, 128))
    assert entry is not None
    assert entry["run"] == "reference"
    assert entry["tried"][0] == {"label": "the plan (64×64)", "fidelity": 0.0}
    assert "the plan (64×64) 0.000 below budget on 6 frames → the FP32 reference" in (use.note)


@pytest.fixture(scope="module")
def pan_clip(tmp_path_factory: pytest.TempPathFactory, demo_video: Path) -> Path:
    """The first 12 frames of vtest.avi (768×576) cropped to 640×480: another geometry."""
    path = tmp_path_factory.mktemp("clips") / "pan.avi"
    capture = cv2.VideoCapture(str(demo_video))
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"MJPG"), 10, (640, 480))
    for _ in range(12):
        ok, image = capture.read()
        assert ok
        writer.write(np.ascontiguousarray(image[48:528, 64:704]))
    writer.release()
    return path


def _perturbed(model: Path, out: Path) -> Path:
    """The demo detector with 30 % noise on its head's weights: a deliberately bad artifact."""
    import onnx
    from onnx import numpy_helper

    graph = onnx.load(str(model))
    rng = np.random.default_rng(0)
    for init in graph.graph.initializer:
        if "model.22" in init.name and init.name.endswith("weight"):
            weights = numpy_helper.to_array(init)
            noise = 1 + 0.3 * rng.standard_normal(weights.shape)
            init.CopyFrom(
                numpy_helper.from_array((weights * noise).astype(weights.dtype), init.name)
            )
    onnx.save(graph, str(out))
    return out


@pytest.mark.slow
def test_the_demo_detector_with_a_bad_artifact_is_refused(
    demo_model: Path, pan_clip: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Both plans are checked against the same FP32 reference on the same frames: run it once.
    runs: dict[tuple, tuple] = {}
    reference = check.reference_detections

    def reference_once(*args: object) -> tuple:
        if args not in runs:
            runs[args] = reference(*args)
        return runs[args]

    monkeypatch.setattr(check, "reference_detections", reference_once)
    bad = _perturbed(demo_model, tmp_path / "bad.onnx")
    plan = _plan(demo_model, bad, input_hw=[640, 640])
    use = settle(_use(plan), [str(pan_clip)], frames=12)
    entry = proof(plan, (480, 640))
    assert entry is not None
    assert entry["frames"] == 12
    # First its configuration at the size aligned for 640×480 (512×640), then at its own size.
    assert [t["label"] for t in entry["tried"]] == [
        "the plan's configuration at 512×640", "the plan (640×640)", "the FP32 reference"
    ]  # fmt: skip
    assert max(t["fidelity"] for t in entry["tried"][:2]) < 0.95  # under the budget: refused
    assert entry["run"] == "reference"
    assert use.sections is None
    # The demo detector itself, named as a plan, holds the budget at the aligned size.
    good = _plan(demo_model, demo_model, input_hw=[640, 640])
    settle(_use(good), [str(pan_clip)], frames=12)
    kept = proof(good, (480, 640))
    assert kept is not None
    assert kept["run"] == {"inference": {"input_size": [512, 640]}}
    assert kept["fidelity"] >= 0.95


def test_tune_takes_several_videos_and_folders(tmp_path: Path, videos: dict[str, Path]) -> None:
    folder = tmp_path / "clips"
    folder.mkdir()
    for name in ("b.avi", "a.mp4", "notes.txt"):
        (folder / name).write_bytes(b"")
    images = tmp_path / "images"
    images.mkdir()
    given = [str(videos["wide"]), str(folder), str(images)]
    assert tune_sources(given) == [
        str(videos["wide"]), str(folder / "a.mp4"), str(folder / "b.avi"), str(images)
    ]  # fmt: skip


def test_a_cached_plan_run_on_another_size_goes_through_the_check(
    tiny_model: Path, videos: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from test_plan_flags import _values

    from visionrt.cli.run_config import configure_run

    root = tmp_path / "plans"
    monkeypatch.setenv("VISIONRT_PLANS", str(root))
    bad = write_tiny_detector(tmp_path / "bad.onnx", [(16, 16, 10, 10, 0.9, 0.0)])
    _plan(tiny_model, bad).save(plan_path(tiny_model, machine_fingerprint(), root))
    values = _values(model=str(tiny_model), sources=[str(videos["wide"])])
    cfg, notes = configure_run(None, False, None, None, values)
    assert cfg.model == str(tiny_model)
    assert cfg.backend in ("", "auto", "onnxruntime")
    assert "→ the FP32 reference (1.000) (recorded in the plan)" in notes


def test_a_run_says_it_recorded_a_proof_before_anything_can_stop_it(
    tiny_model: Path,
    videos: dict[str, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Issue #47: a plain run on a new frame size writes its proof into the cached plan, and said
    so only in the notes printed once the model had loaded: a run that stopped before them (here
    its output folder cannot be made) had changed the plan without a word."""
    root = tmp_path / "plans"
    monkeypatch.setenv("VISIONRT_PLANS", str(root))
    artifact = tmp_path / "same.onnx"
    shutil.copy(tiny_model, artifact)
    path = _plan(tiny_model, artifact).save(plan_path(tiny_model, machine_fingerprint(), root))
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    args = ["run", str(videos["wide"]), "-m", str(tiny_model), "--out", str(blocker / "out")]
    exit_code, error = run_cli(args, capsys)
    assert exit_code != 0
    assert "cannot write output" in error
    assert proof(Plan.load(path), (96, 128)) is not None
    assert f"proved 96×128: recorded in the plan {path}" in error


def _no_check(*_args: object, **_kwargs: object) -> dict:
    raise AssertionError("a proven size must not be checked again")


def test_tune_records_the_size_it_proved_the_plan_on(
    tiny_model: Path, small_video: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from visionrt.tune import Limits, tuner
    from visionrt.tune.search import Measurement, SearchResult, Trial

    def search(space: list, *_args: object, **_kwargs: object) -> SearchResult:
        trial = Trial(space[0], [Measurement(10.0, 5.0, 9.0, 1.0, 60)])
        return SearchResult([trial], trial, trial)

    monkeypatch.setattr(tuner, "successive_halving", search)
    outcome = tuner.tune(small_video, tiny_model, Limits(), plans_root=tmp_path)
    assert outcome.path is not None
    entry = proof(Plan.load(outcome.path), (96, 128))
    assert entry is not None
    assert entry["run"] == "plan"
    assert (entry["fidelity"], entry["frames"], entry["by"]) == (1.0, 60, "tune")
    assert entry["source"] == small_video.name
    assert entry["letterbox"] == {"scale": 0.5, "top": 8, "left": 0}


def _audit_report(fidelity: float, event: bool = True) -> dict:
    return {
        "reference": "reference.onnx",
        "budget": {"min_fidelity": 0.95},
        "events": [{"source": "wide", "metric": "fidelity"}] if event else [],
        "sources": {"wide": {"fidelity": {"map50": fidelity, "frames": 16}}},
    }


def test_an_audit_below_budget_refutes_the_proof_for_the_next_run(
    tiny_model: Path, videos: dict[str, Path], tmp_path: Path
) -> None:
    from visionrt.accuracy.geometry import remember_audit

    plan = _plan(tiny_model, tiny_model)
    tuned = {"run": "plan", "label": "the plan (64×64)", "fidelity": 0.98, "frames": 300}
    record(plan, (96, 128), {**tuned, "by": "tune"})
    path = plan.save(tmp_path / "plan.yaml")
    sizes = {"wide": (96, 128)}
    # No event over the window, or a whole run within the budget: the proof stands.
    assert remember_audit(_use(plan, path), sizes, _audit_report(0.80, event=False)) == []
    assert remember_audit(_use(plan, path), sizes, _audit_report(0.97)) == []
    assert remember_audit(_use(plan, None), sizes, _audit_report(0.80)) == []  # not our file
    lines = remember_audit(_use(plan, path), sizes, _audit_report(0.80))
    assert lines == [
        "geometry: 96×128: the audit measured 0.800 < 0.95 over 16 frames of wide for the plan"
        " (64×64): the next run on this size checks again, past it"
    ]
    refuted = proof(Plan.load(path), (96, 128))
    assert refuted is not None
    assert refuted["refuted"]["fidelity"] == 0.80
    # The next run checks again and does not try what the audit refuted.
    use = settle(_use(Plan.load(path), path), [str(videos["wide"])], frames=4)
    assert use.sections is None  # nothing else to try for this plan: the reference
    entry = proof(Plan.load(path), (96, 128))
    assert entry is not None
    assert entry["tried"][0] == {"label": "the plan (64×64)", "refuted": True}
    assert "the plan (64×64) (refuted by an audit)" in use.note


def test_a_run_whose_audit_fails_refutes_its_plan(
    tiny_model: Path, small_video: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from visionrt import Pipeline

    root = tmp_path / "plans"
    monkeypatch.setenv("VISIONRT_PLANS", str(root))
    bad = write_tiny_detector(tmp_path / "bad.onnx", [(16, 16, 10, 10, 0.9, 0.0)])
    plan = _plan(tiny_model, bad)
    tuned = {"run": "plan", "label": "the plan (64×64)", "fidelity": 0.98, "frames": 300}
    record(plan, (96, 128), {**tuned, "by": "tune"})  # proven: no check before the run
    path = plan.save(plan_path(tiny_model, machine_fingerprint(), root))
    options = pipeline_options(audit=0.5, audit_window=5)
    pipeline = Pipeline([f"wide={small_video}"], tiny_model, options=options)
    try:
        for _ in pipeline:
            pass
    finally:
        pipeline.close()
    summary = pipeline.summary()
    assert summary.audit["events"], summary.audit
    assert any("the next run on this size checks again" in note for note in summary.notes)
    refuted = proof(Plan.load(path), (96, 128))
    assert refuted is not None
    assert refuted["refuted"]["fidelity"] == 0.0


def test_a_runs_check_builds_no_artifact_and_says_what_makes_it(
    tiny_model: Path, videos: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    import visionrt.export
    from visionrt.tune import evaluate

    class Built:
        path = tiny_model

    exported: list[tuple] = []

    def export_model(*args: object, **kwargs: object) -> Built:
        exported.append((args, kwargs))
        return Built()

    monkeypatch.setattr(visionrt.export, "export_model", export_model)
    monkeypatch.setattr(evaluate, "export_model", export_model)
    # An artifact plan at 32×64: on 96×128 its configuration runs at the model's 64×64, an
    # export of its recipe at that size, which no cache holds.
    recipe = {"export": "openvino-int8", "batch": "any"}
    plan = _plan(tiny_model, tiny_model, input_hw=[32, 64])
    plan.tuned["artifact"] = recipe
    use = settle(_use(plan), [str(videos["wide"])], frames=4)
    assert exported == []  # a run builds nothing
    entry = proof(plan, (96, 128))
    assert entry is not None
    assert entry["run"] == "reference"
    assert entry["tried"][0] == {
        "label": "the plan's configuration at 64×64",
        "missing": "no 64×64 openvino-int8 export cached, and a run builds none: `visionrt"
        f" export {tiny_model} --to openvino-int8 --imgsz 64x64` or `visionrt tune` makes it",
    }
    assert "the plan's configuration at 64×64 (not tried: no 64×64 openvino-int8" in use.note
    # `tune` builds it with its exporter (cached by the export) and proves it.
    fresh = _plan(tiny_model, tiny_model, input_hw=[32, 64])
    fresh.tuned["artifact"] = recipe
    settle(_use(fresh), [str(videos["wide"])], frames=4, build=evaluate.export_sized)
    assert len(exported) == 1
    built = proof(fresh, (96, 128))
    assert built is not None
    assert built["run"] == {"model": str(tiny_model), "inference": {"input_size": None}}


def test_an_int8_plan_tries_its_costliest_layers_in_float_before_floats(
    tiny_model: Path, videos: dict[str, Path]
) -> None:
    """Issue #49: where the plan's INT8 falls short on a frame size, tune's check tries its
    accuracy-controlled twin at the model's own size, before the float runtimes (built only when
    the options before it failed); a run's check, which builds nothing, does not."""
    plan = _plan(tiny_model, tiny_model, "openvino", input_hw=[32, 64])
    plan.tuned["artifact"] = {"export": "openvino-int8", "batch": "any"}
    built: list[tuple[str, tuple[int, int] | None]] = []

    def build(source: Path, recipe: str, calibrate: object, size: object) -> Path:
        built.append((recipe, size))  # type: ignore[arg-type]
        return tiny_model

    tried = check.options(plan, SECTIONS, (96, 128), (64, 64), str(videos["wide"]),
                          lambda line: None, build)  # fmt: skip
    labels = []
    for option in tried:
        labels.append(option.label)
        if option.label.startswith("the plan's configuration with accuracy control"):
            assert built == [("openvino-int8", None), ("openvino-int8-ac", None)]
            assert option.run == {"model": str(tiny_model), "inference": {"input_size": None}}
    assert labels[:2] == [
        "the plan's configuration at 64×64",  # 96×128 aligns to the model's own size here
        "the plan's configuration with accuracy control at 64×64",
    ]
    assert labels[2].startswith("openvino ")  # then the runtime in float, then the reference
    assert labels[-1] == "the FP32 reference"
    plain = check.options(plan, SECTIONS, (96, 128), (64, 64), str(videos["wide"]),
                          lambda line: None)  # fmt: skip
    assert not any("accuracy control" in option.label for option in plain)
