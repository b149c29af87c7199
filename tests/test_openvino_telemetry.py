"""OpenVINO's converter and NNCF report usage to a web analytics service unless the user said no
in OpenVINO's consent file; visionrt keeps them quiet unless the user said yes there. Offline,
their reporting process hung `make demo` after its work was done (2026-11-28)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from visionrt.export import openvino_ir

needs_openvino = pytest.mark.skipif(
    importlib.util.find_spec("openvino") is None or importlib.util.find_spec("nncf") is None,
    reason="openvino and nncf not installed (pip install 'visionrt[openvino]')",
)

# Run outside pytest and CI, where both libraries would report (each is silent in a CI job,
# and NNCF under pytest): a user's machine, with a home of its own and no consent file in it.
PROBE = """
import sys
from pathlib import Path
from visionrt.export.openvino_ir import export_ir, runtime_version
runtime_version(int8=True)
export_ir(Path(sys.argv[1]), Path(sys.argv[2]))
import nncf.telemetry.wrapper as nncf_reports
import openvino.tools.ovc.convert_impl as ovc
print(isinstance(nncf_reports.telemetry, nncf_reports.NNCFTelemetry), ovc.tm.__name__)
"""
MISSING = object()
PLAIN = "import nncf.telemetry.wrapper as w; print(isinstance(w.telemetry, w.NNCFTelemetry))"


def _user_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "TF_BUILD", "JENKINS_URL")}
    env.pop("NNCF_CI", None)
    env.pop("NNCF_DEV", None)
    return {**env, "HOME": str(home)}


@pytest.mark.openvino
@needs_openvino
def test_an_export_reports_nothing_and_writes_nothing_home(
    tmp_path: Path, tiny_model: Path
) -> None:
    # The premise: on such a machine, NNCF alone would report (and make a client id there).
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    plain = subprocess.run(
        [sys.executable, "-c", PLAIN],
        capture_output=True,
        text=True,
        env=_user_env(elsewhere),
        timeout=120,
    )
    assert plain.stdout.split() == ["True"], plain.stderr[-800:]
    assert (elsewhere / "intel").is_dir()
    home = tmp_path / "home"
    home.mkdir()
    env = _user_env(home)
    target = tmp_path / "model.xml"
    probe = subprocess.run(
        [sys.executable, "-c", PROBE, str(tiny_model), str(target)],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert probe.returncode == 0, probe.stderr[-2000:]
    assert probe.stdout.split() == ["False", "openvino.tools.ovc.telemetry_stub"]
    assert target.is_file()
    assert not (home / "intel").exists()  # no client id, no usage counter


def test_a_user_who_said_yes_keeps_reporting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    consent = tmp_path / "openvino_telemetry"
    monkeypatch.setattr(openvino_ir, "TELEMETRY_CONSENT", consent)
    before = sys.modules.pop("openvino_telemetry", MISSING)
    try:
        for answer, blocked in (("0", True), ("1", False), (None, True)):
            sys.modules.pop("openvino_telemetry", None)
            if answer is None:
                consent.unlink()
            else:
                consent.write_text(answer + "\n")
            openvino_ir.no_usage_reports()
            assert ("openvino_telemetry" in sys.modules) is blocked
            assert sys.modules.get("openvino_telemetry") is None
    finally:
        sys.modules.pop("openvino_telemetry", None)
        if before is not MISSING:
            sys.modules["openvino_telemetry"] = before  # type: ignore[assignment]
