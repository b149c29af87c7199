"""`visionrt run`: parse options, build the pipeline and sinks, show progress and the summary."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console

from visionrt.backends.registry import choose_auto
from visionrt.cli.outputs import check_telemetry, metrics_token, start_pipeline
from visionrt.cli.run_config import configure_with_plan, flag_values
from visionrt.cli.run_display import describe_run, run_progress
from visionrt.cli.signals import STARTUP, install_signal_handlers
from visionrt.cli.stdout import print_out
from visionrt.config import RunConfig
from visionrt.errors import Interrupted, SinkError, SourceError, VisionRTError
from visionrt.pipeline import Pipeline
from visionrt.pipeline.hooks import Hooks
from visionrt.pipeline.outputs import OutputFolder, check_output_names, make_sinks
from visionrt.pipeline.plan_run import PlannedRun
from visionrt.sinks import Sink
from visionrt.telemetry.report import TelemetryWriter, print_summary
from visionrt.telemetry.stats import RunSummary

if TYPE_CHECKING:
    from visionrt.telemetry.metrics import MetricsServer
from visionrt.types import FrameResult

Opt = typer.Option
# `run_command`'s parameters that are not config flags; every other one is passed on to
# `flag_values` by name.
_NOT_CONFIG = frozenset({"config", "set_", "json_out", "plan", "no_plan", "quiet"})


def run_command(
    sources: Annotated[
        list[str] | None,
        typer.Argument(
            help="Video files, image folders/globs, /dev/videoN or camera index, rtsp/http URLs."
            " Default: the demo video."
        ),
    ] = None,
    model: Annotated[
        str | None,
        Opt(
            "--model",
            "-m",
            help="ONNX detector, OpenVINO .xml, .pt or .engine. Default: the demo model.",
        ),
    ] = None,
    backend: Annotated[
        str | None,
        Opt(
            help="onnxruntime, openvino, torch, tensorrt, null or auto. Default: the runtime"
            " that reads the model file (.onnx: onnxruntime, .xml: openvino, .pt: torch,"
            " .engine: tensorrt)."
        ),
    ] = None,
    device: Annotated[str | None, Opt(help="cpu, cuda[:N], tensorrt[:N], gpu, npu.")] = None,
    precision: Annotated[str | None, Opt(help="fp32, fp16, bf16, int8.")] = None,
    threads: Annotated[int | None, Opt(help="Inference threads (0: runtime default).")] = None,
    batch: Annotated[int | None, Opt(help="Frames per inference call.")] = None,
    imgsz: Annotated[str | None, Opt(help="Model input size: SIZE or HEIGHTxWIDTH.")] = None,
    conf: Annotated[float | None, Opt(help="Confidence threshold, 0-1.")] = None,
    iou: Annotated[float | None, Opt(help="NMS IoU threshold, 0-1.")] = None,
    mode: Annotated[
        str | None, Opt(help="auto, file (every frame) or live (freshest frame).")
    ] = None,
    max_frames: Annotated[int | None, Opt(help="Stop each source after N frames.")] = None,
    realtime: Annotated[
        bool,
        Opt("--realtime", help="Read video files at their frame rate, like cameras (live mode)."),
    ] = False,
    out: Annotated[str | None, Opt("--out", "-o", help="Output folder. Default: out.")] = None,
    no_video: Annotated[bool, Opt("--no-video", help="Do not write the annotated MP4.")] = False,
    no_jsonl: Annotated[bool, Opt("--no-jsonl", help="Do not write the JSONL.")] = False,
    telemetry: Annotated[str | None, Opt(help="Write per-second telemetry JSONL here.")] = None,
    config: Annotated[Path | None, Opt("--config", "-c", help="YAML config file.")] = None,
    set_: Annotated[list[str] | None, Opt("--set", help="Override KEY=VALUE (repeatable).")] = None,
    json_out: Annotated[bool, Opt("--json", help="Print the summary as JSON on stdout.")] = False,
    plan: Annotated[
        Path | None, Opt("--plan", help="Run a plan written by `visionrt tune`.")
    ] = None,
    no_plan: Annotated[
        bool, Opt("--no-plan", help="Ignore the tuned plan: run the FP32 reference.")
    ] = False,
    quiet: Annotated[bool, Opt("--quiet", "-q", help="No progress bar or table.")] = False,
    track: Annotated[
        bool, Opt("--track", help="Track objects per source: each box gets a track_id.")
    ] = False,
    detect_every: Annotated[
        int | None,
        Opt(
            help="With --track: run the detector on every Nth frame, track in between (1: on"
            " every frame, where a plan detects on fewer)."
        ),
    ] = None,
    tracker: Annotated[str | None, Opt(help="With --track: bytetrack (default) or ocsort.")] = None,
    slo_ms: Annotated[
        float | None,
        Opt(
            help="Live latency target: when glass-to-result p95 passes it, detect less often,"
            " then at a smaller input size (and back up when there is headroom)."
        ),
    ] = None,
    motion: Annotated[
        str | None,
        Opt(
            help="Fixed cameras: skip (a frame that did not change since the models last ran"
            " reuses their results; they run again at least every pipeline.motion.refresh s),"
            " or regions (also: the detector runs only on windows around motion and known"
            " objects; pipeline.motion.region_model sizes them)."
        ),
    ] = None,
    tile: Annotated[
        int | None,
        Opt(help="Detect on TILE-pixel tiles of each frame (high-resolution sources), merged."),
    ] = None,
    tile_overlap: Annotated[
        float | None, Opt(help="With --tile: overlap between tiles, a fraction (0.2).")
    ] = None,
    mot: Annotated[
        bool, Opt("--mot", help="With --track: write MOTChallenge text per source.")
    ] = False,
    coco: Annotated[
        bool, Opt("--coco", help="Write COCO detection results JSON per source (NAME.coco.json).")
    ] = False,
    csv: Annotated[
        bool, Opt("--csv", help="Write a CSV per source, a row per detection (NAME.csv).")
    ] = False,
    overwrite: Annotated[
        bool,
        Opt(
            "--overwrite",
            help="Remove an earlier run's outputs from --out first (without it, such a folder"
            " is refused).",
        ),
    ] = False,
    depth: Annotated[
        str | None,
        Opt(
            help="Depth model (Depth Anything v2 ONNX/IR) run beside the detector: each"
            " detection gets a distance."
        ),
    ] = None,
    depth_on: Annotated[
        str | None, Opt(help="Sources the depth model runs on, by name: rgb,cam2. Default: all.")
    ] = None,
    depth_size: Annotated[
        int | None,
        Opt(
            help="Depth input short side, a multiple of 14 (266, 364, 518). Default: the depth"
            " plan's (`tune --depth` measures the sizes), else 518."
        ),
    ] = None,
    depth_smoothing: Annotated[
        float | None,
        Opt(help="Smooth depth over time per source: EMA weight of the previous map, 0-1."),
    ] = None,
    depth_every: Annotated[
        int | None,
        Opt(
            help="Run depth on 1 frame in N per source; the frames between take its latest"
            " map (distances measured on it: stale where things moved). Default: the depth"
            " plan's N (`tune --depth` measures it), else 1."
        ),
    ] = None,
    metrics_port: Annotated[
        int | None,
        Opt(help="Serve Prometheus metrics on 127.0.0.1:PORT/metrics while the run lasts."),
    ] = None,
    audit: Annotated[
        float | None,
        Opt(
            help="Live accuracy audit: the FP32 reference on this share of frames (0-0.5), in a"
            " low-priority lane. Default: 0.02 when a plan runs, else off."
        ),
    ] = None,
    ray: Annotated[
        str | None,
        Opt(
            # '\\[': the help is rich markup, which takes a bare [ray] for a style and drops it.
            help="Run the sources on Ray workers: local (an embedded Ray on this machine), auto"
            " or HOST:PORT (a running cluster; these need visionrt\\[ray]); or processes: worker"
            " processes on this machine, no Ray (several pipelines where one is host-bound)."
        ),
    ] = None,
    workers: Annotated[
        str | None,
        Opt(
            help="--ray: workers, auto (what the cluster holds; for processes, this machine's"
            " cores / --worker-cpus) or a number."
        ),
    ] = None,
    worker_cpus: Annotated[float | None, Opt(help="--ray: CPUs per worker (2).")] = None,
    worker_gpus: Annotated[float | None, Opt(help="--ray: GPUs per worker (0).")] = None,
    max_attempts: Annotated[
        int | None, Opt(help="--ray: attempts per source when workers die (3).")
    ] = None,
) -> None:
    """Run a detector over sources, writing annotated video, JSONL and a telemetry summary."""
    flags = {name: value for name, value in locals().items() if name not in _NOT_CONFIG}
    STARTUP.during = " while starting: nothing processed"  # until the run's own handlers
    values = flag_values(**flags)
    console = Console(stderr=True, quiet=quiet)
    planned = configure_with_plan(plan, no_plan, config, set_, values)
    cfg, plan_note = planned.config, "\n".join(planned.notes)
    check_output_names(cfg)  # before anything is made or loaded
    if cfg.output.metrics_port:
        from visionrt.telemetry.metrics import check_host

        check_host(cfg.output.metrics_host, metrics_token(cfg))
    # Locked for this run (a second one into it is refused in one line); an earlier run's
    # outputs there refused now, or removed (with --overwrite) once the run is about to write.
    with OutputFolder.for_run(cfg) as folder:
        if cfg.cluster.address:
            from visionrt.cli.cluster import run_cluster

            # Each node's plan is its own machine's: resolved as here, for its fingerprint.
            def resolve(fingerprint: dict[str, Any]) -> tuple[RunConfig, str]:
                found = configure_with_plan(plan, no_plan, config, set_, values, fingerprint)
                return found.config, "\n".join(found.notes)

            run_cluster(cfg, plan_note, resolve, console, json_out, quiet, folder)
        else:
            _execute(planned, console, quiet, json_out, folder)


def _execute(
    planned: PlannedRun,
    console: Console,
    quiet: bool,
    json_out: bool,
    folder: OutputFolder,
) -> None:
    """Build the pipeline and sinks (the folder cleared for them first, with --overwrite), run,
    write the summary, raise the error that ended it."""
    cfg = planned.config
    if cfg.output.telemetry:
        check_telemetry(Path(cfg.output.telemetry))
    if cfg.backend == "auto":
        row, why = choose_auto(cfg.inference.device, Path(cfg.model))
        console.print(f"backend auto → {row.name}: {why}")
    told: list[str] = []  # notes said as the run went (a zone outside its source's frames)

    def tell(note: str) -> None:
        Console(stderr=True, soft_wrap=True).print(note, markup=False, highlight=False)
        told.append(note)

    hooks = Hooks(
        on_degrade=lambda change: Console(stderr=True).print(
            f"slo: {change.reason}: → {change.label}", markup=False, highlight=False
        ),
        on_audit=lambda event: Console(stderr=True).print(
            str(event), markup=False, highlight=False
        ),
        on_note=tell,
    )
    pipeline = start_pipeline(cfg, planned=planned, hooks=hooks)
    # Which configuration runs (the plan, or why none) and what the pipeline could not honour
    # as asked: said even with --quiet, once the model loaded (a bad model is the one line).
    for note in pipeline.notes:
        Console(stderr=True, soft_wrap=True).print(note, markup=False, highlight=False)
    said = len(pipeline.notes)
    metrics: MetricsServer | None = None
    try:
        STARTUP.check()  # a signal during start-up that a library swallowed
        describe_run(pipeline, cfg.model, console)
        folder.clear(console.print)
        sinks = make_sinks(cfg, pipeline)
        metrics = _serve_metrics(pipeline, cfg, console)
        telemetry = cfg.output.telemetry
        writer = (
            TelemetryWriter(pipeline.telemetry, telemetry, on_error=pipeline.fail).start()
            if telemetry
            else None
        )
    except BaseException:
        pipeline.close()  # nothing ran: let go of the backend and the sources
        if metrics is not None:
            metrics.close()
        raise
    install_signal_handlers(pipeline)
    try:
        summary, error = _run(pipeline, sinks, writer, cfg, console, quiet)
    finally:
        if metrics is not None:
            metrics.close()
    for note in summary.notes[said:]:  # what the run learnt (an audit that refuted the plan)
        if note not in told:
            Console(stderr=True, soft_wrap=True).print(note, markup=False, highlight=False)
    written = folder.finish(summary)  # however the run ended
    error = error or written  # the error that ended the run is the one to report
    if not quiet:
        print_summary(summary, console)
        for path in summary.outputs:
            console.print(f"wrote {path}")
    if json_out:
        try:
            print_out(json.dumps(summary.to_json()))
        except SinkError as err:
            error = error or err
    if error is not None:
        raise error
    if summary.error:
        raise SourceError(f"{summary.error} (outputs finalized with {summary.frames_out} frames)")
    if summary.interrupted:
        raise Interrupted(f"interrupted: outputs finalized with {summary.frames_out} frames")


def _serve_metrics(pipeline: Pipeline, cfg: RunConfig, console: Console) -> MetricsServer | None:
    if not cfg.output.metrics_port:
        return None
    from visionrt.telemetry.metrics import MetricsServer

    described = pipeline.task.describe()
    info = {k: str(described.get(k, "")) for k in ("runtime", "device", "precision")}
    server = MetricsServer(
        cfg.output.metrics_port, cfg.output.metrics_host, info, metrics_token(cfg)
    )
    server.follow(pipeline)
    pipeline.telemetry.add_listener(server)
    server.start()
    console.print(f"metrics: {server.url}")
    return server


def _run(
    pipeline: Pipeline,
    sinks: list[Sink],
    writer: TelemetryWriter | None,
    cfg: RunConfig,
    console: Console,
    quiet: bool,
) -> tuple[RunSummary, VisionRTError | None]:
    """Run into the sinks with a progress bar; the summary, and the error that ended the run
    (also in `summary.error`). The pipeline and the telemetry file are closed either way."""
    total = None if pipeline.live else sum(s.frame_count for s in pipeline.sources) or None
    if cfg.source.max_frames and total:
        total = min(total, cfg.source.max_frames * len(pipeline.sources))
    error: VisionRTError | None = None
    with run_progress("run", console, quiet) as progress:
        task = progress.add_task("run", total=total, fps=0.0)

        def advance(_result: FrameResult) -> None:
            elapsed = pipeline.telemetry.elapsed()
            done = pipeline.telemetry.frames_out
            progress.update(task, completed=done, fps=done / elapsed if elapsed else 0.0)

        try:
            summary = pipeline.run(sinks, on_result=None if quiet else advance)
        except VisionRTError as err:  # the summary still says what ran
            error, summary = err, pipeline.summary()
        except KeyboardInterrupt:  # the second signal: the sinks were finalized on the way out
            summary = pipeline.summary()
            error = Interrupted(f"aborted: outputs finalized with {summary.frames_out} frames")
        finally:
            pipeline.close()
            telemetry_error = _close_telemetry(writer)
    error = error or telemetry_error
    if error is not None and not summary.error:
        summary.error = str(error)
    return summary, error


def _close_telemetry(writer: TelemetryWriter | None) -> SinkError | None:
    if writer is None:
        return None
    try:
        writer.close()
    except SinkError as err:
        return err
    return None


def register(app: typer.Typer) -> None:
    app.command("run", help=run_command.__doc__)(run_command)
