"""Motion gating (`pipeline.motion: skip`): the motion measure on constructed frames, the
scheduler's reuse and refresh rules, and a run that reuses results with every frame accounted."""

from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np
import pytest

from visionrt import Pipeline, PipelineOptions
from visionrt.config import pipeline_options
from visionrt.errors import ConfigError
from visionrt.pipeline.schedule import Scheduler
from visionrt.preprocess.motion import MotionGate, MotionOptions


def scene(square_x: int | None = None, brightness: int = 60, size=(480, 640)) -> np.ndarray:
    image = np.full((*size, 3), brightness, np.uint8)
    image[::40] = brightness + 40  # some texture: stripes
    if square_x is not None:
        image[200:280, square_x : square_x + 60] = (40, 200, 240)
    return image


def test_an_unchanged_frame_has_no_motion_and_a_moving_square_has() -> None:
    gate = MotionGate(MotionOptions())
    assert gate.changed(scene(100)) == 1.0  # no reference yet: everything is new
    gate.keep()
    assert gate.changed(scene(100)) == 0.0
    moved = gate.changed(scene(160))
    assert moved > MotionOptions().min_area
    assert moved < 0.05  # the square's old and new place, not the frame


def test_noise_below_the_threshold_is_not_motion() -> None:
    gate = MotionGate(MotionOptions(threshold=25))
    gate.changed(scene(100))
    gate.keep()
    noise = np.random.default_rng(0).integers(-10, 11, (480, 640, 3))
    noisy = np.clip(scene(100).astype(int) + noise, 0, 255).astype(np.uint8)
    assert not gate.moved(noisy)


def test_lights_switched_on_or_a_new_frame_size_is_a_change_of_scene() -> None:
    gate = MotionGate(MotionOptions())
    gate.changed(scene(100))
    gate.keep()
    assert gate.changed(scene(100, brightness=140)) > 0.9
    assert gate.changed(scene(100, size=(240, 320))) == 1.0  # the reference is dropped


def test_the_reference_is_the_frame_the_models_last_ran_on() -> None:
    # A square creeping 2 px a frame: under the threshold from one frame to the next, but the
    # change since the reference grows until it counts.
    gate = MotionGate(MotionOptions(min_area=0.004))
    gate.changed(scene(100))
    gate.keep()
    steps = [gate.moved(scene(100 + 2 * i)) for i in range(1, 20)]
    assert not steps[0]
    assert any(steps)


def test_motion_options_are_checked() -> None:
    with pytest.raises(ConfigError, match=r"motion\.threshold: expected a grey-level"):
        pipeline_options(motion="skip", motion_threshold=0)
    with pytest.raises(ConfigError, match=r"motion\.min_area: expected a share"):
        pipeline_options(motion_min_area=1.5)
    with pytest.raises(ConfigError, match="expected off, skip or regions, got 'roi'"):
        pipeline_options(motion="roi")
    with pytest.raises(ConfigError, match=r"motion.refresh: expected seconds > 0, at most 3600"):
        pipeline_options(motion_refresh=0)


def test_the_scheduler_reuses_until_motion_or_the_refresh() -> None:
    options = pipeline_options(motion="skip", motion_refresh=2.0)
    scheduler = Scheduler([[0, 1]], options, [False])
    decide = scheduler.decide
    assert decide(0, 0.0, 0.0, moved=False).full  # nothing ran yet: run
    assert decide(0, 0.0, 0.5, moved=False).reused
    assert decide(0, 0.0, 1.0, moved=True).lanes == (0, 1)  # motion: run again
    assert decide(0, 0.0, 2.9, moved=False).reused
    assert decide(0, 0.0, 3.0, moved=False).full  # 2 s of video since the models ran
    assert decide(0, 0.0, 0.1, moved=False).full  # time went back: a looped file
    off = Scheduler([[0]], PipelineOptions(), [False])
    assert off.decide(0, 0.0, 0.5, moved=False).full  # gating off: never reused


def test_a_still_scene_reuses_results_and_accounts_for_every_frame(
    tmp_path: Path, tiny_model: Path
) -> None:
    for i in range(9):  # an image folder: one frame per second of video time
        cv2.imwrite(str(tmp_path / f"img{i:02d}.png"), scene(100))
    options = pipeline_options(warmup=0, motion="skip", motion_refresh=2.0, track=True)
    pipeline = Pipeline([str(tmp_path)], tiny_model, "onnxruntime", options=options)
    calls = []
    infer = pipeline.task.backend.infer
    pipeline.task.backend.infer = lambda inputs: calls.append(1) or infer(inputs)  # type: ignore[method-assign]
    results = list(pipeline)
    pipeline.close()
    summary = pipeline.summary()
    assert (summary.frames_in, summary.frames_out, summary.accounted) == (9, 9, True)
    processed = [r.processed for r in results]
    assert processed == ["full", "reused"] * 4 + ["full"]  # refreshed every 2 s of video
    assert len(calls) == 5
    assert summary.events["motion: skipped"] == 4
    assert summary.motion["reused"] == 4
    assert summary.motion["share"] == pytest.approx(4 / 9, abs=1e-4)
    for result in results:  # reused frames carry the last frame's boxes, tracked as one object
        # The model's box (cx 32, cy 32, 20×10 in its 64×64 input) in the 640×480 frame.
        np.testing.assert_allclose(result.detections.xyxy, [[220, 190, 420, 290]], atol=1e-3)
        assert result.tracks is not None
        assert result.tracks.track_id.tolist() == [1]
    assert json.loads(json.dumps(results[1].to_json()))["processed"] == "reused"


def test_gating_off_writes_what_it_always_did(small_video: Path, tiny_model: Path) -> None:
    pipeline = Pipeline([str(small_video)], tiny_model, "onnxruntime")
    results = list(pipeline)
    pipeline.close()
    assert all(r.processed == "" and "processed" not in r.to_json() for r in results)
    assert "motion" not in pipeline.summary().stages
    assert pipeline.summary().motion == {}


def test_gating_composes_with_detect_every_n() -> None:
    # Moving frames follow detect-every-2 (detector, then tracking alone); a still frame
    # reuses the last results whichever of the two it would have been.
    options = pipeline_options(track=True, detect_every=2, motion="skip", motion_refresh=10.0)
    scheduler = Scheduler([[0]], options, [False])
    moves = [True, True, True, False, False, True, True]
    decisions = [scheduler.decide(0, 0.0, t / 10, moved) for t, moved in enumerate(moves)]
    assert [d.lanes for d in decisions] == [(0,), (), (0,), (), (), (), (0,)]
    assert [d.reused for d in decisions] == [False, False, False, True, True, False, False]
    assert [d.full for d in decisions] == [True, False, True, False, False, False, True]


def test_an_i420_frame_is_measured_on_its_luma_without_a_colour_conversion(
    demo_video: Path,
) -> None:
    """A frame decoded in a worker process comes as I420: the gate measures its Y plane
    (stretched to full range), not a BGR conversion of it (half the gate's time, and a BGR
    picture the device path never needs). On real footage it sees what the BGR frame shows."""
    from visionrt.pipeline.flow import Item
    from visionrt.pipeline.gating import Gating
    from visionrt.preprocess.motion import i420_grey
    from visionrt.telemetry import Telemetry
    from visionrt.types import Frame

    capture = cv2.VideoCapture(str(demo_video))
    pictures = [capture.read()[1] for _ in range(40)]
    capture.release()
    # The reference stays frame 0's: the change grows as people walk, through min_area.
    options = MotionOptions(mode="skip", min_area=0.02)  # frames 1, 2 at 0.008, 0.014
    gates = {"bgr": MotionGate(options), "luma": MotionGate(options)}
    gating = Gating(options, 1, Telemetry(), 640 * 640)
    moved = []
    for index, bgr in enumerate(pictures):
        i420 = cv2.cvtColor(bgr, cv2.COLOR_BGR2YUV_I420)
        # The BGR side gets the I420 frame converted, so that only the way of measuring differs.
        bgr_share = gates["bgr"].measure(cv2.cvtColor(i420, cv2.COLOR_YUV2BGR_I420)).share
        luma_share = gates["luma"].measure(i420_grey(i420)).share
        assert abs(bgr_share - luma_share) <= 0.002, index
        frame = Frame(0, index, i420, index / 25, 0.0)
        moved.append(gating.measure(Item(frame))[0])
        assert frame._bgr is None, "no BGR picture was made"
        if index == 0:
            for gate in (*gates.values(), gating.gates[0]):
                gate.keep()
    assert moved[0]
    assert not all(moved[1:]), "some frames are still against frame 0"
    assert any(moved[1:]), "and some have moved past min_area"


def test_shares_are_over_the_frames_gating_decided_on() -> None:
    """A run cut short decided on frames it never delivered: 3 frames run whole, 1 delivered
    said "the detector ran 300% of every frame's pixels" (issue #47)."""
    from visionrt.pipeline.gating import (
        MOTION_PIXELS,
        MOTION_SKIPPED,
        MOTION_WHOLE,
        motion_figures,
    )

    settings = {"mode": "skip"}
    events = {MOTION_WHOLE: 3, MOTION_SKIPPED: 1, MOTION_PIXELS: 3 * 100}
    figures = motion_figures(settings, events, out=1, whole=1 * 100)
    assert figures["frames"] == 4
    assert figures["pixel_share"] == pytest.approx(0.75)
    assert figures["share"] == pytest.approx(0.25)
