"""OpenVINO reports usage to a web analytics service (on import, from its converter and from
NNCF) unless the user said no in its consent file; visionrt keeps it quiet unless the user said
yes there. Offline, a reporting process hung `make demo` after its work was done (2026-11-28)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from visionrt import usage_reports

needs_openvino = pytest.mark.skipif(
    importlib.util.find_spec("openvino") is None or importlib.util.find_spec("nncf") is None,
    reason="openvino and nncf not installed (pip install 'visionrt[openvino]')",
)

# What reports, as a user's process meets it: the runtime's import (every run on an OpenVINO
# plan), the converter and NNCF (`tune`, `export`).
REPORTERS = """
import sys
from pathlib import Path
import openvino
import openvino.tools.ovc as ovc
import nncf.telemetry.wrapper as reports
print(type(ovc.telemetry).__module__, isinstance(reports.telemetry, reports.NNCFTelemetry))
"""
VISIONRT_FIRST = """
import visionrt
from pathlib import Path
import sys
from visionrt.export.openvino_ir import export_ir, runtime_version
runtime_version(int8=True)
export_ir(Path(sys.argv[1]), Path(sys.argv[2]))
"""
MISSING = object()


def _users_machine(home: Path) -> dict[str, str]:
    """Outside CI (each library is quiet in a CI job, NNCF also under pytest), with a home of
    its own that holds no consent file."""
    quiet = ("CI", "TF_BUILD", "JENKINS_URL", "NNCF_CI", "NNCF_DEV")
    home.mkdir()
    return {**{k: v for k, v in os.environ.items() if k not in quiet}, "HOME": str(home)}


@pytest.mark.openvino
@needs_openvino
def test_openvino_reports_nothing_and_writes_nothing_home(tmp_path: Path, tiny_model: Path) -> None:
    # The premise: importing OpenVINO alone reports (and makes a client id in the home).
    alone = _users_machine(tmp_path / "alone")
    plain = subprocess.run(
        [sys.executable, "-c", REPORTERS], capture_output=True, text=True, env=alone, timeout=120
    )
    assert plain.stdout.split() == ["openvino_telemetry.main", "True"], plain.stderr
    assert (tmp_path / "alone" / "intel").is_dir()
    # With visionrt imported first: the runtime, the converter and NNCF all stand in.
    env = _users_machine(tmp_path / "home")
    target = tmp_path / "model.xml"
    probe = subprocess.run(
        [sys.executable, "-c", VISIONRT_FIRST + REPORTERS, str(tiny_model), str(target)],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert probe.returncode == 0, probe.stderr[-2000:]
    assert probe.stdout.split() == ["openvino.tools.ovc.telemetry_stub", "False"]
    assert target.is_file()
    assert not (tmp_path / "home" / "intel").exists()  # no client id, no usage counter


def test_a_user_who_said_yes_keeps_reporting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    consent = tmp_path / "openvino_telemetry"
    monkeypatch.setattr(usage_reports, "TELEMETRY_CONSENT", consent)
    before = sys.modules.pop("openvino_telemetry", MISSING)
    try:
        for answer, blocked in (("0", True), ("1", False), (None, True)):
            sys.modules.pop("openvino_telemetry", None)
            if answer is None:
                consent.unlink()
            else:
                consent.write_text(answer + "\n")
            usage_reports.no_usage_reports()
            assert ("openvino_telemetry" in sys.modules) is blocked
            assert sys.modules.get("openvino_telemetry") is None
    finally:
        sys.modules.pop("openvino_telemetry", None)
        if before is not MISSING:
            sys.modules["openvino_telemetry"] = before  # type: ignore[assignment]
