"""End-to-end vs model-only FPS of `visionrt run` on the demo video (issue #2's benchmark).

Usage: .venv/bin/python scripts/bench_e2e.py [--runs 3] [--variant onnxruntime:fp32 ...]
Each repetition measures a full end-to-end run into a JSONL sink (the FPS figure) between two
halves of the model-only calls (backend `infer` on prepared real frames, same backend), then
12 short end-to-end segments (60 frames) each followed by 15 model-only calls: the efficiency
ratio comes from those, since interleaving at a few seconds' grain cancels the machine's drift.
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
    if not any(a.startswith("--interleave") for a in args):
        args += ["--interleave", "12"]
    main(["bench", *args])
