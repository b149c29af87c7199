"""The tuned plan composes with every documented flag: each `run` flag (and the YAML `tasks:`
form) × plan cached / none / `--plan FILE`, on a model and on a renamed copy of it. The plan is
used, or set aside with one line saying why — never an error. A decision-level matrix on a tiny
model first (fast), then the real demo detector with a real batch-ready INT8 artifact."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from visionrt import plans
from visionrt.cli.run_config import configure_run, flag_values
from visionrt.paths import DEMO_VIDEO
from visionrt.plans import Plan, PlanRequest, use_plan
from visionrt.plans.store import machine_fingerprint, plan_path

FLAGS = dict.fromkeys(
    (
        "sources", "model", "backend", "device", "precision", "threads", "batch", "imgsz",
        "conf", "iou", "mode", "max_frames", "realtime", "out", "no_video", "no_jsonl",
        "telemetry", "track", "detect_every", "mot", "depth", "depth_on", "depth_size",
        "metrics_port", "depth_smoothing", "tracker", "slo_ms", "tile", "tile_overlap",
        "coco", "csv",
    )
)  # fmt: skip


def _values(**given: object) -> dict:
    switches = ("realtime", "no_video", "no_jsonl", "track", "mot", "coco", "csv")
    flags = {**FLAGS, **dict.fromkeys(switches)}
    for key in switches:
        flags[key] = False
    flags.update(given)
    return flag_values(**flags)


def _plan(model: Path, artifact: Path, batch: object = "any") -> Plan:
    return Plan(
        run={
            "model": str(artifact),
            "backend": "openvino",
            "inference": {
                "device": "cpu",
                "precision": "int8",
                "fold_preprocess": True,
                "settings": {"hint": "throughput"},
            },
            "live": {"inference": {"settings": {"hint": "latency"}}},
        },
        tuned={
            "at": "2026-11-24T10:00:00+00:00",
            # Proven on the demo video: runs on it need no first-frames check (test_geometry).
            "video": str(DEMO_VIDEO),
            "measured": {"fps": 50.0, "fidelity": 0.98},
            "input_hw": [512, 640],
            "source_model": str(model),
            "source_sha256": plans.store.file_sha256(model),
            "artifact": {"batch": batch},
            "fingerprint": machine_fingerprint(),
        },
    )


@pytest.fixture
def planned(tmp_path: Path, tiny_model: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """A model, a renamed copy, another model, an artifact, a cached plan and a plan file."""
    model = tmp_path / "detector.onnx"
    shutil.copy(tiny_model, model)
    renamed = tmp_path / "copy" / "renamed.onnx"
    renamed.parent.mkdir()
    shutil.copy(tiny_model, renamed)
    other = tmp_path / "other.onnx"
    other.write_bytes(model.read_bytes() + b"\0")  # another model: other content
    artifact = tmp_path / "artifact" / "model.xml"
    artifact.parent.mkdir()
    artifact.write_text("<net/>")
    root = tmp_path / "plans"
    monkeypatch.setenv("VISIONRT_PLANS", str(root))
    plan = _plan(model, artifact)
    plan.save(plan_path(model, machine_fingerprint(), root))
    plan_file = plan.save(tmp_path / "plan.yaml")
    return {"model": model, "renamed": renamed, "other": other, "artifact": artifact,
            "plan_file": plan_file, "root": root}  # fmt: skip


# (flags, what the plan does: "used", "not used" (the user chose), "set aside" (cannot serve))
MATRIX = [
    ({}, "used"),
    ({"batch": 3, "sources": ["a=x.mp4", "b=x.mp4", "c=x.mp4"]}, "used"),
    ({"tile": 640}, "used"),
    ({"realtime": True, "slo_ms": 150.0}, "used"),
    ({"track": True, "detect_every": 2, "tracker": "ocsort", "mot": True}, "used"),
    ({"depth": "depth.onnx", "depth_size": 266, "depth_smoothing": 0.5}, "used"),
    ({"conf": 0.4, "iou": 0.5, "threads": 1, "max_frames": 5, "mode": "live"}, "used"),
    ({"metrics_port": 9464, "telemetry": "t.jsonl", "no_video": True, "no_jsonl": True}, "used"),
    ({"coco": True, "csv": True}, "used"),
    ({"device": "cpu"}, "used"),  # the plan's own device: the plan runs there
    ({"imgsz": "512x640"}, "not used"),
    ({"precision": "fp32"}, "not used"),
    ({"backend": "onnxruntime"}, "not used"),
    ({"device": "cpu", "precision": "bf16"}, "not used"),
    ({"device": "gpu"}, "not used"),  # OpenVINO's GPU: not the device the plan was tuned on
]


@pytest.mark.parametrize("which", ["model", "renamed"])
@pytest.mark.parametrize("plan_state", ["cached", "none", "file"])
@pytest.mark.parametrize(("flags", "expected"), MATRIX, ids=lambda v: str(v)[:40])
def test_every_flag_composes_with_the_plan(
    planned: dict[str, Path], which: str, plan_state: str, flags: dict, expected: str
) -> None:
    if plan_state == "none":
        shutil.rmtree(planned["root"])
    values = _values(model=str(planned[which]), **flags)
    plan_file = planned["plan_file"] if plan_state == "file" else None
    config, note = configure_run(plan_file, False, None, None, values)
    if plan_state == "file":
        # An explicit plan runs under the user's settings; only what it cannot serve sets it
        # aside (here nothing: the artifact takes any batch and the model matches).
        assert config.model == str(planned["artifact"]), note
        assert note.startswith(f"plan {planned['plan_file']}:")
        return
    if plan_state == "none":
        assert config.model == str(planned[which])
        assert ("no tuned plan" in note) == (expected != "not used"), note
        return
    if expected == "used":
        assert config.model == str(planned["artifact"]), note
        assert config.backend == "openvino"
        assert config.inference.precision == "int8"
        assert "openvino int8 512×640" in note
        live = bool(flags.get("realtime") or flags.get("mode") == "live")
        assert config.inference.settings["hint"] == ("latency" if live else "throughput")
        assert ("live: hint=latency" in note) == live, note
        if "batch" in flags:
            assert config.inference.batch == flags["batch"]
        if "threads" in flags:
            assert config.inference.threads == flags["threads"]
    else:
        assert config.model == str(planned[which]), note
        assert "not used:" in note, note
        assert "chose the configuration" in note, note
        if flags == {"device": "gpu"}:
            assert "--device gpu (the plan runs on cpu) chose" in note, note


# (the run's flags, the Python API's backend and BackendOptions for the same choice)
API_CASES = [
    ({}, "", {}),
    ({"batch": 3}, "", {"batch": 3}),
    ({"threads": 1}, "", {"threads": 1}),
    ({"precision": "bf16"}, "", {"precision": "bf16"}),  # (fp32 is the API's default: no choice)
    ({"backend": "onnxruntime"}, "onnxruntime", {}),
    ({"imgsz": "512x640"}, "", {"input_size": (512, 640)}),
]


@pytest.mark.parametrize("plan_state", ["cached", "none"])
@pytest.mark.parametrize(("flags", "backend", "options"), API_CASES, ids=lambda v: str(v)[:30])
def test_the_python_api_takes_the_plan_as_the_cli_does(
    planned: dict[str, Path], plan_state: str, flags: dict, backend: str, options: dict
) -> None:
    """Issue #35: one decision (`pipeline.plan_run`) for `run` and for `Pipeline(plan=None)`:
    the same detector configuration, pipeline options and lines, whatever the caller chose."""
    from visionrt.backends import BackendOptions
    from visionrt.pipeline.plan_run import api_request, plan_run

    if plan_state == "none":
        shutil.rmtree(planned["root"])
    values = _values(model=str(planned["model"]), **flags)
    config, note = configure_run(None, False, None, None, values)
    own, given = api_request(
        [str(DEMO_VIDEO)], planned["model"], backend, BackendOptions(**options), None, None, None
    )
    api = plan_run(own, given)
    assert api.config.model == config.model
    assert (api.config.backend, api.config.inference) == (config.backend, config.inference)
    assert api.config.pipeline == config.pipeline
    assert "\n".join(api.notes) == note


def test_the_python_apis_plan_is_proven_on_its_own_sources_only(
    planned: dict[str, Path],
) -> None:
    """A Pipeline over source objects (no file to read a size from) proves its plan on none of
    them — not on the demo video a command given no source reads; over a file, on its size."""
    from visionrt.pipeline.plan_run import api_request, plan_run

    def plan_api(specs: list[str]) -> Any:  # as Pipeline(plan=None) decides
        own, given = api_request(specs, planned["model"], "", None, None, None, None)
        return plan_run(own, given, None, False, proven_on=specs)

    alone = plan_api([])
    assert alone is not None
    assert not any("geometry:" in note for note in alone.notes), alone.notes
    video = plan_api([str(DEMO_VIDEO)])
    assert video is not None
    assert any("geometry: 576×768" in note for note in video.notes), video.notes


def test_a_plan_for_another_model_is_set_aside_by_name(planned: dict[str, Path]) -> None:
    values = _values(model=str(planned["other"]))
    config, note = configure_run(planned["plan_file"], False, None, None, values)
    assert config.model == str(planned["other"])
    assert "set aside: it was tuned for detector.onnx" in note
    assert "not other.onnx" in note
    # No cached plan is looked up for another model's content.
    config, note = configure_run(None, False, None, None, values)
    assert config.model == str(planned["other"])
    assert "no tuned plan" in note


def test_an_artifact_with_a_fixed_batch_is_set_aside_for_batches(planned: dict[str, Path]) -> None:
    fixed = _plan(planned["model"], planned["artifact"], batch=1)
    fixed.save(plan_path(planned["model"], machine_fingerprint(), planned["root"]))
    for flags, asked in (({"batch": 3}, "--batch 3"), ({"tile": 640}, "--tile")):
        values = _values(model=str(planned["model"]), **flags)
        config, note = configure_run(None, False, None, None, values)
        assert config.model != str(planned["artifact"])
        assert "set aside: its artifact model.xml runs one frame per call" in note
        assert asked in note
    config, _ = configure_run(None, False, None, None, _values(model=str(planned["model"])))
    assert config.model == str(planned["artifact"])  # one frame per call: still the plan


def test_the_yaml_tasks_form_takes_the_plan(planned: dict[str, Path], tmp_path: Path) -> None:
    config_file = tmp_path / "run.yaml"
    config_file.write_text(
        f"sources: [rgb=a.mp4]\ntasks:\n  - {{kind: detect, model: {planned['renamed']}}}\n"
    )
    config, note = configure_run(None, False, config_file, None, _values())
    assert config.model == str(planned["artifact"]), note
    chosen = tmp_path / "chosen.yaml"
    chosen.write_text(
        f"tasks:\n  - {{kind: detect, model: {planned['model']}, inference: {{precision: fp32}}}}\n"
    )
    config, note = configure_run(None, False, chosen, None, _values())
    assert config.model == str(planned["model"])
    assert "--precision chose" in note


def test_no_plan_and_a_plan_file_together_are_refused(planned: dict[str, Path]) -> None:
    from visionrt.errors import ConfigError

    with pytest.raises(ConfigError, match="--plan and --no-plan"):
        configure_run(planned["plan_file"], True, None, None, _values())


def test_use_plan_picks_the_live_settings_only_for_live_runs(planned: dict[str, Path]) -> None:
    for live, hint in ((False, "throughput"), (True, "latency")):
        use = use_plan(PlanRequest(model=planned["model"], live=live), root=planned["root"])
        assert use.sections is not None
        assert use.sections["inference"]["settings"]["hint"] == hint
        assert use.sections["inference"]["fold_preprocess"] is True  # the rest is the plan's


# -- the real detector ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def real_plan(tmp_path_factory: pytest.TempPathFactory, demo_model: Path, demo_video: Path):
    """The demo detector's INT8 artifact at 512×640, exported for any batch (4 calibration
    frames: fidelity is not what is tested here), cached as this machine's plan."""
    pytest.importorskip("nncf")
    from visionrt.export import export_model

    root = tmp_path_factory.mktemp("real-plan")
    result = export_model(
        demo_model, "openvino-int8", calibrate=demo_video, frames=4, imgsz=(512, 640),
        out=root / "artifacts", progress=False, fidelity_frames=0,
    )  # fmt: skip
    assert result.report["batch"] == "any"
    plan = _plan(demo_model, result.path)
    plans_root = root / "plans"
    plan.save(plan_path(demo_model, machine_fingerprint(), plans_root))
    renamed = root / "my-detector.onnx"
    shutil.copy(demo_model, renamed)
    return {"root": plans_root, "plan_file": plan.save(root / "plan.yaml"), "renamed": renamed,
            "artifact": result.path}  # fmt: skip


def _run(args: list[str], plans_root: Path, out: Path) -> tuple[subprocess.CompletedProcess, dict]:
    proc = subprocess.run(
        [sys.executable, "-m", "visionrt.cli.main", "run", *args, "-o", str(out), "-q",
         "--no-video"],
        capture_output=True, text=True, timeout=300,
        env={**os.environ, "VISIONRT_PLANS": str(plans_root)},
    )  # fmt: skip
    summary_file = out / "summary.json"
    return proc, json.loads(summary_file.read_text()) if summary_file.is_file() else {}


@pytest.mark.slow
@pytest.mark.openvino
@pytest.mark.parametrize(
    "args",
    [
        ["--model", "{renamed}", "--max-frames", "3"],
        ["--plan", "{plan_file}", "--model", "{renamed}", "--max-frames", "3"],
        ["a={video}", "b={video}", "c={video}", "--batch", "3", "--max-frames", "3"],
        ["{video}", "--tile", "640", "--max-frames", "2"],
        ["{video}", "--realtime", "--slo-ms", "150", "--max-frames", "5"],
        ["{video}", "--track", "--detect-every", "2", "--mot", "--max-frames", "4"],
    ],
    ids=["model", "plan-file+model", "batch", "tile", "slo", "track"],
)
def test_the_real_plan_runs_with_each_flag(
    real_plan: dict[str, Path], demo_video: Path, tmp_path: Path, args: list[str]
) -> None:
    """The commands issue #16 found exiting 2 after `make demo`: each runs the plan's INT8
    artifact now (batch and tiles through the batch-ready artifact; the SLO ladder without
    smaller-input rungs, saying so)."""
    args = [a.format(video=demo_video, **real_plan) for a in args]
    proc, summary = _run(args, real_plan["root"], tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    assert summary["backend"]["runtime"] == "openvino"
    assert summary["backend"]["precision"] == "int8"
    assert summary["backend"]["input_hw"] == [512, 640]
    assert "plan " in summary["notes"][0]
    assert "set aside" not in summary["notes"][0]
    assert summary["accounted"]
    if "--slo-ms" in args:
        assert summary["backend"]["hint"] == "latency"  # live: the plan's latency settings
        assert any("no smaller-input rungs" in n for n in summary["notes"])
    if "--batch" in args:
        assert summary["backend"]["batch"] == 3


@pytest.mark.slow
@pytest.mark.openvino
def test_the_python_api_and_profile_use_the_plan(
    real_plan: dict[str, Path], demo_video: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from visionrt import Pipeline, SourceOptions

    monkeypatch.setenv("VISIONRT_PLANS", str(real_plan["root"]))
    options = SourceOptions(max_frames=2)
    planned = Pipeline([str(demo_video)], real_plan["renamed"], source_options=options)
    reference = Pipeline([str(demo_video)], real_plan["renamed"], source_options=options,
                         plan=False)  # fmt: skip
    try:
        assert planned.task.backend.info.runtime == "openvino"
        assert planned.task.backend.info.precision == "int8"
        assert planned.plan is not None
        assert "openvino int8 512×640" in planned.notes[0]
        assert reference.task.backend.info.runtime == "onnxruntime"
        assert reference.notes == []
        assert len(list(planned)) == 2
        assert planned.summary().notes == planned.notes
    finally:
        planned.close()
        reference.close()
    proc = subprocess.run(
        [sys.executable, "-m", "visionrt.cli.main", "profile", str(demo_video), "--max-frames",
         "8", "--no-video", "-o", str(real_plan["root"].parent / "profile"), "--json"],
        capture_output=True, text=True, timeout=300,
        env={**os.environ, "VISIONRT_PLANS": str(real_plan["root"])},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "openvino int8 512×640" in proc.stderr  # says which plan it profiles
    profile = json.loads(proc.stdout)
    assert "`visionrt tune`" not in profile["verdict"]
