"""A group of work units on a worker: their sources through one Pipeline built from the run's
configuration, the results sent back as (frame index, JSONL line) batches, each source's in
frame order."""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import closing
from dataclasses import asdict, replace
from typing import Any

from visionrt.backends import Backend
from visionrt.config import RunConfig, load_config
from visionrt.distributed.outputs import AttemptOutputs, writes_every_frame
from visionrt.distributed.units import Group, WorkUnit
from visionrt.errors import ConfigError, ModelLoadError, SourceError
from visionrt.export.tensorrt import building
from visionrt.fuse import Checkpoint
from visionrt.pipeline import Pipeline, pipeline_for
from visionrt.pipeline.gating import motion_summary
from visionrt.pipeline.output import OutputStage
from visionrt.sinks.jsonl import jsonl_record
from visionrt.sources.registry import open_source, source_kind
from visionrt.tasks.detect import DetectTask
from visionrt.telemetry.report import TelemetrySampler

log = logging.getLogger("visionrt")

Frames = tuple[tuple[int, str], ...]  # (frame index, JSONL line), in frame order
# (unit id, frames, its source's fusion state after the last of them: None without any)
Send = Callable[[int, Frames, Checkpoint | None], None]
# What another attempt would only repeat: the user's file, model or options.
USER_ERRORS = (SourceError, ConfigError, ModelLoadError)
USER_ERROR = "user_error"  # a unit's summary key: its source could not be opened


def group_batches(
    units: Group,
    run: Mapping[str, Any],
    threads: int = 0,
    batch_frames: int = 32,
    batch_seconds: float = 0.5,
    summaries: dict[int, dict[str, Any]] | None = None,
    on_pipeline: Callable[[Pipeline], None] | None = None,
    failed: dict[int, str] | None = None,
    on_sample: Callable[[dict[str, Any]], None] | None = None,
    kept: KeptDetector | None = None,
) -> Iterator[tuple[int, Frames, Checkpoint | None]]:
    """Run `units` in one Pipeline with the configuration `run` (RunConfig's sections as a
    nested dict, its plan settled on the driver), yielding (unit id, frames, checkpoint)
    batches, each unit's in frame order (at most `batch_frames`, or what `batch_seconds`
    gathered), with its source's fusion state after the batch's last frame (tracks, zones and
    lines; None where nothing keeps any): a retry resumes from the last one committed.
    `threads` (the CPUs the worker was given; 0: the runtime's default) caps inference and
    decode threads. Frames before a unit's start (a retry resuming) are read, not sent; a
    retry that does not run them again resumes its source's fusion from `unit.checkpoint`. At
    the end `summaries` gets each unit's row of the run's summary (frames in and out,
    dropped) by unit id. `on_pipeline` is handed the Pipeline before it runs (the worker's
    metrics follow it). A bad source, model or option raises the CLI's one-line error
    (SourceError, ModelLoadError, ConfigError); with `failed`, a group's sources that cannot
    be opened are put there instead (unit id → the error, before the first batch) and the
    others run without them. With `output.telemetry`, `on_sample` gets the telemetry file's
    lines (one a second, and a last one). `kept`: the worker's detector from its last group,
    taken when this group loads the same model the same way, and kept for the next."""
    cfg = load_config(values=dict(run))
    if threads:  # what the user set is kept; the runtime's default would take every core
        if not cfg.inference.threads:
            cfg = replace(cfg, inference=replace(cfg.inference, threads=threads))
        if not cfg.source.decode_threads:
            cfg = replace(cfg, source=replace(cfg.source, decode_threads=threads))
        if threads < (os.cpu_count() or threads):  # other workers share this node's cores
            cfg = unpinned(cfg)
    every_frame = writes_every_frame(cfg)
    # A retry runs again from its range's first frame where its attempt writes files with
    # every frame, or where depth smoothing blends each map with the ones before (a map a
    # frame: too much state to send with each batch, as tracks and counts are).
    again = every_frame or bool(cfg.depth.model and cfg.depth.smoothing)
    # A retry with nothing left (every frame committed) runs no Pipeline; its figures are
    # those it would have resumed.
    empty = [unit for unit in units if _nothing_left(unit, cfg, again)]
    for unit in empty:
        if summaries is not None:
            summaries[unit.unit_id] = {
                "start_frame": unit.start_frame,
                "first_frame": unit.first_frame,
                **_resumed_figures(unit.checkpoint),
            }
    units = tuple(unit for unit in units if unit not in empty)
    if not units:
        return
    # A video file resumes at its unit's frame (seeking, or decoding the frames before it),
    # unless it runs again from its range's first frame.
    resumed = [unit.start_frame if _resumes(unit, again) else unit.first_frame for unit in units]
    # Where the frames before a unit's start are not run again, its fusion state goes on from
    # its checkpoint: a live stream's next attempt too (the same tracks and counts, ids going
    # on after a gap that ends its tracks).
    restored = [
        unit.checkpoint if unit.live or start > unit.first_frame else None
        for unit, start in zip(units, resumed, strict=True)
    ]
    loaded = kept.take(cfg) if kept is not None else None
    try:
        pipeline = _pipeline(cfg, units, resumed, loaded, restored)
    except SourceError:
        bad = _unopenable(units, cfg) if failed is not None and len(units) > 1 else {}
        if not bad:
            raise
        assert failed is not None
        failed.update(bad)  # one camera's bad URL must not hold the others back
        kept_units = [unit.unit_id not in bad for unit in units]
        resumed = [n for n, keep in zip(resumed, kept_units, strict=True) if keep]
        restored = [c for c, keep in zip(restored, kept_units, strict=True) if keep]
        units = tuple(unit for unit in units if unit.unit_id not in bad)
        if not units:
            return
        pipeline = _pipeline(cfg, units, resumed, loaded, restored)
    if on_pipeline is not None:
        on_pipeline(pipeline)
    # A live stream's frame numbers start again with each attempt: nothing there to skip.
    skip = [0 if unit.live else unit.start_frame for unit in units]
    pending: list[list[tuple[int, str]]] = [[] for _ in units]
    names, paths = [unit.name for unit in units], [unit.spec for unit in units]
    since = [time.monotonic()] * len(units)
    files: AttemptOutputs | None = None
    stage: OutputStage | None = None
    complete = False
    sampler = None
    if on_sample is not None and cfg.output.telemetry:
        sampler = TelemetrySampler(pipeline.telemetry, on_sample).start()
    try:
        if every_frame:  # every frame: an attempt's files are whole
            fps = [s.fps for s in pipeline.sources]
            files = AttemptOutputs(units, fps, cfg, pipeline.depth_sources())
            # Written on the output stage's thread, as a plain run's are.
            size = max(1, cfg.pipeline.queue_size)
            stage = OutputStage([files], None, pipeline.telemetry, pipeline.fail, size)
            stage.start()
        with closing(iter(pipeline)) as results:  # closed early too: its threads end
            for result in results:
                index, at = result.frame.index, result.frame.source_id
                if stage is not None:
                    stage.put(result)
                if index < skip[at]:
                    continue
                record = jsonl_record(result, names, paths)
                # The run's number for the source, so that the driver writes a file's line as
                # it comes (a live stream's it numbers and times itself).
                record["source_id"] = units[at].place
                line = json.dumps(record, separators=(",", ":"))
                pending[at].append((index, line))
                if (
                    len(pending[at]) >= batch_frames
                    or time.monotonic() - since[at] >= batch_seconds
                ):
                    yield units[at].unit_id, tuple(pending[at]), pipeline.checkpoint(at)
                    pending[at], since[at] = [], time.monotonic()
        for at, (unit, frames) in enumerate(zip(units, pending, strict=True)):
            if frames:
                yield unit.unit_id, tuple(frames), pipeline.checkpoint(at)
        complete = True
    finally:
        # The files first: the results queued for them hold frames the sources own.
        close_error = stage.finish(complete) if stage is not None else None
        written = files.by_unit if files is not None else [[] for _ in units]
        if sampler is not None:
            sampler.close()  # its last line: the group's totals
        if kept is not None and complete:
            kept.keep(cfg, pipeline)  # before close: the Pipeline then lets go of it only
        pipeline.close()
        if close_error is not None and complete:
            raise close_error
    if summaries is not None:
        summary = pipeline.summary()
        rows = {row["name"]: row for row in summary.sources}
        # Events counted for no source (latency guard steps): the group's, said once.
        unsourced = pipeline.telemetry.per_source().get("", {}).get("events", {})
        for i, (unit, start, outputs) in enumerate(zip(units, resumed, written, strict=True)):
            row = rows.get(unit.name, {})
            resumed_with = _resumed_figures(restored[i])
            summaries[unit.unit_id] = {
                "start_frame": start,  # frames before it were committed by other attempts
                "first_frame": unit.first_frame,  # its range's first
                "part": unit.part,  # its files' range (finalize_outputs joins them)
                "frames_in": row.get("frames_in", 0),
                "frames_out": row.get("frames_out", 0),
                "dropped": row.get("dropped", {}),
                "outputs": outputs,
                # What the run's summary says of it, as a plain run's would (merged there).
                "row": row,
                "audit": _own_audit(summary.audit, unit.name),
                "backend": summary.backend,
                "notes": summary.notes,
                "unsourced_events": unsourced if i == 0 else {},
                # The group's process's CPU over its run, once (on its first unit).
                "cpu_seconds": round(summary.cpu_percent * summary.seconds / 100, 3)
                if i == 0
                else 0.0,
                "events_before": resumed_with["events_before"],
                # Its figures at its end; where it ran no frame, those it resumed.
                "analytics": summary.analytics.get(unit.name) or resumed_with["analytics"],
                "motion": (
                    motion_summary(
                        pipeline.options,
                        pipeline.task.input_hw,
                        row.get("events", {}),
                        row.get("frames_out", 0),
                    )
                    if summary.motion
                    else {}
                ),
                "input_hw": list(pipeline.task.input_hw),  # a whole frame's detector input
            }


def unpinned(cfg: RunConfig) -> RunConfig:
    """`cfg` with its runtimes' threads left to the OS scheduler: OpenVINO pins each process's
    threads from the first core, so two 1-CPU workers on a 2-core node ran on one core."""
    depth = replace(cfg.depth, inference=replace(cfg.depth.inference, pin_threads=False))
    return replace(cfg, inference=replace(cfg.inference, pin_threads=False), depth=depth)


class KeptDetector:
    """A worker's detector kept loaded between its groups: a group whose configuration loads
    the same model the same way (model, runtime, inference options) takes it instead of
    loading it again (measured in docs/benchmarks.md). Whole-frame detectors without motion
    regions or a latency ladder only: those build their own variants from the model's name."""

    def __init__(self) -> None:
        self.key = ""
        self.backend: Backend | None = None

    @staticmethod
    def _key(cfg: RunConfig) -> str:
        options = cfg.pipeline
        if options.tiling.tile or options.motion.mode == "regions" or options.slo.target_ms:
            return ""
        return json.dumps([str(cfg.model), cfg.backend, asdict(cfg.inference)], default=str)

    def take(self, cfg: RunConfig) -> Backend | None:
        """The kept detector when `cfg` loads the same one (else it is closed: not needed)."""
        if self.backend is not None and self._key(cfg) != self.key:
            self.close()
        return self.backend

    def keep(self, cfg: RunConfig, pipeline: Pipeline) -> None:
        """Keep `pipeline`'s detector past its close (it no longer closes it)."""
        task, key = pipeline.task, self._key(cfg)
        if type(task) is not DetectTask or not key:
            return
        if task.backend is not self.backend:
            self.close()
        task.owns_backend = False
        self.key, self.backend = key, task.backend

    def close(self) -> None:
        if self.backend is not None:
            self.backend.close()
        self.key, self.backend = "", None


def _pipeline(
    cfg: RunConfig,
    units: Group,
    resumed: list[int],
    loaded: Backend | None,
    restored: list[Checkpoint | None],
) -> Pipeline:
    """The group's Pipeline, each source from its own frame: where a resumed file (`resumed`)
    or a file read in real time (where its stream has got to, on a retry) starts, else the
    run's `source.start_frame`; and to its range's end, else the run's `source.end_frame`;
    each source's fusion state from its `restored` checkpoint (None: from nothing)."""
    ranges = [
        (
            max(cfg.source.start_frame, unit.start_frame if unit.paced else resume),
            unit.end_frame or cfg.source.end_frame,
        )
        for unit, resume in zip(units, resumed, strict=True)
    ]
    specs = [f"{unit.name}={unit.spec}" for unit in units]
    # The zones and lines of the group's own sources: those of the run's others are theirs
    # (the driver checked every name against the run's sources, as a plain run does).
    names = {unit.name for unit in units}
    analytics = {name: spec for name, spec in cfg.analytics.items() if name in names}
    cfg = replace(cfg, analytics=analytics)
    # A run on the cluster builds the TensorRT engine a node lacks, as a plain run does.
    with building(log.warning):
        return pipeline_for(cfg, specs, loaded=loaded, frame_ranges=ranges, checkpoints=restored)


def _own_audit(audit: dict[str, Any], name: str) -> dict[str, Any]:
    """The group's live-audit report with source `name`'s figures and events only."""
    if not audit:
        return {}
    sources = audit.get("sources", {})
    events = [e for e in audit.get("events", []) if e.get("source") == name]
    return {**audit, "sources": {name: sources[name]} if name in sources else {}, "events": events}


def _unopenable(units: Group, cfg: RunConfig) -> dict[int, str]:
    """The units whose source cannot be opened on its own, with the error."""
    options = replace(cfg.source, workers="thread")  # opened here, closed at once
    bad: dict[int, str] = {}
    for unit in units:
        try:
            open_source(unit.spec, 0, options).close()
        except SourceError as err:
            bad[unit.unit_id] = str(err)
    return bad


def _resumed_figures(checkpoint: Checkpoint | None) -> dict[str, Any]:
    """A unit's summary keys from the checkpoint it resumed (None: from nothing): the zone and
    line events of the frames before it (earlier attempts', added to its own by the run's
    summary) and its zones' and lines' figures as it resumed them."""
    if checkpoint is None:
        return {"events_before": {}, "analytics": {}}
    return {"events_before": dict(checkpoint.events), "analytics": dict(checkpoint.analytics)}


def _nothing_left(unit: WorkUnit, cfg: RunConfig, again: bool) -> bool:
    """Whether a retry has no frame left to run: its range ends at its start, or a resumed
    file's start is past its last frame (the run's `source.end_frame` or `max_frames`, or the
    count its header gives exactly): its worker was lost after sending that frame, before it
    said it was done (a Pipeline from there would refuse a start past the end)."""
    if unit.end_frame is not None and unit.end_frame <= unit.start_frame:
        return True
    if not _resumes(unit, again):
        return False
    ends = [n for n in (cfg.source.end_frame, cfg.source.max_frames) if n]
    if ends and unit.start_frame >= min(ends):
        return True
    try:
        source = open_source(unit.spec, 0, replace(cfg.source, workers="thread"))
    except (SourceError, ConfigError):
        return False  # the Pipeline says what is wrong, as on a first attempt
    try:
        exact = source.frame_count and not source.frame_count_estimated
        return bool(exact) and unit.start_frame >= source.frame_count
    finally:
        source.close()


def _resumes(unit: WorkUnit, again: bool) -> bool:
    """Whether `unit` is a video file resumed after its first frame, not run `again` from its
    range's first (for files that need every frame, or smoothed depth)."""
    whole = not unit.live and not again
    return whole and unit.start_frame > 0 and source_kind(unit.spec) == "file"


def run_group(units: Group, run: Mapping[str, Any], send: Send, threads: int = 0) -> dict[int, Any]:
    """`group_batches`, each batch handed to `send`; each unit's summary by unit id (a unit
    whose source could not be opened: {USER_ERROR: the error})."""
    summaries: dict[int, dict[str, Any]] = {}
    failed: dict[int, str] = {}
    batches = group_batches(units, run, threads, summaries=summaries, failed=failed)
    for unit_id, frames, checkpoint in batches:
        send(unit_id, frames, checkpoint)
    return {**summaries, **{uid: {USER_ERROR: error} for uid, error in failed.items()}}
