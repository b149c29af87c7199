#!/usr/bin/env bash
# The architecture-only Depth Anything v2-Small ONNX that `--depth` examples and the test suite
# use: no pretrained Depth Anything can be downloaded here, so the v2-Small architecture is built
# with random weights and exported (scripts/build_depth_model.py; cached under
# ~/.cache/visionrt/models). Kept out of `make demo`, whose run uses no depth model: building it
# first put the depth-build extra's install and the export (34 s on 2 loaded Zen 5 cores)
# between set-up and the demo's results. Run after `scripts/setup.sh`; does nothing when the
# model is there.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}

target=$("$VENV/bin/python" -c "from visionrt.models import depth_model_target; print(depth_model_target())")
if [ -f "$target" ]; then
  echo "== depth model present: $target"
  exit 0
fi
echo "== building the architecture-only Depth Anything v2-Small ONNX (random weights)"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check -e ".[depth-build]" "torch==2.13.0"
"$VENV/bin/python" scripts/build_depth_model.py
