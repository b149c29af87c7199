#!/usr/bin/env bash
# What the test suite needs beyond `scripts/setup.sh`: the services some tests start on
# 127.0.0.1 — Debian's headless Chromium (the live view's browser test) and the Mosquitto MQTT
# broker (event delivery). Kept out of `make demo`, which needs neither. Idempotent.
set -euo pipefail

missing=()
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
[ -x /usr/sbin/mosquitto ] || command -v mosquitto >/dev/null 2>&1 || missing+=(mosquitto)
if [ ${#missing[@]} -gt 0 ]; then
  echo "== installing ${missing[*]} for the tests (Debian)"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
