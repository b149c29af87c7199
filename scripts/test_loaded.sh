#!/usr/bin/env bash
# The test suite with every core kept busy by stress-ng: a test that passes only on a quiet
# machine is a defect (it leans on timing), and this is how one is found before CI finds it.
# Installs Debian's stress-ng where it is missing. Arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
if ! command -v stress-ng >/dev/null 2>&1; then
  echo "== installing stress-ng (Debian)"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends stress-ng
fi
stress-ng --cpu "$(nproc)" --quiet &
load=$!
trap 'kill "$load" 2>/dev/null || true' EXIT
sleep 1
kill -0 "$load"  # the load is really there: a suite that passes unloaded proves nothing here
"$VENV/bin/python" -m pytest -q "$@"
