"""`visionrt bench`: model-only vs end-to-end FPS per variant, alternating, median and spread."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from visionrt.backends import BackendOptions
from visionrt.bench import Spread, Variant, run_bench
from visionrt.bench.report import ReportPoint, write_report
from visionrt.cli.run_config import parse_size
from visionrt.errors import ConfigError
from visionrt.models import demo_model_path
from visionrt.paths import DEMO_VIDEO
from visionrt.sinks.base import check_writable, write_output
from visionrt.tune.evaluate import LATENCY_STAGES


def parse_variant(text: str, base: BackendOptions, model: str) -> Variant:
    """`backend[:precision[:HxW[:model]]][+fold][+threads=N][+batch=N][+device=D][+key=value...]`,
    e.g. `openvino:int8:512x640:model.xml+fold+hint=throughput` or `torch:fp16+device=cuda`
    (other `key=value` go to the backend's settings)."""
    head, *extras = text.split("+")
    parts = head.split(":", 3)
    if not parts[0]:
        raise ConfigError(f"--variant '{text}': expected backend[:precision[:HxW[:model]]]")
    options = base
    if len(parts) > 1 and parts[1]:
        options = replace(options, precision=parts[1])
    if len(parts) > 2 and parts[2] and parts[2] != "native":
        height, width = parse_size(parts[2])
        options = replace(options, input_size=(height, width))
    settings = dict(options.settings)
    for extra in extras:
        key, sep, value = extra.partition("=")
        if key == "fold" and not sep:
            options = replace(options, fold_preprocess=True)
        elif key in ("threads", "batch") and sep and value.isdigit():
            changes: dict[str, Any] = {key: int(value)}
            options = replace(options, **changes)
        elif key == "device" and sep:
            options = replace(options, device=value)  # BackendOptions checks the name
        elif sep:
            settings[key] = value
        else:
            raise ConfigError(f"--variant '{text}': '+{extra}' is not fold or key=value")
    options = replace(options, settings=settings)
    label = text if len(parts) < 4 else text.replace(parts[3], Path(parts[3]).parent.name)
    return Variant(parts[0], options, parts[3] if len(parts) > 3 else model, label)


def bench_command(
    source: Annotated[str | None, typer.Argument(help="Video. Default: the demo video.")] = None,
    model: Annotated[str | None, typer.Option("--model", "-m")] = None,
    variant: Annotated[
        list[str] | None,
        typer.Option(
            help="backend[:precision[:HxW[:model]]], repeatable. Default: onnxruntime:fp32."
        ),
    ] = None,
    threads: Annotated[int, typer.Option(help="Inference threads (0: runtime default).")] = 0,
    runs: Annotated[int, typer.Option(help="Repetitions (alternating variants).")] = 3,
    calls: Annotated[int, typer.Option(help="Model-only calls per repetition.")] = 100,
    max_frames: Annotated[int, typer.Option(help="End-to-end frames (0: all).")] = 0,
    interleave: Annotated[
        int,
        typer.Option(
            help="Also measure efficiency from N short end-to-end segments interleaved with"
            " model-only calls (cancels machine drift)."
        ),
    ] = 0,
    json_out: Annotated[
        Path | None, typer.Option("--json", help="Write results as JSON here.")
    ] = None,
    report: Annotated[
        Path | None,
        typer.Option(help="Write an HTML report (throughput vs p99, stage times) here."),
    ] = None,
    find_batch: Annotated[
        int,
        typer.Option(
            help="Instead: find each variant's batch up to N — doubled until out of memory or"
            " no gain, then bisected (on a GPU: the largest batch that fits and pays)."
        ),
    ] = 0,
) -> None:
    """Measure model-only and end-to-end FPS of backend variants on a real video."""
    for flag, value, least in (
        ("--runs", runs, 1),
        ("--calls", calls, 1),
        ("--interleave", interleave, 0),
        ("--find-batch", find_batch, 0),
    ):
        if value < least:
            raise ConfigError(f"{flag}: expected a whole number >= {least}, got {value}")
    for flag, destination in (("--json", json_out), ("--report", report)):
        if destination is not None:  # before the measuring: they are written at the end
            check_writable(destination, flag)
    model_path = model or str(demo_model_path())
    video = source or str(DEMO_VIDEO)
    base = BackendOptions(threads=threads)
    variants = [parse_variant(v, base, model_path) for v in (variant or ["onnxruntime:fp32"])]
    console = Console(stderr=True)
    if find_batch:
        _find_batches(variants, video, find_batch, max(3, calls // 10), console, json_out)
        return
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("bench", total=runs * len(variants))
        results = run_bench(
            variants,
            video,
            runs,
            calls,
            max_frames,
            interleave,
            on_step=lambda label, done: progress.update(task, description=label, completed=done),
        )
    table = Table(title=f"{Path(video).name} · {runs} runs · median (min–max)")
    for column in (
        "variant",
        "model-only ms p50",
        "model-only FPS",
        "plain session FPS",
        "end-to-end FPS",
        "efficiency",
    ):
        table.add_column(column)
    for result in results:
        table.add_row(
            result.label,
            str(Spread.of(result.model_only_ms_p50)),
            str(Spread.of(result.model_only_fps)),
            str(Spread.of(result.plain_fps)) if result.plain_fps else "same session",
            str(Spread.of(result.end_to_end_fps)),
            str(result.efficiency),
        )
    console.print(
        "efficiency = end-to-end FPS / model-only FPS of the plain session (the runtime's own"
        " defaults on the same model) where one is listed, else of the pipeline's own session"
    )
    # Piped or logged, rich would fold the table to 80 columns.
    Console(width=None if sys.stdout.isatty() else 150).print(table)
    if report is not None:
        points = []
        for result in results:
            stages = result.details["stages"]
            points.append(
                ReportPoint(
                    result.label,
                    Spread.of(result.end_to_end_fps).median,
                    sum(stages[s]["p99"] for s in LATENCY_STAGES if s in stages),
                    stages={name: figures["mean"] for name, figures in stages.items()},
                )
            )
        written = write_report(points, report, f"visionrt bench · {Path(video).name}", "--report")
        console.print(f"wrote {', '.join(str(p) for p in written)}")
    if json_out:
        write_output(
            json_out,
            json.dumps(
                [
                    {
                        "variant": r.label,
                        "model_only_fps": r.model_only_fps,
                        "plain_session_fps": r.plain_fps,
                        "end_to_end_fps": r.end_to_end_fps,
                        "model_only_ms_p50": r.model_only_ms_p50,
                        "model_only_ms_p99": r.model_only_ms_p99,
                        "interleaved_efficiency": r.interleaved,
                        "efficiency": r.efficiency.median,
                        "details": r.details,
                    }
                    for r in results
                ],
                indent=2,
            ),
            "--json",
        )


def _find_batches(
    variants: list[Variant],
    video: str,
    max_batch: int,
    calls: int,
    console: Console,
    json_out: Path | None,
) -> None:
    from visionrt.tune.batch import BatchPoint, batch_throughput, search_batch

    found = {}
    for variant in variants:
        measure = batch_throughput(variant.model, variant.backend, variant.options, video, calls)

        def on_point(p: BatchPoint, v: Variant = variant) -> None:
            console.print(
                f"{v.label} batch {p.batch}: " + (f"{p.fps:.1f} frames/s" if p.fits else p.error)
            )

        search = search_batch(measure, max_batch, on_point=on_point)
        console.print(
            f"[bold]{variant.label}[/]: batch {search.best} (largest that fits:"
            f" {search.largest_fit}; {search.stopped})"
        )
        found[variant.label] = search.to_json()
    if json_out:
        write_output(json_out, json.dumps(found, indent=2), "--json")


def register(app: typer.Typer) -> None:
    app.command("bench", help=bench_command.__doc__)(bench_command)
