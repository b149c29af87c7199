"""Fidelity: COCO-style AP of a candidate's detections against the reference's, hand-worked."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from visionrt.bench.reference import collect_detections, compare_to_reference
from visionrt.config import pipeline_options
from visionrt.errors import ConfigError
from visionrt.fidelity import (
    box_iou,
    fidelity,
    identity_errors,
    tracking_fidelity,
)
from visionrt.types import Detections

A = [0.0, 0.0, 100.0, 100.0]
A_SHIFTED = [25.0, 0.0, 125.0, 100.0]  # IoU with A: 7500 / 12500 = 0.6 exactly
B = [200.0, 200.0, 300.0, 300.0]
B_SHIFTED = [225.0, 200.0, 325.0, 300.0]
FAR = [500.0, 500.0, 540.0, 540.0]


def dets(*rows: tuple[list[float], float, int]) -> Detections:
    if not rows:
        return Detections.empty()
    return Detections(
        np.array([r[0] for r in rows], np.float32),
        np.array([r[1] for r in rows], np.float32),
        np.array([r[2] for r in rows], np.int32),
    )


def test_box_iou_is_vectorized_and_exact() -> None:
    ious = box_iou(np.array([A, B], np.float32), np.array([A_SHIFTED, A, FAR], np.float32))
    assert ious.shape == (2, 3)
    assert ious[0, 0] == 0.6
    assert ious[0, 1] == 1.0
    assert ious[1].tolist() == [0.0, 0.0, 0.0]


# (name, reference frames, candidate frames, mAP50, mAP50-95, count match)
CASES = [
    ("identical", [dets((A, 0.9, 0), (B, 0.8, 0))], [dets((A, 0.7, 0), (B, 0.95, 0))], 1, 1, 1),
    # Matched at 0.50, 0.55, 0.60 only: 3 of 10 thresholds.
    ("one box at IoU 0.6", [dets((A, 0.9, 0))], [dets((A_SHIFTED, 0.9, 0))], 1, 0.3, 1),
    # Above 0.6: TP then FP; precision 1 up to recall 0.5 → 51 of 101 recall points.
    (
        "exact box ranked above shifted one",
        [dets((A, 0.9, 0), (B, 0.9, 0))],
        [dets((A, 0.9, 0), (B_SHIFTED, 0.8, 0))],
        1,
        (3 + 7 * 51 / 101) / 10,
        1,
    ),
    # Above 0.6: FP then TP; precision 0.5 at every recall up to 0.5 → 51 × 0.5 / 101.
    (
        "shifted box ranked above exact one",
        [dets((A, 0.9, 0), (B, 0.9, 0))],
        [dets((A, 0.8, 0), (B_SHIFTED, 0.9, 0))],
        1,
        (3 + 7 * 25.5 / 101) / 10,
        1,
    ),
    ("missing box", [dets((A, 0.9, 0), (B, 0.9, 0))], [dets((A, 0.9, 0))], 51 / 101, 51 / 101, 0),
    # A false positive scored below every true positive costs nothing in AP ...
    ("extra FP, lower", [dets((A, 0.9, 0))], [dets((A, 0.9, 0), (FAR, 0.3, 0))], 1, 1, 0),
    # ... scored above it halves precision at every recall.
    (
        "extra FP, higher score",
        [dets((A, 0.5, 0))],
        [dets((A, 0.5, 0), (FAR, 0.9, 0))],
        0.5,
        0.5,
        0,
    ),
    # A frame without reference boxes: the candidate's box there is a false positive.
    (
        "FP in empty frame",
        [dets((A, 0.9, 0)), dets()],
        [dets((A, 0.5, 0)), dets((FAR, 0.9, 0))],
        0.5,
        0.5,
        0.5,
    ),
    ("wrong class", [dets((A, 0.9, 0))], [dets((A, 0.9, 1))], 0, 0, 1),
    ("nothing anywhere", [dets(), dets()], [dets(), dets()], 1, 1, 1),
    ("boxes where reference has none", [dets(), dets()], [dets(), dets((A, 0.9, 0))], 0, 0, 0.5),
    # Per class, then averaged: class 0 perfect, class 1 missed.
    (
        "two classes",
        [dets((A, 0.9, 0), (B, 0.9, 1))],
        [dets((A, 0.9, 0))],
        0.5,
        0.5,
        0,
    ),
    # Two reference boxes competing for one candidate: it takes the better one.
    (
        "greedy takes highest IoU",
        [dets((A, 0.9, 0), (A_SHIFTED, 0.9, 0))],
        [dets((A_SHIFTED, 0.9, 0))],
        51 / 101,
        51 / 101,
        0,
    ),
]


@pytest.mark.parametrize(
    ("reference", "candidate", "map50", "map50_95", "count_match"),
    [pytest.param(*case[1:], id=case[0]) for case in CASES],
)
def test_hand_worked_cases(
    reference: list[Detections],
    candidate: list[Detections],
    map50: float,
    map50_95: float,
    count_match: float,
) -> None:
    report = fidelity(reference, candidate)
    assert report.map50 == pytest.approx(map50, abs=1e-9)
    assert report.map50_95 == pytest.approx(map50_95, abs=1e-9)
    assert report.count_match == pytest.approx(count_match)
    assert report.frames == len(reference)


def test_candidate_only_class_is_reported_not_averaged() -> None:
    report = fidelity([dets((A, 0.9, 0))], [dets((A, 0.9, 0), (B, 0.9, 1))])
    assert report.map50 == 1.0
    assert report.extra_class_boxes == 1
    assert set(report.per_class) == {0}
    assert report.to_json()["per_class"]["0"]["ap50"] == 1.0  # type: ignore[index]


def test_frame_count_mismatch_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="same number of frames"):
        fidelity([dets()], [])


@pytest.mark.slow
def test_reference_against_itself_is_perfect(demo_model: Path, demo_video: Path) -> None:
    report = compare_to_reference(demo_video, demo_model, "onnxruntime", frames=20)
    assert report.frames == 20
    assert report.reference_boxes > 0
    assert (report.map50, report.map50_95, report.count_match) == (1.0, 1.0, 1.0)


def test_tracking_fidelity_splits_detected_and_predicted_frames() -> None:
    """Detector on frames 0 and 3 (exact); predicted frames 1 and 4 off by IoU 0.6 (a hit at
    0.5), 2 and 5 lost the object (a box far away, scored lower)."""
    reference = [dets((A, 0.9, 0)) for _ in range(6)]
    near, lost = dets((A_SHIFTED, 0.9, 0)), dets((FAR, 0.5, 0))
    candidate = [dets((A, 0.9, 0)), near, lost, dets((A, 0.9, 0)), near, lost]
    score = tracking_fidelity(reference, candidate, 3)
    assert score.detected.frames == 2
    assert score.detected.map50 == 1.0
    assert score.predicted is not None
    assert score.predicted.frames == 4
    assert score.predicted.map50 == pytest.approx(51 / 101)  # recall 2/4 at precision 1
    assert score.overall.map50 == pytest.approx(67 / 101)  # recall 4/6 at precision 1
    assert score.to_json()["predicted"]["frames"] == 4

    every_frame = tracking_fidelity(reference, reference, 1)
    assert every_frame.predicted is None
    assert every_frame.overall == every_frame.detected
    assert every_frame.to_json()["predicted"] is None
    with pytest.raises(ConfigError, match="detect_every >= 1, got 0"):
        tracking_fidelity(reference, reference, 0)


@pytest.mark.slow
@pytest.mark.parametrize("tracker", ["bytetrack", "ocsort"])
def test_tracked_runs_against_the_reference(
    demo_model: Path, demo_video: Path, demo_reference: list[Detections], tracker: str
) -> None:
    """Tracking on every frame loses nothing (the detector runs at the tracker's low threshold,
    its extra boxes score below every reference box); detect-every-3 stays close."""
    reference = demo_reference[:30]  # the session's FP32 reference run (conftest)
    assert len(reference) == 30
    for every, least in ((1, 1.0), (3, 0.8)):
        options = pipeline_options(track=True, detect_every=every, tracker=tracker)
        boxes = collect_detections(demo_video, demo_model, frames=30, pipeline_options=options)
        score = tracking_fidelity(reference, boxes, every)
        assert score.overall.map50 >= least, (every, score.overall)
        assert score.detected.map50 == 1.0


def test_identity_errors_count_fragments_swaps_and_coverage() -> None:
    truth = [[0, 1, -1], [0, 1], [0, 1], [0, 1], [1]]
    tracked = [
        [7, 8, 9],  # clutter's id is not scored
        [7, 8],
        [8, 7],  # the two swap: 2 switches, 2 transfers
        [8, 5],  # object 1 gets a fresh id: 1 switch, no transfer
        [-1],  # missed: not covered
    ]
    errors = identity_errors(truth, tracked)
    assert (errors.switches, errors.transfers) == (3, 2)
    assert errors.coverage == 8 / 9
    assert identity_errors([], []).coverage == 1.0
