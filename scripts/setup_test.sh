#!/usr/bin/env bash
# What the test suite needs beyond `scripts/setup.sh`: the services some tests start on
# 127.0.0.1 — Debian's headless Chromium (the live view's browser test), the Mosquitto MQTT
# broker (event delivery), Ray (`run --ray`, a local cluster), MkDocs (the docs site, built
# with --strict by the suite) and pycocotools (the `--coco` output's check). Kept out of
# `make demo`, which needs none of them. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}

if ! "$VENV/bin/python" -c "import ray" 2>/dev/null; then
  echo "== installing Ray for the tests (visionrt[ray])"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check -e ".[ray]"
fi

if ! "$VENV/bin/python" -c "import mkdocs, material" 2>/dev/null; then
  echo "== installing MkDocs for the docs build the tests run (visionrt[docs])"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check -e ".[docs]"
fi

if ! "$VENV/bin/python" -c "import pycocotools.coco" 2>/dev/null; then
  echo "== installing pycocotools for the COCO output's check (visionrt[coco])"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check -e ".[coco]"
fi

missing=()
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
[ -x /usr/sbin/mosquitto ] || command -v mosquitto >/dev/null 2>&1 || missing+=(mosquitto)
if [ ${#missing[@]} -gt 0 ]; then
  echo "== installing ${missing[*]} for the tests (Debian)"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
