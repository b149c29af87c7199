"""`tune --depth` chooses on how many frames depth runs (`depth.every`) from the error a held
map puts into the distances at the detector's boxes, and `run --depth` takes it from the plan
unless told."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from visionrt.tune.depth_every import HeldError, choose_every, held_errors
from visionrt.types import DepthMap, Detections

SPEED = 6  # pixels per frame the object walks right


def walking(frames: int) -> list[tuple[DepthMap, Detections]]:
    """An object 40 px wide at depth 2 on a background at 9, walking SPEED px a frame, its box
    found on each frame. A map held `age` frames puts the box's inner half (the middle 20 px,
    where distances are measured) mostly on the object while age·SPEED < 20: ages up to 3."""
    out = []
    for index in range(frames):
        x = 10 + SPEED * index
        values = np.full((64, 400), 9.0, np.float32)
        values[:, x : x + 40] = 2.0
        box = Detections(np.array([[x, 0, x + 40, 64]], np.float32), np.ones(1, np.float32),
                         np.zeros(1, np.int32))  # fmt: skip
        out.append((DepthMap(values), box))
    return out


def test_the_error_at_the_boxes_grows_with_the_age_of_the_held_map() -> None:
    errors = {e.every: e for e in held_errors(walking(30), tried=(2, 3, 4, 5))}
    for every in (2, 3, 4):  # maps at most 3 frames old: still on the object
        assert (errors[every].median, errors[every].p90) == (0.0, 0.0)
    # 1 in 5: the frames 4 old (1 in 4 of those holding a map) measure the background.
    assert errors[5].p90 == pytest.approx(3.5)  # |9 − 2| / 2
    assert errors[5].median == 0.0
    assert errors[5].boxes == 24  # 30 frames: 6 own maps, 24 held
    assert errors[2].boxes == 15


def test_the_plan_keeps_the_largest_n_up_to_which_each_held_its_budget() -> None:
    errors = held_errors(walking(30), tried=(2, 3, 4, 5))
    assert choose_every(errors, 0.10) == (4, "1 in 5: p90 3.500 > 0.1")
    assert choose_every(errors, 4.0) == (5, "")
    # A smaller N over budget stops the search even when a larger one looked fine.
    bumpy = [HeldError(2, 0.0, 0.0, 9), HeldError(3, 0.2, 0.5, 9), HeldError(4, 0.0, 0.0, 9)]
    assert choose_every(bumpy, 0.10) == (2, "1 in 3: p90 0.500 > 0.1")
    assert choose_every(errors, 0.0) == (1, "held maps not allowed (budget 0)")


def test_without_a_box_to_measure_on_depth_runs_on_every_frame() -> None:
    empty = [(depth, Detections.empty()) for depth, _ in walking(10)]
    errors = held_errors(empty, tried=(2, 3))
    assert [e.boxes for e in errors] == [0, 0]
    assert choose_every(errors, 0.10) == (1, "no detector box on the frames measured")
    # Boxes where the map has no depth (NaN) are not measured either.
    blank = [(DepthMap(np.full((64, 400), np.nan, np.float32)), b) for _, b in walking(10)]
    assert choose_every(held_errors(blank, tried=(2,)), 0.10)[0] == 1


def test_tune_depth_measures_the_held_maps_at_the_boxes_and_run_takes_its_n(
    small_video: Path, tiny_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real measurement on tiny models (the depth model's maps follow the frames' pixels,
    the detector finds one box on each); the plan's N, then `run --depth` taking it."""
    from conftest import write_tiny_depth_model

    from visionrt.cli.run_config import configure_run
    from visionrt.tune import depth as depth_tuning
    from visionrt.tune.depth import DepthCandidate, DepthLimits, tune_depth

    monkeypatch.setenv("VISIONRT_PLANS", str(tmp_path / "plans"))
    depth = write_tiny_depth_model(tmp_path / "tiny_depth.onnx")
    reference = [DepthCandidate("onnxruntime", "fp32", reference=True)]
    monkeypatch.setattr(depth_tuning, "depth_candidates", lambda *a: reference)
    plan, _, _ = tune_depth(
        small_video, depth, 42, DepthLimits(), frames=3, detector=tiny_model, every_frames=12
    )
    every = plan.tuned["every"]
    assert [t["every"] for t in every["tried"]] == [2, 3, 4, 5]
    assert [t["boxes"] for t in every["tried"]] == [6, 8, 9, 9]  # 12 frames, one box each
    tried = [HeldError(t["every"], t["median"], t["p90"], t["boxes"]) for t in every["tried"]]
    assert (every["chosen"], every["why"]) == choose_every(tried, 0.10)
    assert (every["frames"], every["max_held_error"]) == (12, 0.10)

    # A budget every N holds: the plan takes the largest, 1 in 5; run takes it, says so,
    # and the user's own --depth-every wins.
    wide = DepthLimits(max_held_error=1e9)
    plan, path, _ = tune_depth(
        small_video, depth, 42, wide, frames=3, detector=tiny_model, every_frames=12
    )
    assert plan.depth_every == 5
    values = {"model": str(tiny_model), "depth": {"model": str(depth), "short_side": 42}}
    config, note = configure_run(None, False, None, None, values)
    assert config.depth.every == 5
    assert f"depth plan {path.name}: onnxruntime fp32 42×56, depth on 1 frame in 5" in note
    mine = {**values, "depth": {**values["depth"], "every": 2}}
    config, _ = configure_run(None, False, None, None, mine)
    assert config.depth.every == 2
    # Held maps refused: the measurement is not even made.
    plan, _, _ = tune_depth(
        small_video, depth, 42, DepthLimits(max_held_error=0), frames=3, detector=tiny_model
    )
    assert (plan.depth_every, plan.tuned["every"]["tried"]) == (1, [])


def test_a_depth_plan_from_before_runs_depth_on_every_frame() -> None:
    from visionrt.plans import Plan

    old = Plan(run={"model": "d.onnx", "backend": "openvino"},
               tuned={"task": "depth", "input_hw": [518, 686]})  # fmt: skip
    assert old.depth_every == 1
    assert "frame in" not in old.summary_line()
    odd = Plan(run={}, tuned={"task": "depth", "every": {"chosen": 99}})
    assert odd.depth_every == 1  # out of range: not trusted


def test_tune_refuses_a_bad_held_error_budget_in_one_line(tmp_path: Path) -> None:
    from visionrt.cli.tune_depth import depth_limits
    from visionrt.errors import ConfigError

    model = tmp_path / "d.onnx"
    model.write_bytes(b"x")
    for bad in (-0.1, float("nan"), float("inf")):
        with pytest.raises(ConfigError, match="--max-held-error: expected a number >= 0"):
            depth_limits(str(model), None, 0.02, 0.95, bad)
    limits = depth_limits(str(model), None, 0.02, 0.95, 0)
    assert limits is not None
    assert limits.max_held_error == 0


def test_the_tune_says_how_often_depth_runs_and_why_not_less_often(
    small_video: Path, tiny_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import io
    import threading

    from conftest import write_tiny_depth_model
    from rich.console import Console

    from visionrt.cli.tune_depth import tune_depth_model
    from visionrt.tune import depth as depth_tuning
    from visionrt.tune.depth import DepthCandidate, DepthLimits

    monkeypatch.setenv("VISIONRT_PLANS", str(tmp_path / "plans"))
    depth = write_tiny_depth_model(tmp_path / "tiny_depth.onnx")
    reference = [DepthCandidate("onnxruntime", "fp32", reference=True)]
    monkeypatch.setattr(depth_tuning, "depth_candidates", lambda *a: reference)
    errors = [HeldError(2, 0.01, 0.04, 30), HeldError(3, 0.02, 0.08, 40),
              HeldError(4, 0.05, 0.20, 45), HeldError(5, 0.06, 0.30, 48)]  # fmt: skip
    monkeypatch.setattr(depth_tuning, "held_errors", lambda *a: errors)
    said = io.StringIO()
    err = Console(file=said, width=300)
    limits = DepthLimits()
    tune_depth_model(str(small_video), depth, 42, limits, False, err, threading.Event(), tiny_model)
    lines = said.getvalue().splitlines()
    assert (
        "  depth on 1 frame in 3 (p90 error of held maps' distances at the boxes: 1 in 2: 0.040,"
        " 1 in 3: 0.080, 1 in 4: 0.200, 1 in 5: 0.300), budget 0.1; 1 in 4: p90 0.200 > 0.1"
    ) in lines
    assert any(
        line.startswith("depth plan: onnxruntime fp32 42×56, depth on 1 frame in 3")
        for line in lines
    )


def test_tune_refuses_depth_through_ray_instead_of_dropping_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before, `tune --ray … --depth D` tuned the detector on the cluster and silently planned
    no depth model."""
    from conftest import run_cli

    depth = tmp_path / "d.onnx"
    depth.write_bytes(b"x")
    code, err = run_cli(["tune", "--ray", "127.0.0.1:1", "--depth", str(depth)], capsys)
    assert code == 2
    assert err.strip().splitlines() == [
        "visionrt: error: --depth with --ray: the depth model is not planned on a cluster's"
        f" nodes yet; `visionrt tune --depth {depth}` plans it for this machine's kind (nodes"
        " of other kinds run it FP32)"
    ]
