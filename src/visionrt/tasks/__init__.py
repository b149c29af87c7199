"""Tasks: one model each = prepare (preprocess) + infer (a backend) + decode (postprocess)."""

from visionrt.tasks.detect import DetectTask
from visionrt.tasks.tiled import TiledDetectTask

__all__ = ["DetectTask", "TiledDetectTask"]
