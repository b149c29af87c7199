"""OpenVINO reports usage to a web analytics service: on every `import openvino` (an "import"
event), and again from its converter and NNCF, each from a process it forks. It asks no one
where its consent file is missing, the common case. visionrt keeps it quiet unless the user said
yes in that file; the package does this on import, before any runtime can be imported."""

from __future__ import annotations

import sys
from pathlib import Path

# OpenVINO's own record of the user's answer (`opt_in_out --opt_in` writes "1", `--opt_out` "0").
TELEMETRY_CONSENT = Path("~/intel/openvino_telemetry")


def no_usage_reports() -> None:
    """Make `openvino_telemetry` unimportable in this process unless the user said yes to it.

    OpenVINO, its converter and NNCF each fall back to a no-op stand-in when that package
    cannot be imported. Offline, a reporting process hung `make demo` after its work was done
    (2026-11-28: 12 minutes until it was killed; it ignored SIGTERM). Nothing is written to the
    user's home (OpenVINO made a client id and a usage counter there)."""
    if "openvino_telemetry" in sys.modules:  # imported already: too late to choose here
        return
    try:
        said_yes = TELEMETRY_CONSENT.expanduser().read_text().strip() == "1"
    except (OSError, RuntimeError):  # no such file; no home to look in
        said_yes = False
    if not said_yes:
        sys.modules["openvino_telemetry"] = None  # type: ignore[assignment]
