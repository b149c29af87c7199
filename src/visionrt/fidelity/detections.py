"""Fidelity: how closely a candidate's detections reproduce the FP32 reference's, as COCO-style AP.

The reference's detections are taken as ground truth; no labels are needed. Matching, the
101-point interpolation and the IoU thresholds 0.50:0.05:0.95 follow pycocotools' COCOeval
(bbox, one area range, no crowd boxes, no per-image cap beyond what postprocessing kept).
A tracked detect-every-N run is scored the same way, every frame's boxes (detected or predicted)
against the every-frame reference, and split by which frames the detector ran on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from visionrt.errors import ConfigError
from visionrt.postprocess.nms import box_iou  # one IoU for matching, tracking and fidelity
from visionrt.types import Detections

# Rounded to the decimal values (linspace gives 0.8999999999999999 for 0.9).
IOU_THRESHOLDS: npt.NDArray[np.float64] = np.round(np.linspace(0.5, 0.95, 10), 2)
RECALL_POINTS: npt.NDArray[np.float64] = np.linspace(0.0, 1.0, 101)
REFERENCE_BACKEND = "onnxruntime"


@dataclass(frozen=True, slots=True)
class ClassFidelity:
    """AP of one class at IoU 0.5 and averaged over 0.50:0.95, with box counts."""

    ap50: float
    ap50_95: float
    reference_boxes: int
    candidate_boxes: int


@dataclass(frozen=True, slots=True)
class FidelityReport:
    """Candidate vs reference over `frames` frames.

    `map50`/`map50_95` average the classes the reference detects (COCO's rule: a class without
    ground truth has no AP); boxes of classes only the candidate emits are counted in
    `extra_class_boxes` instead. `count_match` is the share of frames with as many candidate
    as reference boxes.
    """

    map50: float
    map50_95: float
    count_match: float
    frames: int
    reference_boxes: int
    candidate_boxes: int
    extra_class_boxes: int = 0
    per_class: dict[int, ClassFidelity] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "map50": round(self.map50, 4),
            "map50_95": round(self.map50_95, 4),
            "count_match": round(self.count_match, 4),
            "frames": self.frames,
            "reference_boxes": self.reference_boxes,
            "candidate_boxes": self.candidate_boxes,
            "extra_class_boxes": self.extra_class_boxes,
            "per_class": {
                str(cls): {
                    "ap50": round(c.ap50, 4),
                    "ap50_95": round(c.ap50_95, 4),
                    "reference_boxes": c.reference_boxes,
                    "candidate_boxes": c.candidate_boxes,
                }
                for cls, c in sorted(self.per_class.items())
            },
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> FidelityReport:
        """The inverse of `to_json` (values as rounded there)."""
        return cls(
            map50=float(data["map50"]),
            map50_95=float(data["map50_95"]),
            count_match=float(data["count_match"]),
            frames=int(data["frames"]),
            reference_boxes=int(data["reference_boxes"]),
            candidate_boxes=int(data["candidate_boxes"]),
            extra_class_boxes=int(data.get("extra_class_boxes", 0)),
            per_class={
                int(cls_id): ClassFidelity(**values)
                for cls_id, values in data.get("per_class", {}).items()
            },
        )

    def __str__(self) -> str:
        return (
            f"fidelity mAP50 {self.map50:.3f}, mAP50-95 {self.map50_95:.3f},"
            f" count match {self.count_match:.1%} over {self.frames} frames"
            f" ({self.candidate_boxes} boxes vs {self.reference_boxes} reference)"
        )


def _match_frame(
    cand_xyxy: npt.NDArray[np.float32],
    cand_score: npt.NDArray[np.float32],
    ref_xyxy: npt.NDArray[np.float32],
    thresholds: npt.NDArray[np.float64],
) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.bool_]]:
    """One frame and class: scores (D,) in descending order and a (T, D) true-positive mask.

    Greedy as COCOeval: each candidate, highest score first, takes the unmatched reference box
    of highest IoU, if that IoU reaches the threshold; all thresholds at once."""
    order = np.argsort(-cand_score, kind="mergesort")
    scores = cand_score[order]
    hits = np.zeros((len(thresholds), len(order)), dtype=bool)
    if len(ref_xyxy) == 0 or len(order) == 0:
        return scores, hits
    ious = box_iou(cand_xyxy[order], ref_xyxy)
    taken = np.zeros((len(thresholds), len(ref_xyxy)), dtype=bool)
    rows = np.arange(len(thresholds))
    for d in range(len(order)):
        available = np.where(taken, -1.0, ious[d][None, :])
        best = np.argmax(available, axis=1)
        matched = available[rows, best] >= thresholds
        hits[:, d] = matched
        taken[rows[matched], best[matched]] = True
    return scores, hits


def average_precision(
    scores: npt.NDArray[np.float32], hits: npt.NDArray[np.bool_], positives: int
) -> npt.NDArray[np.float64]:
    """COCO 101-point interpolated AP per threshold from pooled scores (D,) and hits (T, D)."""
    if positives == 0:
        return np.zeros(hits.shape[0])
    order = np.argsort(-scores, kind="mergesort")
    tp = np.cumsum(hits[:, order], axis=1, dtype=np.float64)
    fp = np.cumsum(~hits[:, order], axis=1, dtype=np.float64)
    recall = tp / positives
    precision = tp / np.maximum(tp + fp, np.finfo(np.float64).eps)
    # Precision envelope: the best precision at any recall at least this high.
    precision = np.flip(np.maximum.accumulate(np.flip(precision, axis=1), axis=1), axis=1)
    ap = np.zeros(hits.shape[0])
    for t in range(hits.shape[0]):
        index = np.searchsorted(recall[t], RECALL_POINTS, side="left")
        valid = index < recall.shape[1]
        ap[t] = precision[t, index[valid]].sum() / len(RECALL_POINTS)
    return ap


def fidelity(reference: Sequence[Detections], candidate: Sequence[Detections]) -> FidelityReport:
    """Score `candidate` against `reference` (one Detections per frame, same frames, in order)."""
    if len(reference) != len(candidate):
        raise ConfigError(
            f"fidelity: expected the same number of frames, got {len(reference)} reference"
            f" and {len(candidate)} candidate"
        )
    frames = len(reference)
    ref_classes = sorted({int(c) for det in reference for c in det.class_id})
    cand_classes = {int(c) for det in candidate for c in det.class_id}
    ref_total = sum(len(d) for d in reference)
    cand_total = sum(len(d) for d in candidate)
    count_match = (
        sum(len(r) == len(c) for r, c in zip(reference, candidate, strict=True)) / frames
        if frames
        else 1.0
    )
    extra = sum(int(np.isin(det.class_id, ref_classes, invert=True).sum()) for det in candidate)
    per_class: dict[int, ClassFidelity] = {}
    for cls in ref_classes:
        pooled_scores, pooled_hits, positives, cand_count = [], [], 0, 0
        for ref, cand in zip(reference, candidate, strict=True):
            ref_mask, cand_mask = ref.class_id == cls, cand.class_id == cls
            positives += int(ref_mask.sum())
            cand_count += int(cand_mask.sum())
            scores, hits = _match_frame(
                cand.xyxy[cand_mask], cand.confidence[cand_mask], ref.xyxy[ref_mask], IOU_THRESHOLDS
            )
            pooled_scores.append(scores)
            pooled_hits.append(hits)
        ap = average_precision(
            np.concatenate(pooled_scores), np.concatenate(pooled_hits, axis=1), positives
        )
        per_class[cls] = ClassFidelity(float(ap[0]), float(ap.mean()), positives, cand_count)
    if per_class:
        map50 = float(np.mean([c.ap50 for c in per_class.values()]))
        map50_95 = float(np.mean([c.ap50_95 for c in per_class.values()]))
    else:  # nothing to find: perfect if the candidate found nothing either
        map50 = map50_95 = 1.0 if not cand_classes else 0.0
    return FidelityReport(
        map50=map50,
        map50_95=map50_95,
        count_match=count_match,
        frames=frames,
        reference_boxes=ref_total,
        candidate_boxes=cand_total,
        extra_class_boxes=extra,
        per_class=per_class,
    )


@dataclass(frozen=True, slots=True)
class TrackingFidelity:
    """A detect-every-N run against the every-frame reference: `overall` on all frames, `detected`
    on the frames the detector ran on (frame index % N == 0), `predicted` on the others (None
    when N is 1)."""

    detect_every: int
    overall: FidelityReport
    detected: FidelityReport
    predicted: FidelityReport | None

    def to_json(self) -> dict[str, Any]:
        return {
            "detect_every": self.detect_every,
            "overall": self.overall.to_json(),
            "detected": self.detected.to_json(),
            "predicted": None if self.predicted is None else self.predicted.to_json(),
        }


def tracking_fidelity(
    reference: Sequence[Detections], candidate: Sequence[Detections], detect_every: int
) -> TrackingFidelity:
    """Score a detect-every-`detect_every` run's boxes on every frame (`candidate`, frame i's
    detector boxes where i % N == 0 and the tracker's predictions between) against the
    every-frame `reference`, overall and split by frame kind."""
    if detect_every < 1:
        raise ConfigError(f"fidelity: expected detect_every >= 1, got {detect_every}")
    overall = fidelity(reference, candidate)
    detected = fidelity(reference[::detect_every], candidate[::detect_every])
    predicted = None
    if detect_every > 1:
        between = [i for i in range(len(reference)) if i % detect_every]
        predicted = fidelity([reference[i] for i in between], [candidate[i] for i in between])
    return TrackingFidelity(detect_every, overall, detected, predicted)


@dataclass(frozen=True, slots=True)
class IdentityErrors:
    """Track ids against known identities: `switches`, times a true object's id changed
    (fragments and swaps); `transfers`, times an id moved onto another true object (swaps);
    `coverage`, the share of true boxes given an id."""

    switches: int
    transfers: int
    coverage: float


def identity_errors(
    truth: Sequence[Sequence[int]], tracked: Sequence[Sequence[int]]
) -> IdentityErrors:
    """Score per-frame track ids (`tracked`, -1 for a box given none) against each box's true
    identity (`truth`, -1 for clutter, not scored), frame by frame in order."""
    last: dict[int, int] = {}  # true identity → its latest track id
    owner: dict[int, int] = {}  # track id → the true identity it was last given to
    switches = transfers = covered = total = 0
    for true_ids, ids in zip(truth, tracked, strict=True):
        for true_id, track_id in zip(true_ids, ids, strict=True):
            if true_id < 0:
                continue
            total += 1
            if track_id < 0:
                continue
            covered += 1
            if last.setdefault(true_id, track_id) != track_id:
                switches += 1
                last[true_id] = track_id
            if owner.setdefault(track_id, true_id) != true_id:
                transfers += 1
                owner[track_id] = true_id
    return IdentityErrors(switches, transfers, covered / total if total else 1.0)
