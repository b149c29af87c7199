"""Turns telemetry into what people read: a progress bar, a summary table, a per-second file."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from visionrt.errors import SinkError
from visionrt.telemetry.stats import RunSummary, Telemetry


def summary_table(summary: RunSummary) -> Table:
    title = (
        f"{summary.frames_out} frames in {summary.seconds:.2f} s = {summary.fps:.1f} FPS"
        f" · {summary.backend.get('runtime', '?')} {summary.backend.get('precision', '')}"
        f" on {summary.backend.get('device', '?')}"
    )
    table = Table(title=title, title_justify="left")
    for column in ("stage", "p50 ms", "p95 ms", "p99 ms", "mean ms"):
        table.add_column(column, justify="right" if column != "stage" else "left")
    rows = [*summary.stages.items(), ("end-to-end latency", summary.latency)]
    for name, stats in rows:
        table.add_row(name, *(f"{stats[k]:.2f}" for k in ("p50", "p95", "p99", "mean")))
    dropped = sum(summary.dropped.values())
    table.caption = (
        f"frames in {summary.frames_in} · out {summary.frames_out} · dropped {dropped}"
        f" ({'all accounted for' if summary.accounted else 'NOT ACCOUNTED'})"
        f" · CPU {summary.cpu_percent:.0f}% · RSS {summary.rss_mb:.0f} MB"
        + (" · interrupted" if summary.interrupted else "")
    )
    return table


def print_summary(summary: RunSummary, console: Console | None = None) -> None:
    console = console or Console(stderr=True)
    console.print(summary_table(summary))
    for reason, count in summary.dropped.items():
        console.print(f"  dropped {count}: {reason}")
    for source in summary.sources:
        if source.get("corrupt") or source.get("reconnects"):
            console.print(
                f"  {source['name']}: {source['corrupt']} corrupt frames skipped,"
                f" {source['reconnects']} reconnects ({source['gap_seconds']} s gap)"
            )
        for warning in source.get("warnings", []):
            console.print(f"  [yellow]warning:[/] {warning}")


class TelemetryWriter:
    """Appends one JSON line per second (counters, FPS and latency percentiles over that second,
    queue depths, CPU, RSS) to a file, opened before the run starts so a bad path fails early."""

    def __init__(self, telemetry: Telemetry, path: str | Path, interval: float = 1.0) -> None:
        self.telemetry = telemetry
        self.path = Path(path)
        self.interval = interval
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="telemetry", daemon=True)
        self._handle: Any = None

    def __enter__(self) -> TelemetryWriter:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._handle = self.path.open("w", encoding="utf-8")
        except OSError as err:
            raise SinkError(f"cannot write telemetry {self.path}: {err.strerror or err}") from err
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()

    def _loop(self) -> None:
        last_out = 0
        with self._handle as handle:
            while not self._done.wait(self.interval):
                self._write(handle, last_out)
                last_out = self.telemetry.frames_out
            self._write(handle, last_out)

    def _write(self, handle: object, last_out: int) -> None:
        snapshot = self.telemetry.snapshot()
        snapshot["fps"] = round((snapshot["frames_out"] - last_out) / self.interval, 2)
        handle.write(json.dumps(snapshot) + "\n")  # type: ignore[attr-defined]
        handle.flush()  # type: ignore[attr-defined]
