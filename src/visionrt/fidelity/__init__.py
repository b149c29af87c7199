"""Fidelity against an FP32 reference on the user's own unlabelled video: detections as COCO-style
AP (`detections`), tracks as identity errors, depth maps as AbsRel and δ<1.25 (`depth`)."""

from visionrt.fidelity.depth import FAR_QUANTILE, DepthFidelity, depth_fidelity, depth_flicker
from visionrt.fidelity.detections import (
    IOU_THRESHOLDS,
    RECALL_POINTS,
    REFERENCE_BACKEND,
    ClassFidelity,
    FidelityReport,
    IdentityErrors,
    TrackingFidelity,
    average_precision,
    fidelity,
    identity_errors,
    tracking_fidelity,
)
from visionrt.postprocess.nms import box_iou

__all__ = [
    "FAR_QUANTILE",
    "IOU_THRESHOLDS",
    "RECALL_POINTS",
    "REFERENCE_BACKEND",
    "ClassFidelity",
    "DepthFidelity",
    "FidelityReport",
    "IdentityErrors",
    "TrackingFidelity",
    "average_precision",
    "box_iou",
    "depth_fidelity",
    "depth_flicker",
    "fidelity",
    "identity_errors",
    "tracking_fidelity",
]
