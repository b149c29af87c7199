"""A self-contained HTML report (with PNG copies) of measured configurations: throughput against
p99 latency with the Pareto front marked and each point's fidelity, and where each
configuration's time goes per stage. Drawn with matplotlib (the `report` extra)."""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from visionrt.errors import BackendUnavailable
from visionrt.sinks.base import write_output

STAGE_ORDER = ("decode", "preprocess", "infer", "postprocess", "sink")


@dataclass(frozen=True, slots=True)
class ReportPoint:
    """One configuration: FPS, p99 latency (ms), fidelity (None when not measured) and mean ms
    per frame per stage."""

    label: str
    fps: float
    p99_ms: float
    fidelity: float | None = None
    stages: dict[str, float] = field(default_factory=dict)
    note: str = ""


def pareto_front(points: Sequence[ReportPoint]) -> list[ReportPoint]:
    """The points no other point beats on both throughput (higher) and p99 (lower)."""
    return [
        p
        for p in points
        if not any(
            (q.fps >= p.fps and q.p99_ms <= p.p99_ms) and (q.fps > p.fps or q.p99_ms < p.p99_ms)
            for q in points
        )
    ]


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as err:
        raise BackendUnavailable(
            "the HTML report needs matplotlib: pip install 'visionrt[report]'"
        ) from err
    return plt


def write_report(
    points: Sequence[ReportPoint], path: Path, title: str, what: str = "report"
) -> list[Path]:
    """Write `path` (HTML, images embedded) and PNG copies beside it; returns the files. A file
    that cannot be written (a full disk) is a SinkError naming it, `what` naming the output."""
    plt = _pyplot()
    front = pareto_front(points)
    figure, axes = plt.subplots(figsize=(8, 5), dpi=110)
    for point in points:
        on_front = point in front
        axes.scatter(point.p99_ms, point.fps, s=60 if on_front else 30,
                     color="tab:red" if on_front else "tab:blue", zorder=3)  # fmt: skip
        fid = f" · fid {point.fidelity:.3f}" if point.fidelity is not None else ""
        axes.annotate(f"{point.label}{fid}", (point.p99_ms, point.fps), fontsize=7,
                      xytext=(4, 4), textcoords="offset points")  # fmt: skip
    ordered = sorted(front, key=lambda p: p.p99_ms)
    axes.plot([p.p99_ms for p in ordered], [p.fps for p in ordered], "--", color="tab:red",
              label="Pareto front", zorder=2)  # fmt: skip
    axes.set_xlabel("p99 latency per frame (ms)")
    axes.set_ylabel("end-to-end FPS")
    axes.set_title(title, fontsize=10)
    axes.grid(alpha=0.3)
    axes.legend(fontsize=8)
    pareto_png = path.with_name(path.stem + "-pareto.png")
    figure.tight_layout()
    pngs = {pareto_png: _png(figure)}
    plt.close(figure)

    figure, axes = plt.subplots(figsize=(8, 0.5 * len(points) + 1.5), dpi=110)
    names = [p.label for p in points]
    left = [0.0] * len(points)
    stages = [s for s in STAGE_ORDER if any(s in p.stages for p in points)]
    stages += sorted({s for p in points for s in p.stages} - set(stages))
    for stage in stages:
        widths = [p.stages.get(stage, 0.0) for p in points]
        axes.barh(names, widths, left=left, label=stage)
        left = [a + b for a, b in zip(left, widths, strict=True)]
    axes.set_xlabel("mean ms per frame, by stage (stages overlap in time: this is work, not wall)")
    axes.legend(fontsize=8, ncols=len(stages))
    axes.tick_params(axis="y", labelsize=7)
    stages_png = path.with_name(path.stem + "-stages.png")
    figure.tight_layout()
    pngs[stages_png] = _png(figure)
    plt.close(figure)

    rows = "".join(
        f"<tr><td>{html.escape(p.label)}</td><td>{p.fps:.1f}</td><td>{p.p99_ms:.0f}</td>"
        f"<td>{'' if p.fidelity is None else f'{p.fidelity:.3f}'}</td>"
        f"<td>{'yes' if p in front else ''}</td><td>{html.escape(p.note)}</td></tr>"
        for p in points
    )
    images = "".join(
        f'<img alt="{png.stem}" src="data:image/png;base64,{base64.b64encode(data).decode()}"><br>'
        for png, data in pngs.items()
    )
    write_output(
        path,
        f"<!doctype html><meta charset='utf-8'><title>{html.escape(title)}</title>"
        "<style>body{font-family:sans-serif;margin:2em}td,th{padding:2px 10px;text-align:left}"
        "</style>"
        f"<h1>{html.escape(title)}</h1>{images}"
        "<table><tr><th>configuration</th><th>FPS</th><th>p99 ms</th><th>fidelity</th>"
        f"<th>Pareto</th><th>note</th></tr>{rows}</table>",
        what,
    )
    for png, data in pngs.items():  # after the page: a page that failed leaves no images
        write_output(png, data, what)
    return [path, pareto_png, stages_png]


def _png(figure: Any) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return buffer.getvalue()
