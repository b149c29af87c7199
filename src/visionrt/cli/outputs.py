"""What `visionrt run` writes: the sinks for its outputs (and their names, checked before anything
opens), the output folder it claims, and summary.json."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable
from pathlib import Path

from rich.console import Console

from visionrt.cli.signals import start_up
from visionrt.config import RunConfig
from visionrt.errors import ConfigError, SinkError
from visionrt.pipeline import Pipeline, pipeline_for
from visionrt.pipeline.hooks import Hooks
from visionrt.pipeline.plan_run import PlannedRun
from visionrt.sinks import JsonlSink, Sink
from visionrt.sinks.base import check_writable, partial_path
from visionrt.sinks.files import named_after
from visionrt.sinks.stale import SHOWN, SUMMARY, claim_folder, remove_outputs
from visionrt.sources.naming import default_name, split_name, unique_names
from visionrt.telemetry.stats import RunSummary


def start_pipeline(
    cfg: RunConfig,
    service: bool = False,
    planned: PlannedRun | None = None,
    hooks: Hooks | None = None,
) -> Pipeline:
    """The Pipeline `cfg` describes (its plan settled with the flags already: `planned`), built
    under the start-up signal handling: a Ctrl-C while models load stops at once."""
    return start_up(lambda: pipeline_for(cfg, service=service, planned=planned, hooks=hooks))


def metrics_token(cfg: RunConfig) -> str:
    """The token metrics served beyond this machine ask for: the config's, else the
    environment's (a secret kept off the command line)."""
    return cfg.output.metrics_token or os.environ.get("VISIONRT_METRICS_TOKEN", "")


def make_sinks(config: RunConfig, pipeline: Pipeline) -> list[Sink]:
    """Each source's files (`RunConfig.source_files`: an annotated MP4, MOT text, COCO results
    and CSV when asked, and with a depth model its colourised MP4 and map files where it runs),
    named after the source, then one JSONL (each line's `source` the source's name, as in
    summary.json)."""
    out = Path(config.output.dir)
    names = pipeline.names
    check_writable(out / "summary.json")  # also when no other output is asked for
    files = config.source_files()
    depth_on = set(pipeline.depth_sources()) if config.depth.model else set()
    sinks: list[Sink] = []
    for i, source in enumerate(pipeline.sources):
        sinks += files.sinks(named_after(out, names[i]), i, source.fps, i in depth_on)
    if config.output.jsonl:
        name = f"{names[0]}.jsonl" if len(names) == 1 else "detections.jsonl"
        paths = [source.name for source in pipeline.sources]
        sinks.append(JsonlSink(out / name, names, paths))
    return sinks


def check_telemetry(path: Path) -> None:
    check_writable(path, "telemetry")


def write_summary(summary: RunSummary, path: Path) -> None:
    """summary.json, whole or not at all (written as summary.partial.json, then renamed)."""
    partial = partial_path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial.write_text(json.dumps(summary.to_json(), indent=2), encoding="utf-8")
        partial.replace(path)
    except OSError as err:
        with contextlib.suppress(OSError):
            partial.unlink(missing_ok=True)
        raise SinkError(f"cannot write {path}: {err.strerror or err}") from err


def check_output_names(config: RunConfig) -> list[str]:
    """Refuse, before anything opens or loads, two sources whose outputs would share a file
    name (a source named `a` writes a.depth.mp4 with depth; one named `a.depth` writes
    a.depth.mp4). Names as the pipeline gives them (`sources.naming`). Returns the names of
    every file and folder the run writes in `output.dir` (with their `.partial` names)."""
    named = [split_name(spec) for spec in config.sources]
    given = [bool(name) for name, _ in named]
    names = unique_names(
        [name or default_name(spec, i) for i, (name, spec) in enumerate(named)], given
    )
    depth_on = [i for i, name in enumerate(names) if not config.depth.on or name in config.depth.on]
    chosen = config.source_files()
    owners: dict[str, str] = {}
    for i, name in enumerate(names):
        files = [f"{name}{suffix}" for suffix in chosen.suffixes(i in depth_on)]
        if config.output.jsonl and len(names) == 1:
            files.append(f"{name}.jsonl")
        # A file is written under its `.partial` name first: a source named `a.partial`
        # writes a.partial.csv, where `a` writes until it is done.
        for file in [*files, *(partial_path(Path(f)).name for f in files)]:
            if file in owners and owners[file] != name:
                raise ConfigError(
                    f"sources '{owners[file]}' and '{name}' would both write {file}: name one"
                    f" of them (NAME=SOURCE)"
                )
            owners[file] = name
    reserved = {SUMMARY, "detections.jsonl"}
    if clash := sorted(reserved & set(owners)):
        raise ConfigError(f"source '{owners[clash[0]]}' would overwrite {clash[0]}: rename it")
    run_files = [SUMMARY, "detections.jsonl"] if len(names) > 1 else [SUMMARY]
    if config.cluster.address:  # a cluster run's lists of files elsewhere and of its workers
        from visionrt.distributed.outputs import MANIFEST
        from visionrt.distributed.ray_run import TARGETS

        run_files += [MANIFEST, TARGETS]
    return [*owners, *run_files]


def claim_output_folder(
    config: RunConfig, writes: list[str], console: Console
) -> Callable[[], None]:
    """Refuse a folder holding an earlier run's outputs (sinks.stale); with `output.overwrite`,
    what removes them (and says so), to call once the run is about to write. The run's own
    sources are never removed."""
    out = Path(config.output.dir)
    stale = claim_folder(out, writes, config.output.overwrite)
    sources = [Path(spec) for _, spec in (split_name(s) for s in config.sources)]

    def clear() -> None:
        removed = remove_outputs(stale, [path for path in sources if path.exists()])
        if removed:
            shown = ", ".join(path.name for path in removed[:SHOWN])
            more = f" and {len(removed) - SHOWN} more" if len(removed) > SHOWN else ""
            console.print(f"--overwrite: removed an earlier run's {shown}{more} from {out}")

    return clear
