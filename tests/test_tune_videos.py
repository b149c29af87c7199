"""`tune` given several videos calibrates its INT8 artifacts on all of them and proves the plan on
each frame size among them (issue #32: an artifact calibrated on vtest.avi alone scored 0.90 at
640×640 on 640×480 cameras, one calibrated on the three videos 0.98)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import write_video
from test_geometry import _plan, _use

from visionrt.accuracy.geometry import settle
from visionrt.errors import ConfigError, SourceNotFoundError
from visionrt.export import artifacts as export_artifacts
from visionrt.export import export_model
from visionrt.export.calibration import calibration_over
from visionrt.models import cache
from visionrt.plans import Plan
from visionrt.plans.proof import proof
from visionrt.tune.candidates import Candidate
from visionrt.tune.evaluate import VideoEvaluator


@pytest.fixture
def second(tmp_path: Path) -> Path:
    return write_video(tmp_path / "second.mp4", frames=12, width=64, height=48)


def test_calibration_frames_are_shared_among_the_videos(small_video: Path, second: Path) -> None:
    frames = calibration_over([small_video, second], 5, (64, 64))
    # 3 spread over the first's 40 frames, 2 over the second's 12, in the videos' order.
    assert frames.indices == [0, 20, 39, 0, 11]
    assert [image.shape[:2] for image in frames.images] == [(96, 128)] * 3 + [(48, 64)] * 2
    assert all(tensor.shape == (1, 3, 64, 64) for tensor in frames)
    with pytest.raises(ConfigError, match="at least one calibration frame per video"):
        calibration_over([small_video, second], 1, (64, 64))


def test_an_export_calibrated_on_several_videos_is_an_artifact_of_its_own(
    tiny_model: Path,
    small_video: Path,
    second: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    given: list[list[Path]] = []

    def build(target: Any, _source: Path, folder: Path, *rest: Any) -> dict[str, Any]:
        given.append(list(rest[1]))
        (folder / target.filename).write_bytes(b"artifact")
        return {"input_hw": [64, 64], "calibration": {"frames": rest[2]}}

    monkeypatch.setattr(export_artifacts, "_build", build)
    out = tmp_path / "artifacts"
    one = export_model(tiny_model, "onnx-int8", small_video, 4, out=out, fidelity_frames=0)
    both = export_model(
        tiny_model, "onnx-int8", [small_video, second], 4, out=out, fidelity_frames=0
    )
    assert given == [[small_video], [small_video, second]]
    assert one.path != both.path
    # A single video's cache key is as it was: artifacts cached before are found again.
    assert one.report["settings"]["calibration"] == {
        "video": cache.video_fingerprint(small_video),
        "frames": 4,
    }
    assert both.report["settings"]["calibration"] == {
        "videos": [cache.video_fingerprint(small_video), cache.video_fingerprint(second)],
        "frames": 4,
    }
    again = export_model(
        tiny_model, "onnx-int8", [small_video, second], 4, out=out, fidelity_frames=0
    )
    assert again.cached
    assert len(given) == 2
    with pytest.raises(SourceNotFoundError, match=r"calibration video not found: .*gone\.mp4"):
        export_model(tiny_model, "onnx-int8", [small_video, tmp_path / "gone.mp4"], 4, out=out)


def test_tune_calibrates_on_every_video_and_records_them(
    tiny_model: Path,
    small_video: Path,
    second: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from visionrt.tune import Limits, evaluate, tuner
    from visionrt.tune.search import Measurement, SearchResult, Trial

    calibrated: list[object] = []

    class Built:
        path, report = tiny_model, {"batch": "any", "input_hw": [64, 64]}

    def export(*_args: object, **kwargs: object) -> Built:
        calibrated.append(kwargs["calibrate"])
        return Built()

    monkeypatch.setattr(evaluate, "export_model", export)
    folder = tmp_path / "images"
    folder.mkdir()
    videos = [second, folder, small_video]  # a folder is not calibrated on; each video once
    evaluator = VideoEvaluator(small_video, tiny_model, calibrate_too=videos)
    assert evaluator.calibration == [str(small_video), str(second)]
    evaluator.artifact(Candidate("openvino", "int8", export="openvino-int8"))
    assert calibrated == [[str(small_video), str(second)]]
    alone = VideoEvaluator(small_video, tiny_model)
    alone.artifact(Candidate("openvino", "int8", export="openvino-int8"))
    assert calibrated[-1] == str(small_video)  # one video: the cache key of before

    def search(space: list, *_args: object, **_kwargs: object) -> SearchResult:
        trial = Trial(space[0], [Measurement(10.0, 5.0, 9.0, 1.0, 60)])
        return SearchResult([trial], trial, trial)

    monkeypatch.setattr(tuner, "successive_halving", search)
    outcome = tuner.tune(
        small_video, tiny_model, Limits(), plans_root=tmp_path, motion=False, calibrate_too=videos
    )
    assert outcome.plan is not None
    assert outcome.plan.tuned["videos"] == [str(small_video), str(second)]


def test_tunes_proof_on_another_size_exports_calibrated_on_every_video(
    tiny_model: Path, small_video: Path, second: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from visionrt.tune import evaluate

    calibrated: list[object] = []

    class Built:
        path = tiny_model

    def export(*_args: object, **kwargs: object) -> Built:
        calibrated.append(kwargs["calibrate"])
        return Built()

    monkeypatch.setattr(evaluate, "export_model", export)
    # An artifact plan at 32×64, tuned on the two videos (searched on the 48×64 one): its
    # configuration on 96×128 runs at the model's 64×64, which tune exports calibrated as the
    # plan's artifact was.
    plan = _plan(tiny_model, tiny_model, input_hw=[32, 64], video=str(second))
    plan.tuned["artifact"] = {"export": "openvino-int8", "batch": "any"}
    plan.tuned["videos"] = [str(second), str(small_video)]
    settle(_use(plan), [str(second), str(small_video)], frames=4, build=evaluate.export_sized)
    assert calibrated == [[str(second), str(small_video)]]
    entry = proof(plan, (96, 128))
    assert entry is not None
    assert entry["run"] == {"model": str(tiny_model), "inference": {"input_size": None}}
    assert isinstance(plan, Plan)


def test_a_runs_check_names_the_export_calibrated_as_the_plans_artifact(
    tiny_model: Path, small_video: Path, second: Path
) -> None:
    plan = _plan(tiny_model, tiny_model, input_hw=[32, 64], video=str(second))
    plan.tuned["artifact"] = {"export": "openvino-int8", "batch": "any"}
    plan.tuned["videos"] = [str(second), str(small_video)]
    use = settle(_use(plan), [str(second), str(small_video)], frames=4)
    entry = proof(plan, (96, 128))
    assert entry is not None
    command = (
        f"visionrt export {tiny_model} --to openvino-int8 --imgsz 64x64 --calibrate {second}"
        f" --calibrate {small_video}"
    )
    assert command in entry["tried"][0]["missing"]
    assert command in use.note


def test_cli_export_takes_several_calibration_videos(
    tiny_model: Path,
    small_video: Path,
    second: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from typer.testing import CliRunner

    from visionrt.cli import export as cli_export
    from visionrt.cli.main import app

    given: list[object] = []

    def export(*_args: object, **kwargs: object) -> Any:
        given.append(kwargs["calibrate"])
        raise ConfigError("stop here")

    monkeypatch.setattr(cli_export, "export_model", export)
    base = ["export", str(tiny_model), "--to", "onnx-int8", "--calibrate", str(small_video)]
    CliRunner().invoke(app, base)
    CliRunner().invoke(app, [*base, "--calibrate", str(second)])
    assert given == [str(small_video), [str(small_video), str(second)]]
