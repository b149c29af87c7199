"""`visionrt profile`: where a run's time goes, and what to try first."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from visionrt.backends import BackendOptions
from visionrt.bench.profile import THREADS, Profile, profile_pipeline, write_trace
from visionrt.cli.stdout import print_out
from visionrt.errors import ConfigError
from visionrt.models import demo_model_path
from visionrt.paths import DEMO_VIDEO
from visionrt.pipeline import Pipeline
from visionrt.sinks import JsonlSink, Sink, VideoSink
from visionrt.sinks.base import check_writable, unwritable
from visionrt.sinks.lock import OutputLock
from visionrt.sources import SourceOptions

Opt = typer.Option


def _table(profile: Profile) -> Table:
    table = Table(title=f"visionrt profile · {profile.frames} frames · {profile.fps:.1f} FPS")
    for column in ("stage", "ms per frame (mean)", "busy share of wall time"):
        table.add_column(column)
    groups = {stage: group for group, stages in THREADS.items() for stage in stages}
    for stage, ms in profile.stage_ms.items():
        share = profile.busy.get(groups.get(stage, ""), 0.0)
        table.add_row(stage, f"{ms:.2f}", f"{share:.0%}")
    return table


def profile_command(
    source: Annotated[str | None, typer.Argument(help="Video. Default: the demo video.")] = None,
    model: Annotated[str | None, Opt("--model", "-m", help="Model file. Default: demo.")] = None,
    backend: Annotated[str, Opt(help="Backend ('' : the one that reads the file).")] = "",
    precision: Annotated[
        str | None, Opt(help="fp32, fp16, bf16, int8 (given: the tuned plan is not used).")
    ] = None,
    max_frames: Annotated[int, Opt(help="Frames to profile (0: all).")] = 200,
    video: Annotated[bool, Opt("--video/--no-video", help="Include the MP4 sink.")] = True,
    out: Annotated[Path, Opt("--out", "-o", help="Folder for the sinks' files.")] = Path(
        "out/profile"
    ),
    trace: Annotated[Path | None, Opt(help="Write a Chrome/Perfetto trace here.")] = None,
    torch_profiler: Annotated[
        Path | None,
        Opt("--torch-profiler", help="torch backend: write torch.profiler's trace here."),
    ] = None,
    json_out: Annotated[bool, Opt("--json", help="Print the profile as JSON.")] = False,
    plan: Annotated[
        Path | None, Opt("--plan", help="Profile a plan written by `visionrt tune`.")
    ] = None,
    no_plan: Annotated[
        bool, Opt("--no-plan", help="Ignore the tuned plan: profile the FP32 reference.")
    ] = False,
) -> None:
    """Run the pipeline and report per-stage time, queue occupancy, CPU per thread, and a
    verdict naming the bottleneck with what to try."""
    if plan is not None and no_plan:
        raise ConfigError("--plan and --no-plan: expected one of them")
    for flag, destination in (("--trace", trace), ("--torch-profiler", torch_profiler)):
        if destination is not None:  # before the run: it is written at the end
            check_writable(destination, flag)
    path = source or str(DEMO_VIDEO)
    with OutputLock(out, "visionrt profile"):  # a run writing there now is not overwritten
        result = _profile(path, model, backend, precision, max_frames, video, out,
                          torch_profiler, False if no_plan else plan)  # fmt: skip
    if json_out:
        print_out(json.dumps(result.to_json()))
        return
    console = Console(soft_wrap=True)
    console.print(_table(result))
    peak: dict[str, float] = {}
    for sample in result.queues:
        for name, depth in sample.items():
            if name != "t":
                peak[name] = max(peak.get(name, 0), depth)
    console.print(
        "queues (peak frames waiting): " + ", ".join(f"{k} {v:g}" for k, v in peak.items())
    )
    cpu = sorted(result.cpu_by_thread.items(), key=lambda kv: -kv[1])[:6]
    console.print("CPU seconds by thread: " + ", ".join(f"{n} {s:.1f}" for n, s in cpu))
    console.print(f"[bold]verdict:[/] {result.verdict}")
    if trace is not None:
        write_trace(result, trace, "--trace")
        console.print(f"wrote {trace} (open in ui.perfetto.dev or chrome://tracing)")


def _profile(
    path: str,
    model: str | None,
    backend: str,
    precision: str | None,
    max_frames: int,
    video: bool,
    out: Path,
    torch_profiler: Path | None,
    plan: Path | bool | None,
) -> Profile:
    """Run the pipeline into the sinks under the profiler (the pipeline is closed either way)."""
    # Like `run`: the plan cached for this model on this machine unless told otherwise.
    pipeline = Pipeline(
        [path],
        model or demo_model_path(),
        backend,
        BackendOptions(precision=precision) if precision else None,
        source_options=SourceOptions(mode="file", max_frames=max_frames),
        plan=plan,
    )
    for note in pipeline.notes:
        Console(stderr=True, soft_wrap=True).print(note, markup=False, highlight=False)
    stem, first = Path(path).stem, pipeline.sources[0]
    err = Console(stderr=True, soft_wrap=True)
    try:
        sinks: list[Sink] = [VideoSink(out / f"{stem}.mp4", first.fps)] if video else []
        sinks.append(JsonlSink(out / f"{stem}.jsonl", pipeline.names[:1], [first.name]))
        with err.status("profiling"):
            if torch_profiler is not None:
                if pipeline.task.backend.info.runtime != "torch":
                    err.print("note: --torch-profiler applies to the torch backend only")
                    result = profile_pipeline(pipeline, sinks)
                else:
                    import torch

                    with torch.profiler.profile() as torch_trace:
                        result = profile_pipeline(pipeline, sinks)
                    try:
                        torch_trace.export_chrome_trace(str(torch_profiler))
                    except OSError as error:  # checked writable at the start: a full disk
                        raise unwritable(torch_profiler, error, "--torch-profiler") from error
                    err.print(f"wrote {torch_profiler}")
            else:
                result = profile_pipeline(pipeline, sinks)
    finally:
        pipeline.close()
    return result


def register(app: typer.Typer) -> None:
    app.command("profile", help=profile_command.__doc__)(profile_command)
