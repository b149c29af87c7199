"""Turns telemetry into what people read: a progress bar, a summary table, a per-second file."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

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
        + gpu_caption(summary.gpu)
        + (" · interrupted" if summary.interrupted else "")
    )
    return table


def gpu_caption(figures: dict[str, Any]) -> str:
    """' · GPU 0 busy 41% (host-bound), SM 1980 MHz' for each GPU of a run's figures."""
    if not figures:
        return ""
    bound = "GPU-bound" if figures["limit"] == "gpu" else "host-bound"
    return "".join(
        f" · GPU {index} busy {gpu['busy']:.0%} ({bound}), SM {gpu['sm_clock_mhz']} MHz"
        for index, gpu in figures["gpus"].items()
    )


def source_table(summary: RunSummary) -> Table:
    """One row per source: frames, drops, its seconds (first frame in to last result) and FPS
    over them, and glass-to-result latency."""
    table = Table(title="per source", title_justify="left")
    columns = ("source", "in", "out", "dropped", "s", "FPS", "p50 ms", "p95 ms", "p99 ms")
    for column in columns:
        table.add_column(column, justify="left" if column == "source" else "right")
    for source in summary.sources:
        latency = source.get("latency_ms", {})
        table.add_row(
            str(source.get("name", "")),
            str(source.get("frames_in", 0)),
            str(source.get("frames_out", 0)),
            str(sum(source.get("dropped", {}).values())),
            f"{source.get('seconds', 0.0):.1f}",
            f"{source.get('fps', 0.0):.1f}",
            *(f"{latency.get(k, 0.0):.1f}" for k in ("p50", "p95", "p99")),
        )
    return table


def print_summary(summary: RunSummary, console: Console | None = None) -> None:
    console = console or Console(stderr=True)
    console.print(summary_table(summary))
    for reason, count in summary.dropped.items():
        console.print(f"  dropped {count}: {reason}")
    for event, count in summary.events.items():
        console.print(f"  {event}: {count}")
    for line in audit_lines(summary.audit):
        console.print(line, markup=False, highlight=False)
    if summary.motion:
        motion = summary.motion
        regions = (
            f", {motion['regions']} ran on {motion['windows_per_region_frame']:g} windows of"
            f" {motion['region']} px on average"
            if motion.get("regions")
            else ""
        )
        console.print(
            f"motion: {motion['reused']} of {motion.get('frames', summary.frames_out)} frames"
            " reused their source's last results"
            f" ({motion['share']:.0%}{regions}; the detector ran"
            f" {motion.get('pixel_share', 1.0):.0%} of every frame's pixels; min_area"
            f" {motion['min_area']:g}, refresh {motion['refresh']:g} s)",
            markup=False,
            highlight=False,
        )
    if len(summary.sources) > 1:
        console.print(source_table(summary))
    for source in summary.sources:
        troubles = [
            f"{source[key]} {label}"
            for key, label in (
                ("corrupt", "corrupt frames skipped"),
                ("reconnects", "reconnects"),
                ("restarts", "worker restarts"),
                ("missed", "frames missed while behind"),
            )
            if source.get(key)
        ]
        if troubles:
            gap = f" ({source['gap_seconds']} s gap)" if source.get("gap_seconds") else ""
            console.print(f"  {source['name']}: {', '.join(troubles)}{gap}")
        for warning in source.get("warnings", []):
            console.print(f"  [yellow]warning:[/] {warning}")


def audit_lines(audit: dict[str, Any]) -> list[str]:
    """One line per source of the live audit's summary (none without an audit)."""
    if not audit:
        return []
    share = f"{100 / audit['period']:.3g} %"
    caveat = ""
    if audit.get("architecture_only") or audit.get("depth_architecture_only"):
        caveat = " (architecture-only reference: random weights, not a trained model's accuracy)"
    lines = []
    for name, entry in audit["sources"].items():
        found = []
        if "fidelity" in entry:
            figure = entry["fidelity"]
            least = (audit.get("budget") or {}).get("min_fidelity")
            # Below the budget without an event: too few frames to be sure, said all the same.
            below = f", below the {least:g} budget" if least and figure["map50"] < least else ""
            found.append(f"fidelity {figure['map50']:.3f} over {figure['frames']} frames{below}")
        if "depth" in entry:
            depth = entry["depth"]
            found.append(
                f"depth AbsRel {depth['abs_rel']:.4f}, δ<1.25 {depth['delta1']:.3f} over"
                f" {depth['frames']} frames"
            )
        lines.append(
            f"audit: {name} {'; '.join(found) or 'nothing audited'} ({share} sampled,"
            f" {entry['skipped']} of {entry['sampled']} skipped){caveat}"
        )
    if audit.get("error"):
        lines.append(f"audit: {audit['error']}")
    return lines


class TelemetryWriter:
    """Appends one JSON line per second (counters, FPS and glass-to-result latency percentiles
    over that second, queue depths, CPU, RSS) to a file, opened before the run starts so a bad
    path fails early. A write that fails later (a full disk) stops the writing, is given as a
    SinkError to `on_error` at once (the pipeline's `fail`: the run stops as on a failed
    stage), and `close()` (or leaving the `with` block) raises it."""

    def __init__(
        self,
        telemetry: Telemetry,
        path: str | Path,
        interval: float = 1.0,
        on_error: Callable[[SinkError], None] | None = None,
    ) -> None:
        self.telemetry = telemetry
        self.path = Path(path)
        self.interval = interval
        self.on_error = on_error
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="telemetry", daemon=True)
        self._handle: TextIO | None = None
        self._error: SinkError | None = None

    def start(self) -> TelemetryWriter:
        """Open the file (a SinkError when it cannot be written) and start writing."""
        if self.path.is_dir():
            raise SinkError(f"cannot write telemetry {self.path}: it is a folder")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._handle = self.path.open("w", encoding="utf-8")
        except OSError as err:
            raise SinkError(f"cannot write telemetry {self.path}: {err.strerror or err}") from err
        self._thread.start()
        return self

    def close(self) -> None:
        """Write the last line, close the file; a SinkError when any line could not be written.
        Safe to call twice."""
        self._done.set()
        if self._thread.is_alive():
            self._thread.join()
        error, self._error = self._error, None
        if error is not None:
            raise error

    def __enter__(self) -> TelemetryWriter:
        return self.start()

    def __exit__(self, exc_type: object, *exc: object) -> None:
        try:
            self.close()
        except SinkError:
            if exc_type is None:  # do not hide the error already on its way out
                raise

    def _loop(self) -> None:
        assert self._handle is not None
        previous: dict[str, Any] | None = None
        try:
            with self._handle as handle:
                while not self._done.wait(self.interval):
                    previous = self._write(handle, previous)
                self._write(handle, previous)
        except OSError as err:
            error = SinkError(f"cannot write telemetry {self.path}: {err.strerror or err}")
            error.__cause__ = err
            self._error = error
            if self.on_error is not None and not self._done.is_set():  # the run is still on
                self.on_error(error)

    def _write(self, handle: TextIO, previous: dict[str, Any] | None) -> dict[str, Any]:
        line = telemetry_line(self.telemetry, previous)
        handle.write(json.dumps(line) + "\n")
        handle.flush()
        return line


def telemetry_line(telemetry: Telemetry, previous: dict[str, Any] | None) -> dict[str, Any]:
    """A telemetry file's line: the counters now, and FPS (the run's, each source's) over the
    time since `previous` line, measured (the last line covers less than a second)."""
    snapshot = telemetry.snapshot()
    frames, seconds = snapshot["frames_out"], snapshot["t"]
    if previous is not None:
        frames -= previous["frames_out"]
        seconds -= previous["t"]
    snapshot["fps"] = round(frames / seconds, 2) if seconds > 0 else 0.0
    before = (previous or {}).get("sources", {})
    for name, now in snapshot["sources"].items():
        frames = now["frames_out"] - before.get(name, {}).get("frames_out", 0)
        now["fps"] = round(frames / seconds, 2) if seconds > 0 else 0.0
    return snapshot


class TelemetrySampler:
    """The telemetry file's lines handed to `on_line` instead of written (a cluster's worker
    sends them to the driver, which writes the one file): one per `interval` seconds from
    `start()`, and a last one at `close()`."""

    def __init__(
        self, telemetry: Telemetry, on_line: Callable[[dict[str, Any]], None], interval: float = 1.0
    ) -> None:
        self.telemetry, self.on_line, self.interval = telemetry, on_line, interval
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="telemetry", daemon=True)

    def start(self) -> TelemetrySampler:
        self._thread.start()
        return self

    def close(self) -> None:
        self._done.set()
        if self._thread.is_alive():
            self._thread.join()

    def _loop(self) -> None:
        previous = None
        while not self._done.wait(self.interval):
            previous = telemetry_line(self.telemetry, previous)
            self.on_line(previous)
        self.on_line(telemetry_line(self.telemetry, previous))
