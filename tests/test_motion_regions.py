"""Motion regions (`pipeline.motion: regions`): where the frame moved, the windows that cover it
and the objects last seen, the boxes mapped back to source pixels, the scheduler's choice
between windows and a whole frame, and a run that accounts for every frame."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest
from conftest import run_cli, write_tiny_detector

from visionrt import Pipeline
from visionrt.cli.run_config import configure_run
from visionrt.config import pipeline_options
from visionrt.errors import ConfigError
from visionrt.paths import file_sha256
from visionrt.pipeline.planned import planned_regions
from visionrt.pipeline.schedule import Scheduler
from visionrt.plans import Plan
from visionrt.postprocess import PostprocessOptions, detect_layout
from visionrt.preprocess.motion import MotionGate, MotionOptions
from visionrt.preprocess.regions import RegionPlanner, cover, region_grid
from visionrt.tasks.tiled import decode_grid


def scene(square_x: int | None = None, size=(480, 640)) -> np.ndarray:
    image = np.full((*size, 3), 60, np.uint8)
    image[::40] = 100
    if square_x is not None:
        image[200:280, square_x : square_x + 60] = (40, 200, 240)
    return image


def test_motion_boxes_hold_the_old_and_new_place_of_a_moving_square() -> None:
    gate = MotionGate(MotionOptions())
    whole = gate.measure(scene(100), boxes=True)
    assert whole.boxes.tolist() == [[0, 0, 640, 480]]  # no reference: all of it is new
    gate.keep()
    assert len(gate.measure(scene(100), boxes=True).boxes) == 0
    boxes = gate.measure(scene(130), boxes=True).boxes
    assert len(boxes) == 1
    x1, y1, x2, y2 = boxes[0]
    assert x1 <= 100
    assert x2 >= 190
    assert y1 <= 200
    assert y2 >= 280
    assert x2 - x1 < 160
    assert y2 - y1 < 140
    assert gate.measure(scene(130), boxes=False).boxes.shape == (0, 4)  # skip mode: no boxes
    two = scene(130)
    two[200:280, 400:460] = (40, 200, 240)  # a second square, 210 px away
    assert len(gate.measure(two, boxes=True).boxes) == 2
    wide = MotionGate(MotionOptions(dilate=60))  # merges areas up to 60 grey-copy px apart
    wide.measure(scene(100))
    wide.keep()
    assert len(wide.measure(two, boxes=True).boxes) == 1


def test_windows_cover_each_box_whole_and_stay_inside_the_frame() -> None:
    hw = (480, 640)
    near = np.array([[100, 100, 150, 200], [200, 120, 260, 210]], np.float32)
    assert cover(near, hw, 320).tolist() == [[20, 0, 340, 320]]  # one window holds both
    far = np.array([[10, 10, 60, 60], [560, 400, 630, 470]], np.float32)
    windows = cover(far, hw, 320)
    assert sorted(windows.tolist()) == [[0, 0, 320, 320], [320, 160, 640, 480]]  # at the edges
    big = np.array([[100, 50, 500, 450]], np.float32)
    assert cover(big, hw, 320).tolist() == [[100, 50, 500, 450]]  # its own size, square
    assert cover(np.array([[0, 0, 50, 50]], np.float32), (200, 240), 320).tolist() == [
        [0, 0, 240, 200]  # a frame smaller than a window: the frame
    ]
    for boxes in (near, far, big):
        for box in boxes:
            held = [
                w[0] <= box[0] and w[1] <= box[1] and w[2] >= box[2] and w[3] >= box[3]
                for w in cover(boxes, hw, 320)
            ]
            assert any(held)


def test_the_planner_looks_around_moving_objects_and_falls_back_to_the_whole_frame() -> None:
    planner = RegionPlanner(2, 320, (640, 640))  # whole frames cost 4 windows: 3 allowed
    assert planner.max_windows == 3
    hw = (640, 640)  # at the whole frame's scale (1:1) a window is 320 source pixels
    motion = np.array([[100, 100, 150, 200]], np.int32)
    assert planner.plan(0, motion, hw).tolist() == [[0, 0, 320, 320]]
    planner.remember(0, np.array([[500, 400, 540, 500]], np.float32))  # standing, away
    assert planner.plan(0, motion, hw).tolist() == [[0, 0, 320, 320]]  # its box is kept
    planner.remember(0, np.array([[140, 180, 180, 260]], np.float32))  # the motion touches it
    windows = planner.plan(0, motion, hw)
    assert windows.tolist() == [[0, 30, 320, 350]]  # looked at whole, with a margin
    assert windows[0, 3] >= 260 + 20
    assert planner.plan(1, motion, hw).tolist() == [[0, 0, 320, 320]]  # per source
    corners = np.array([[0, 0, 9, 9], [630, 0, 639, 9], [0, 630, 9, 639], [630, 630, 639, 639]])
    assert planner.plan(1, corners, hw) is None  # 4 windows cost a whole frame: run it
    assert planner.plan(1, np.zeros((0, 4), np.int32), hw) is None  # moved, nothing known
    coarse = RegionPlanner(1, 320, (320, 320))  # the whole frame runs at 1:2: windows of 640
    assert coarse.plan(0, motion, hw).tolist() == [[0, 0, 640, 640]]
    assert planner.plan(1, np.array([[100, 100, 500, 300]]), hw) is None  # larger than a window


def test_boxes_found_in_windows_come_back_in_source_pixels() -> None:
    # Two windows: a 320 one at 1:1 and a 640 one (an object larger than a window) at 1:2.
    windows = np.array([[100, 50, 420, 370], [700, 100, 1340, 740]], np.int32)
    grid = region_grid(windows, (1080, 1920), (320, 320))
    head = detect_layout([1, 6, 8], 2, False, "auto", input_hw=(320, 320))
    output = np.zeros((2, 6, 8), np.float32)
    output[0, :, 0] = [160, 160, 40, 80, 0.9, 0]  # cx, cy, w, h, person, car
    output[1, :, 0] = [100, 200, 20, 40, 0, 0.8]
    found = decode_grid(output, grid, head, PostprocessOptions(), 0.5)
    order = np.argsort(-found.confidence)
    np.testing.assert_allclose(
        found.xyxy[order], [[240, 170, 280, 250], [880, 460, 920, 540]], atol=1e-3
    )
    assert found.class_id[order].tolist() == [0, 1]


def test_the_scheduler_runs_windows_between_whole_frames() -> None:
    options = pipeline_options(motion="regions", motion_refresh=2.0)
    scheduler = Scheduler([[0, 1]], options, [False], region_lane=5)
    window = np.array([[0, 0, 320, 320]])
    first = scheduler.decide(0, 0.0, 0.0, True, lambda: window)
    assert first.full
    assert first.windows is None
    regions = scheduler.decide(0, 0.0, 0.5, True, lambda: window)
    assert regions.lanes == (5, 1)
    assert regions.windows is window
    assert regions.detected
    assert not regions.full
    assert scheduler.decide(0, 0.0, 1.0, False, lambda: window).reused
    assert scheduler.decide(0, 0.0, 1.5, True, lambda: None).full  # windows cost too much
    assert scheduler.decide(0, 0.0, 3.0, True, lambda: window).windows is window
    assert scheduler.decide(0, 0.0, 3.5, True, lambda: window).full  # 2 s since whole
    skip = Scheduler([[0]], pipeline_options(motion="skip"), [False])
    skip.decide(0, 0.0, 0.0, True)
    assert skip.decide(0, 0.0, 0.5, True, lambda: window).full  # skip mode: no windows


def test_region_options_are_checked(tmp_path: Path, tiny_model: Path) -> None:
    with pytest.raises(ConfigError, match=r"motion\.region: expected a multiple of 32"):
        pipeline_options(motion="regions", motion_region=300)
    with pytest.raises(ConfigError, match=r"motion\.dilate: expected 1 to 80 pixels"):
        pipeline_options(motion="regions", motion_dilate=0)
    with pytest.raises(ConfigError, match=r"tiling .* already cuts"):
        pipeline_options(motion="regions", tile=640)
    cv2.imwrite(str(tmp_path / "a.png"), scene(100))
    with pytest.raises(ConfigError, match=r"tiny.onnx cannot run at 320x320 .*motion.region_model"):
        Pipeline(
            [str(tmp_path / "a.png")], tiny_model, "onnxruntime",
            options=pipeline_options(motion="regions"),
        )  # fmt: skip


def test_a_run_detects_in_the_window_that_moved_and_accounts_for_every_frame(
    tmp_path: Path,
) -> None:
    # The whole-frame detector sees nothing; the region detector (a 64-px model) finds its
    # fixed box in the middle of whatever window it is given.
    models = tmp_path / "models"
    models.mkdir()
    whole = write_tiny_detector(models / "whole.onnx", [(128, 128, 20, 10, 0.0, 0.0)], size=256)
    region = write_tiny_detector(models / "region.onnx", [(32, 32, 20, 10, 0.9, 0.0)])
    frames = tmp_path / "frames"
    frames.mkdir()
    for i, x in enumerate([100, 130, 130, 130, 160, 130]):  # a frame per second of video
        cv2.imwrite(str(frames / f"img{i:02d}.png"), scene(x))
    options = pipeline_options(
        warmup=0, motion="regions", motion_region=64, motion_region_model=str(region),
        motion_refresh=3.0,
    )  # fmt: skip
    pipeline = Pipeline([str(frames)], whole, "onnxruntime", options=options)
    results = list(pipeline)
    pipeline.close()
    summary = pipeline.summary()
    assert (summary.frames_in, summary.frames_out, summary.accounted) == (6, 6, True)
    # Motion counts from the last whole frame: frame 2 still differs from frame 0; frame 5 is
    # frame 3 again (the refresh, 3 s after frame 0).
    processed = ["full", "regions: 1", "regions: 1", "full", "regions: 1", "reused"]
    assert [r.processed for r in results] == processed
    moved = results[1]
    assert moved.regions is not None
    assert moved.motion_boxes is not None
    (x1, y1, x2, y2), (mx1, my1, mx2, my2) = moved.regions[0], moved.motion_boxes[0]
    assert x1 <= mx1
    assert y1 <= my1
    assert x2 >= mx2
    assert y2 >= my2
    scale = 64 / (x2 - x1)  # the window letterboxed into the 64-px input
    expected = [x1 + 22 / scale, y1 + 27 / scale, x1 + 42 / scale, y1 + 37 / scale]
    np.testing.assert_allclose(moved.detections.xyxy, [expected], atol=1e-3)
    assert len(results[3].detections) == 0  # the whole frame: nothing
    np.testing.assert_allclose(results[5].detections.xyxy, results[4].detections.xyxy)  # reused
    assert moved.to_json()["processed"] == "regions: 1"
    motion = summary.motion
    assert (motion["regions"], motion["reused"], motion["windows_per_region_frame"]) == (3, 1, 1)
    full_pixels = 256 * 256
    ran = 2 * full_pixels + 3 * 64 * 64  # two whole frames, three windows
    assert motion["pixel_share"] == pytest.approx(ran / (6 * full_pixels), abs=1e-4)
    assert summary.events["motion: windows"] == 3


# -- the region model a plan's run takes (`--motion regions` under a plan) ---------------------

SHA = "ab" * 32  # the model the fake exports were made from


def _export(
    root: Path,
    name: str,
    side: tuple[int, int],
    recipe: str = "nncf-mixed-2",
    target: str = "openvino-int8",
    filename: str = "model.xml",
) -> Path:
    """A completed export in an export cache as `visionrt export` leaves one (a file and its
    report); not a model anything could load."""
    folder = root / f"{SHA[:12]}-{target}-ov1-{name}"
    folder.mkdir(parents=True)
    report = {
        "model_sha256": SHA, "target": target, "runtime": "ov1",
        "settings": {"recipe": recipe, "imgsz": list(side)}, "input_hw": list(side),
        "calibration": {"video": "/data/clip.mp4"},
    }  # fmt: skip
    (folder / "report.json").write_text(json.dumps(report))
    (folder / filename).write_text("<net/>")
    return folder / filename


def _artifact_plan(artifact: Path, source: Path, made: str = "") -> Plan:
    return Plan(
        run={"model": str(artifact), "backend": "openvino", "inference": {"precision": "int8"}},
        tuned={"source_model": str(source), "input_hw": [512, 640],
               "motion": {"chosen": "skip", **({"region_model": made} if made else {})}},
    )  # fmt: skip


REGION_MODELS = [
    pytest.param("tune's", {}, "made", "the 320×320 region model tune made for the plan (",
                 id="the region model tune made"),
    pytest.param("gone", {}, "sibling", "the 320×320 openvino-int8 export from the cache (",
                 id="else the same export at 320 from the cache"),
    pytest.param("", {}, "elsewhere", "the 320×320 openvino-int8 export from the cache (",
                 id="in the default export cache too"),
    pytest.param("", {}, "reference", "the windows run the FP32 reference", id="else the FP32"
                 " reference"),
    pytest.param("tune's", {"motion_region_model": "mine.xml"}, "mine.xml", "",
                 id="the user's own wins"),
    pytest.param("tune's", {"motion": "skip"}, "", "", id="not asked for regions"),
]  # fmt: skip


@pytest.mark.parametrize(("made", "given", "expected", "said"), REGION_MODELS)
def test_a_plans_region_model_is_tunes_the_caches_or_its_reference(
    tmp_path: Path,
    tiny_model: Path,
    monkeypatch: pytest.MonkeyPatch,
    made: str,
    given: dict,
    expected: str,
    said: str,
) -> None:
    cache, elsewhere = tmp_path / "artifacts", tmp_path / "default"
    artifact = _export(cache, "plan", (512, 640))
    _export(cache, "other-recipe", (320, 320), recipe="nncf-other")  # not the same export
    _export(cache, "small", (256, 256))  # not the region size
    found = {
        "made": tmp_path / "tune-320.onnx",
        "sibling": _export(cache, "regions", (320, 320)) if expected == "sibling" else None,
        "elsewhere": _export(elsewhere, "x", (320, 320)) if expected == "elsewhere" else None,
        "reference": tiny_model,
    }
    shutil.copy(tiny_model, found["made"])
    monkeypatch.setattr("visionrt.models.cache.default_root", lambda: elsewhere)
    recorded = {"tune's": str(found["made"]), "gone": "/gone/model.xml", "": ""}[made]
    plan = _artifact_plan(artifact, tmp_path / "source-gone.onnx", recorded)
    options = pipeline_options(**{"motion": "regions", **given})
    planned, note = planned_regions(options, plan, artifact, asked=tiny_model)
    assert planned.motion.region_model == str(found.get(expected) or expected)
    assert said in note
    if expected == "reference":
        assert note == (
            "motion regions: model.xml is made at 512×640 and no 320×320 openvino-int8 export of"
            " it is cached, so the windows run the FP32 reference tiny.onnx resized to 320×320"
            " on openvino (a run builds nothing); `visionrt export"
            f" {tiny_model} --to openvino-int8 --imgsz 320x320 --calibrate /data/clip.mp4` makes"
            " one, which later runs take"
        )


def test_a_plan_with_nothing_else_to_run_keeps_its_model(tmp_path: Path, tiny_model: Path) -> None:
    onnx_plan = _artifact_plan(tiny_model, tiny_model)  # an ONNX model: the task resizes it
    options = pipeline_options(motion="regions")
    assert planned_regions(options, onnx_plan, tiny_model, tiny_model) == (options, "")
    artifact = _export(tmp_path / "artifacts", "plan", (512, 640))
    alone = _artifact_plan(artifact, tmp_path / "gone.onnx")  # no reference left to run
    assert planned_regions(options, alone, artifact) == (options, "")
    assert planned_regions(options, None, artifact) == (options, "")


def test_run_asking_regions_of_a_plan_that_kept_skip_takes_tunes_region_model(
    tmp_path: Path, tiny_model: Path, small_video: Path
) -> None:
    """Tune kept skip and made a region model too: `run --motion regions` sets the plan's skip
    aside and runs its windows on that model (it ran on the plan's 512×640 artifact, refused)."""
    artifact = _export(tmp_path / "artifacts", "plan", (512, 640))
    made = tmp_path / "tune-320.onnx"
    shutil.copy(tiny_model, made)
    plan = _artifact_plan(artifact, tmp_path / "source-gone.onnx", str(made))
    plan.run["pipeline"] = {"motion": "skip"}
    plan.tuned["source_sha256"] = file_sha256(tiny_model)
    values = {
        "model": str(tiny_model),
        "sources": [str(small_video)],
        "pipeline": {"motion": "regions"},
    }
    cfg, notes = configure_run(plan.save(tmp_path / "plan.yaml"), False, None, None, values)
    assert (cfg.model, cfg.pipeline.motion.mode) == (str(artifact), "regions")
    assert cfg.pipeline.motion.region_model == str(made)
    assert (
        "plan's motion gating (skip) set aside: pipeline.motion.mode (--motion) regions given"
        in notes
    )
    assert f"motion regions: the 320×320 region model tune made for the plan ({made})" in notes


@pytest.mark.slow
@pytest.mark.openvino
def test_run_motion_regions_on_a_plans_int8_artifact_runs_its_fp32_reference(
    openvino_int8: Any,
    demo_model: Path,
    small_video: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Issue #32, 12: `run --motion regions` under a plan of an OpenVINO INT8 artifact (made at
    one size) was refused ('model.xml is made at 640x640; regions of 320 px need …'). With no
    region model tune made and none in the export cache, the windows run the plan's FP32
    reference resized, on the plan's runtime at fp32, and the run says so."""
    monkeypatch.setattr("visionrt.models.cache.default_root", lambda: tmp_path / "no-exports")
    plan = Plan(
        run={"model": str(openvino_int8.path), "backend": "openvino",
             "inference": {"precision": "int8", "fold_preprocess": True}},
        tuned={"source_sha256": file_sha256(demo_model), "measured": {"fps": 1.0}},
    )  # fmt: skip
    out, plan_file = tmp_path / "out", plan.save(tmp_path / "plan.yaml")
    code, err = run_cli(
        ["run", str(small_video), "-m", str(demo_model), "--plan", str(plan_file),
         "--motion", "regions", "--no-video", "-o", str(out)],
        capsys,
    )  # fmt: skip
    assert code == 0, err
    said = "so the windows run the FP32 reference best_fp16.onnx resized to 320×320 on openvino"
    assert said in err
    summary = json.loads((out / "summary.json").read_text())
    assert any(said in note for note in summary["notes"])
    assert summary["backend"]["precision"] == "int8"  # the plan's artifact, whole frames
    regions = summary["backend"]["regions"]
    assert (regions["runtime"], regions["precision"], regions["input_hw"]) == (
        "openvino", "fp32", [320, 320],
    )  # fmt: skip
    assert summary["motion"]["regions"] > 0  # frames whose detector ran on windows
    assert summary["frames_in"] == summary["frames_out"] == 40


def test_a_plan_whose_runtime_would_build_an_engine_for_its_reference_is_refused_in_a_line(
    tmp_path: Path, tiny_model: Path
) -> None:
    artifact = _export(
        tmp_path / "artifacts", "plan", (512, 640), "fp16", "tensorrt", "model.engine"
    )
    plan = _artifact_plan(artifact, tiny_model)
    plan.run["backend"] = "tensorrt"  # builds an engine from an ONNX file as it loads it
    with pytest.raises(ConfigError) as caught:
        planned_regions(pipeline_options(motion="regions"), plan, artifact)
    assert str(caught.value) == (
        "--motion regions: model.engine is made at 512×640 and no 320×320 export of it is"
        " cached; tensorrt would build an engine for the FP32 reference, which a run does not:"
        f" `visionrt export {tiny_model} --to tensorrt --imgsz 320x320 --calibrate"
        " /data/clip.mp4` makes one"
    )
