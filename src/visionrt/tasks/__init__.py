"""Tasks: one model each = prepare (preprocess) + infer (a backend) + decode (postprocess)."""

from visionrt.tasks.detect import DetectTask

__all__ = ["DetectTask"]
