"""End-to-end vs model-only FPS of `visionrt run` on the demo video (issue #2's benchmark).

Usage: .venv/bin/python scripts/bench_e2e.py [--runs 3] [--variant onnxruntime:fp32 ...]
Each repetition measures model-only FPS (backend `infer` on prepared real frames, after
warm-up) and then a full end-to-end run into a JSONL sink, for every variant in turn; the
efficiency ratio pairs the two figures of the same repetition.
"""

from __future__ import annotations

import sys

from visionrt.cli.main import main

if __name__ == "__main__":
    args = sys.argv[1:]
    if not any(a.startswith("--variant") for a in args):
        args += ["--variant", "onnxruntime:fp32"]
    if not any(a.startswith("--runs") for a in args):
        args += ["--runs", "3"]
    main(["bench", *args])
