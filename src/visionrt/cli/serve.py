"""`visionrt serve`: the pipeline as a long-running service over cameras added and removed at
runtime, with its HTTP API, live view, events and metrics; parse, build, run until stopped."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from visionrt.cli.outputs import check_telemetry
from visionrt.cli.run_config import configure_with_plan
from visionrt.cli.run_display import describe_run
from visionrt.cli.signals import STARTUP, install_signal_handlers, start_up
from visionrt.config import DepthConfig, RunConfig, given_options, load_config
from visionrt.errors import ConfigError
from visionrt.pipeline import Pipeline, pipeline_for
from visionrt.pipeline.outputs import OutputFolder, check_output_names
from visionrt.pipeline.plan_run import PlannedRun
from visionrt.sources.naming import split_name

Opt = typer.Option


def serve_command(
    sources: Annotated[
        list[str] | None,
        typer.Argument(
            help="Cameras to start with (NAME=URI or URI): rtsp/http URLs, /dev/videoN, video"
            " files (paced at their frame rate, looped). Default: the demo video."
        ),
    ] = None,
    config: Annotated[
        Path | None, Opt(help="YAML: the run's sections, plus serve: and analytics:.")
    ] = None,
    set_: Annotated[
        list[str] | None, Opt("--set", help="KEY=VALUE over the config, e.g. serve.port=9000.")
    ] = None,
    host: Annotated[
        str | None, Opt(help="Listen address (default 127.0.0.1; others need a token).")
    ] = None,
    port: Annotated[int | None, Opt(help="HTTP port of the API and live view (8080).")] = None,
    token: Annotated[
        str | None,
        Opt(help="API token asked of every request (also VISIONRT_TOKEN).", show_default=False),
    ] = None,
    out: Annotated[str | None, Opt(help="Folder for detections.jsonl and summary.json.")] = None,
    overwrite: Annotated[
        bool,
        Opt(
            "--overwrite",
            help="Replace an earlier run's or service's outputs in --out (refused without it).",
        ),
    ] = False,
    track: Annotated[bool, Opt("--track", help="Track objects (zones and lines need it).")] = False,
    plan: Annotated[Path | None, Opt(help="Run this tuned plan.")] = None,
    no_plan: Annotated[bool, Opt("--no-plan", help="Run the model as given, no plan.")] = False,
    quiet: Annotated[bool, Opt("--quiet", "-q", help="Only errors and the URL.")] = False,
) -> None:
    """Serve cameras until stopped: add and remove them over HTTP, watch them in a browser,
    send zone, line and source events to MQTT and webhooks (see docs/serve.md)."""
    STARTUP.during = " while starting: nothing processed"
    values = _values(sources, host, port, token, out, track, config, set_)
    if overwrite:
        values["output"]["overwrite"] = True
    console = Console(stderr=True, quiet=quiet)
    # Named before the plan is settled (its geometry checks open each source, for seconds): a
    # bad name is refused at once, and the checks see the names the service runs under.
    given = load_config(config, set_, values).sources
    if given:
        values["sources"] = _named(given)
    planned = configure_with_plan(plan, no_plan, config, set_, values)
    named = tuple(_named(planned.config.sources))  # the demo video, when none was given
    planned = replace(planned, config=replace(planned.config, sources=named))
    cfg = planned.config
    _check_depth(cfg.depth, [split_name(spec)[0] for spec in cfg.sources])
    from visionrt.serve.app import check_bind

    check_bind(cfg.serve.host, cfg.serve.token)
    if cfg.output.telemetry:
        check_telemetry(Path(cfg.output.telemetry))
    # One service per folder (locked), and never over an earlier run's or service's outputs
    # unless --overwrite (then removed once the service is about to write): pipeline.outputs.
    writes = [*check_output_names(cfg), "detections.jsonl"]
    with OutputFolder(cfg, writes, "visionrt serve") as folder:
        _serve(planned, console, folder)


def _values(
    sources: list[str] | None,
    host: str | None,
    port: int | None,
    token: str | None,
    out: str | None,
    track: bool,
    config: Path | None,
    overrides: list[str] | None,
) -> dict[str, Any]:
    """The flags as config values; files are paced and looped unless the user said otherwise
    (a service watches cameras; a file stands in for one); no MP4 (a service runs for weeks)."""
    given = given_options(config, overrides, {})
    serve = {"host": host, "port": port, "token": token or os.environ.get("VISIONRT_TOKEN")}
    own = given.get("source") or {}
    source: dict[str, Any] = {} if "realtime" in own else {"realtime": True}
    realtime = own.get("realtime", True)
    if "loop" not in own and realtime:  # a file read as fast as it decodes is not looped
        source["loop"] = True
    if own.get("loop") and not realtime:  # serve has no --realtime to name
        raise ConfigError(
            "source.loop: loops a file paced at its frame rate, and source.realtime is false:"
            " drop one of them"
        )
    output: dict[str, Any] = {"dir": out or (given.get("output") or {}).get("dir", "out/serve")}
    if "video" not in (given.get("output") or {}):
        output["video"] = False
    values: dict[str, Any] = {
        "serve": {k: v for k, v in serve.items() if v is not None},
        "source": source,
        "output": output,
    }
    if sources:
        values["sources"] = list(sources)
    if track:
        values["pipeline"] = {"tracking": {"enabled": True}}
    return values


def _check_depth(depth: DepthConfig, names: Sequence[str]) -> None:
    """The depth section as serve takes it: from the config alone (serve has neither --depth
    nor --depth-on, which the pipeline's own messages name)."""
    if depth.on and not depth.model:
        raise ConfigError(
            "depth.on names sources for a depth model, and none is given: set depth.model"
            " (--set depth.model=MODEL)"
        )
    unknown = sorted(set(depth.on) - set(names))
    if unknown:
        raise ConfigError(f"depth.on: no source named '{unknown[0]}' (sources: {', '.join(names)})")


def _named(specs: Sequence[str]) -> list[str]:
    """Every source by name (`cam=URI`): the API, previews and events call cameras by name."""
    from visionrt.serve.requests import camera_names

    return [f"{name}={uri}" for name, uri in camera_names(specs)]


def _serve(planned: PlannedRun, console: Console, folder: OutputFolder) -> None:
    from visionrt.serve.app import HttpServer, make_app
    from visionrt.serve.outputs import ServiceSinks
    from visionrt.serve.preview import PreviewHub
    from visionrt.serve.service import Service
    from visionrt.serve.startup import start_reachable
    from visionrt.sinks.events import EventPublisher, parse_event_targets
    from visionrt.telemetry.metrics import MetricsServer
    from visionrt.telemetry.report import TelemetryWriter, print_summary

    cfg = planned.config
    targets = parse_event_targets(cfg.serve.events, "serve.events")  # before a model loads
    out = Path(cfg.output.dir)
    # A camera's own files as a run's, but MOT text and depth files (not written by a service).
    files = replace(cfg.source_files(), mot=False, depth_video=False, depth_maps="")
    sinks = ServiceSinks(out, cfg.output.jsonl, files)

    def start(runs: RunConfig) -> Pipeline:
        return pipeline_for(runs, service=True, planned=planned)

    # A camera or stream that cannot be reached now is left out, to be opened again once the
    # service runs (as one that drops later): it never stops the others from starting.
    pipeline, runs, down = start_up(lambda: start_reachable(cfg, start))
    folder.clear(console.print)  # with --overwrite: the earlier outputs, now it is to write
    for note in pipeline.notes:
        Console(stderr=True, soft_wrap=True).print(note, markup=False, highlight=False)
    telemetry = pipeline.telemetry
    publisher = EventPublisher(
        targets,
        cfg.serve.event_queue,
        on_drop=lambda transport, reason: telemetry.count(f"events: dropped ({reason})"),
    )
    preview = PreviewHub(cfg.serve.preview_rate, max_width=cfg.serve.preview_width)
    uris = [split_name(spec)[1] for spec in runs.sources]
    service = Service(
        pipeline, sinks, preview, publisher, uris, cfg.serve.files, cfg.serve.down_after
    )
    attempts = cfg.source.reconnect_attempts
    for camera in down:
        service.retry(camera)
        console.print(
            f"{camera.name}: unreachable ({camera.error}): reconnecting ({attempts} attempts,"
            f" from {cfg.source.reconnect_backoff:g} s apart); the others start",
            markup=False,
            highlight=False,
        )
    described = pipeline.task.describe()
    info = {k: str(described.get(k, "")) for k in ("runtime", "device", "precision")}
    # Scraped through the API's /metrics (behind its token), never served on its own.
    metrics = MetricsServer(0, cfg.serve.host, info, cfg.serve.token)
    service.on_change = lambda: metrics.follow(pipeline)
    service.on_change()
    telemetry.add_listener(metrics)
    http: HttpServer | None = None
    writer = None
    summary = None
    try:
        describe_run(pipeline, cfg.model, console)
        app = make_app(service, cfg.serve.token, metrics, cfg.serve.host)
        http = HttpServer(app, cfg.serve.host, cfg.serve.port).start()
        if cfg.output.telemetry:
            writer = TelemetryWriter(telemetry, cfg.output.telemetry, on_error=pipeline.fail)
            writer.start()
        Console(stderr=True).print(
            f"serving {len(pipeline.names)} source(s) at {http.url}/"
            f"{'?token=…' if cfg.serve.token else ''} (Ctrl-C to stop)",
            markup=False,
            highlight=False,
        )
        install_signal_handlers(pipeline)
        STARTUP.check()
        summary = service.run()
    finally:
        if http is not None:
            http.close()
        if writer is not None:
            writer.close()
        publisher.close()
        preview.close()
        pipeline.close()
        summary = summary or pipeline.summary()
        cameras = service.describe(gone=True)  # a removed camera's row too
        summary.service = {"cameras": cameras, "events": publisher.stats()}
        written = folder.finish(summary)
        if written is not None:
            console.print(f"summary.json: {written}")
    print_summary(summary, console)


def register(app: typer.Typer) -> None:
    app.command("serve", help=serve_command.__doc__)(serve_command)
