"""`visionrt doctor`: what this machine has (CPU, runtimes, backends, demo assets) and the system
checklist of what decides inference speed on it."""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from visionrt import hardware
from visionrt.backends.registry import AUTO_ORDER, ROWS, unavailable_reason
from visionrt.cli.stdout import print_out
from visionrt.errors import VisionRTError
from visionrt.models import demo_model_path
from visionrt.paths import DEMO_VIDEO
from visionrt.system import summarize, system_findings


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _cpu_flags() -> list[str]:
    features = hardware.cpu_features()
    wanted = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16")
    return [f for f in wanted if f in features]


def doctor_report() -> dict[str, Any]:
    try:
        model = str(demo_model_path())
    except VisionRTError as err:
        model = f"missing: {err}"
    return {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "cpu": hardware.cpu_model() or "unknown",
        "cpu_flags": _cpu_flags(),
        "cpu_flags_hidden": sorted(hardware.hidden_features()),
        "packages": {
            p: _version(p)
            for p in (
                "numpy",
                "onnxruntime",
                "onnxruntime-gpu",
                "openvino",
                "nncf",
                "torch",
                "tensorrt",
                "av",
                "opencv-python-headless",
                "ray",
            )
        },
        "backends": {row.name: unavailable_reason(row) or "available" for row in ROWS},
        "system": summarize(system_findings()),
        "auto_order": AUTO_ORDER,
        "demo_model": model,
        "demo_video": str(DEMO_VIDEO) if DEMO_VIDEO.is_file() else f"missing: {DEMO_VIDEO}",
    }


def doctor_command(
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Check the system: CPU features, installed runtimes, usable backends, demo assets, and a
    checklist (cores and SMT, limits, thread variables, IRQs, real-time, pinning, memory)."""
    report = doctor_report()
    if json_out:
        print_out(json.dumps(report, indent=2))
        return
    console = Console()
    table = Table(title="visionrt doctor", show_header=False)
    for key in ("python", "machine", "cpu", "cpus"):
        table.add_row(key, str(report[key]))
    table.add_row("cpu features", ", ".join(report["cpu_flags"]) or "none of note")
    if report["cpu_flags_hidden"]:
        hidden = ", ".join(report["cpu_flags_hidden"])
        table.add_row("hidden", f"{hidden} ({hardware.HIDE_VARIABLE}: treated as absent)")
    for name, version in report["packages"].items():
        table.add_row(name, version)
    for name, state in report["backends"].items():
        table.add_row(f"backend {name}", escape(state))  # '[extra]' is not rich markup
    table.add_row("demo model", report["demo_model"])
    table.add_row("demo video", report["demo_video"])
    console.print(table)
    checks = Table(title="system checklist", show_header=True)
    for column in ("", "check", "found", "fix"):
        checks.add_column(column, overflow="fold")  # CPU lists and commands must not be cut
    marks = {"ok": "[green]ok[/]", "info": "[blue]info[/]", "warn": "[yellow]warn[/]"}
    for finding in report["system"]["findings"]:
        checks.add_row(
            marks[finding["severity"]],
            f"{finding['section']}: {finding['name']}",
            escape(finding["value"]),
            escape(finding["fix"]),
        )
    console.print(checks)
    console.print(f"{report['system']['warnings']} warning(s)")


def register(app: typer.Typer) -> None:
    app.command("doctor", help=doctor_command.__doc__)(doctor_command)
