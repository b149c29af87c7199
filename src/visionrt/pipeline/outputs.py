"""A run's output folder, the one decision for every entry point (`visionrt run`, `demo`, `serve`,
`run --ray` and the Python API's `run_configured`): where outputs go, what becomes of an earlier
run's files there, which sinks a run writes, and summary.json at its end."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from visionrt.config import RunConfig
from visionrt.errors import ConfigError, SinkError
from visionrt.sinks import JsonlSink, Sink
from visionrt.sinks.base import check_writable, partial_path
from visionrt.sinks.files import named_after
from visionrt.sinks.lock import OutputLock
from visionrt.sinks.stale import SHOWN, SUMMARY, claim_folder, remove_outputs
from visionrt.sources.naming import default_name, split_name, unique_names
from visionrt.telemetry.stats import RunSummary

if TYPE_CHECKING:
    from visionrt.pipeline.core import Pipeline

Say = Callable[[str], None]
# A cluster run's files beside its outputs: the list of the files its workers wrote elsewhere,
# and its workers' metrics endpoints for Prometheus' file-based service discovery.
MANIFEST, TARGETS = "manifest.json", "prometheus_targets.json"


class OutputFolder:
    """`output.dir` claimed for one run, from before anything loads to its summary:

    - locked while the run writes (a second run into it is refused, naming the first);
    - an earlier run's outputs there (`sinks.stale`: its summary.json and what it lists, files
      this run would write, a run's unfinished files) refuse the run in one line, unless
      `output.overwrite`: then they are removed by `clear()`, called once the run is about to
      write (a run that fails to start removes nothing); the run's own sources are kept;
    - `finish(summary)` writes summary.json, whole or not at all, however the run ended.

    `writes` are the names the run writes in the folder (`check_output_names`; a service names
    its shared files, its cameras' come and go); `command` names the owner in the lock."""

    def __init__(self, config: RunConfig, writes: Sequence[str], command: str) -> None:
        self.config, self.folder = config, Path(config.output.dir)
        self._lock = OutputLock(self.folder, command).acquire()
        try:
            self._stale = claim_folder(self.folder, writes, config.output.overwrite)
        except BaseException:
            self._lock.release()
            raise

    @classmethod
    def for_run(cls, config: RunConfig, command: str = "visionrt run") -> OutputFolder:
        """A run's folder: its sources' output names checked first (`check_output_names`)."""
        return cls(config, check_output_names(config), command)

    def clear(self, say: Say | None = None) -> list[Path]:
        """With `output.overwrite`, remove the earlier run's outputs (once); what was removed,
        said to `say` in one line."""
        stale, self._stale = self._stale, []
        sources = [Path(spec) for _, spec in (split_name(s) for s in self.config.sources)]
        removed = remove_outputs(stale, [path for path in sources if path.exists()])
        if removed and say is not None:
            shown = ", ".join(path.name for path in removed[:SHOWN])
            more = f" and {len(removed) - SHOWN} more" if len(removed) > SHOWN else ""
            say(f"--overwrite: removed an earlier run's {shown}{more} from {self.folder}")
        return removed

    def finish(self, summary: RunSummary) -> SinkError | None:
        """Write summary.json (listed in `summary.outputs` once written); the error writing it,
        for the caller to weigh against the one that ended the run."""
        path = self.folder / SUMMARY
        summary.outputs.append(str(path))
        try:
            write_summary(summary, path)
        except SinkError as err:
            summary.outputs.remove(str(path))  # not said to be written
            return err
        return None

    def release(self) -> None:
        self._lock.release()

    def __enter__(self) -> OutputFolder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def make_sinks(config: RunConfig, pipeline: Pipeline) -> list[Sink]:
    """Each source's files (`RunConfig.source_files`: an annotated MP4, MOT text, COCO results
    and CSV when asked, and with a depth model its colourised MP4 and map files where it runs),
    named after the source, then one JSONL (each line's `source` the source's name, as in
    summary.json)."""
    out = Path(config.output.dir)
    names = pipeline.names
    check_writable(out / SUMMARY)  # also when no other output is asked for
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
        run_files += [MANIFEST, TARGETS]
    return [*owners, *run_files]
