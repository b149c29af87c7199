#!/usr/bin/env bash
# The GPU check in one command on a fresh CUDA machine with no internet: what it needs comes in
# .gpu/ (made here by scripts/gpu_bundle.py, ~57 MiB); results under $OUT (or out/gpu_check).
set -euo pipefail
cd "$(dirname "$0")/.."
exec python3 scripts/gpu_check.py "$@"
