"""The package type-checks: `mypy` with the settings in pyproject.toml (`[tool.mypy]`: `--strict`
less `warn_return_any`), run from the repository root as `make lint` runs it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mypy", reason="mypy missing: pip install -e '.[dev]'")

ROOT = Path(__file__).resolve().parents[1]


def test_the_package_type_checks() -> None:
    # The package is found from `files` in the config; a PYTHONPATH naming another checkout
    # would make mypy see its modules twice.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    run = subprocess.run(
        [sys.executable, "-m", "mypy"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,  # a cold run takes about 15 s on one core; the cache makes reruns faster
    )
    assert run.returncode == 0, run.stdout + run.stderr
