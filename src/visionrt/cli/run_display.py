"""What `visionrt run` (and `serve`, `run --ray`) shows as it starts and runs: the header naming
what runs on which sources, and the progress bar."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from visionrt.pipeline import Pipeline


def run_progress(label: str, console: Console, quiet: bool, detail: str = "") -> Progress:
    """The bar a run shows: frames done (of the total when known), FPS (the task's `fps`
    field), `detail` (a format over the task's fields), time taken; gone when it ends."""
    return Progress(
        TextColumn(f"[bold]{label}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[fps]:.1f} FPS" + detail),
        TimeElapsedColumn(),
        console=console,
        transient=True,
        disable=quiet,
    )


def describe_run(pipeline: Pipeline, model: str, console: Console) -> None:
    info = pipeline.task.backend.info
    console.print(
        f"model {Path(model).name} · {info.runtime} {info.version} on {info.device}"
        f" ({info.precision}) · input {pipeline.task.input_hw[0]}x{pipeline.task.input_hw[1]}"
        f" · {'live' if pipeline.live else 'file'} mode"
    )
    if pipeline.parts.sized:  # the detectors of other frame sizes, and where they run
        for row in pipeline.parts.detector_rows(pipeline.names, pipeline.sources):
            on = ", ".join(row["sources"]) or "no source yet"
            console.print(f"detector {row['label']} · on {on}", markup=False)
    for task in pipeline.tasks[1:]:
        facts = task.describe()
        on = ", ".join(pipeline.names[i] for i in pipeline.depth_sources())
        label = " · ARCHITECTURE-ONLY (random weights)" if facts.get("architecture_only") else ""
        console.print(
            f"{task.name} {Path(str(facts.get('model', ''))).name} · {facts['runtime']}"
            f" ({facts['precision']}) · input {facts['input_hw'][0]}x{facts['input_hw'][1]}"
            f" · on {on}{label}",
            markup=False,
        )
    if info.precision == "fp32" and "BF16" in info.details.get("capabilities", ()):
        # OpenVINO would pick bf16 by itself on this CPU; we run what was asked, and say so.
        console.print(
            "note: this CPU has bf16, which this run does not use;"
            " `visionrt tune` measures bf16 and INT8 plans against this reference"
        )
