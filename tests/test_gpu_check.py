"""The GPU check's steps run here on the CPU (`scripts/gpu_check.py --smoke`): each step's
commands, settings and imports work, so a renamed flag or a test selection that collects
nothing fails in CI, not in a GPU machine's few lent minutes (two GPU calls so far ran none of
their CUDA tests: pytest refused the selection, exit 4)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
CHECK = ROOT / "scripts" / "gpu_check.py"
# What the next GPU call runs (the `unmeasured` group), and the steps of the others whose flags or
# code no group here shares; not the tune steps (minutes each here), the profiles (CUDA's
# profiler), nor `seed` and the host-path variants, whose flags these already run (`--smoke`
# runs them by hand). About a minute on 2 cores.
DETECTOR_STEPS = (
    "machine,torch_streams,readers,null_streams,live,live_frames,live_fold,tests_gpu,"
    "processes,ceiling,doctor,device_flag,process_cpu"
)
DEPTH_STEPS = "live_depth"


def _failures(value: Any, where: str) -> list[str]:
    """Every part of a step's result that says it failed: an error, a non-zero exit code, a
    run that lost frames."""
    found: list[str] = []
    if isinstance(value, dict):
        if "error" in value:
            found.append(f"{where}: {value['error']}")
        if isinstance(value.get("rc"), int) and value["rc"]:
            found.append(f"{where}: rc {value['rc']} {value.get('tail') or value.get('error')}")
        if value.get("accounted") is False:
            found.append(f"{where}: frames not accounted for")
        for key, inner in value.items():
            found += _failures(inner, f"{where}/{key}")
    return found


def _smoke(steps: str, tmp_path: Path) -> dict[str, Any]:
    env = {**os.environ, "VISIONRT_PLANS": str(tmp_path / "plans")}  # no plan of this machine
    proc = subprocess.run(
        [sys.executable, str(CHECK), "--smoke", "--steps", steps, "--out", str(tmp_path)],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    results: dict[str, Any] = json.loads((tmp_path / "gpu_check.json").read_text())
    assert set(steps.split(",")) <= set(results), sorted(results)
    failures = [line for name, value in results.items() for line in _failures(value, name)]
    assert not failures, "\n".join(failures)
    return results


@pytest.mark.slow
def test_the_detector_steps_run_on_the_cpu(tmp_path: Path, demo_model: Path) -> None:
    results = _smoke(DETECTOR_STEPS, tmp_path)
    # The run steps ran what they name: torch for the model, the null backend for the host.
    assert results["torch_streams"]["2"]["backend"]["runtime"] == "torch"
    assert results["null_streams"]["null-frames"]["2"]["backend"]["runtime"] == "null"
    assert set(results["readers"]) == {"1", "2"}
    # The pipeline process's CPU per frame: beside each run's FPS, and the script's figure.
    # (a number, not its size: a 2-frame smoke run can fall under the CPU clock's tick)
    assert isinstance(results["torch_streams"]["2"]["cpu_ms_per_frame"], float)
    assert set(results["process_cpu"]["cpu_ms_per_frame"]) == {"this treex1", "this treex2"}
    # The CUDA tests' selection finds its tests (it is only collected here).
    assert " collected" in results["tests_gpu"]["summary"]
    assert not results["tests_gpu"]["summary"].startswith("no tests")


@pytest.mark.slow
def test_the_depth_steps_run_on_the_cpu(
    tmp_path: Path, demo_model: Path, depth_model: Path
) -> None:
    results = _smoke(DEPTH_STEPS, tmp_path)
    live = results["live_depth"]
    assert live["backend"]["runtime"] == "torch"
    assert live["frames_out"] == 2
