"""A run over a cluster's workers: a work unit per source, the coordinator committing each
source's JSONL lines in order into the run's one JSONL file, and the run's summary with its
`cluster` section."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any, TextIO

from visionrt.config import RunConfig
from visionrt.distributed.coordinator import REGROUP_AFTER, Coordinator, Executor, RunStop
from visionrt.distributed.metrics import ClusterMetrics
from visionrt.distributed.outputs import driver_files, finalize_outputs
from visionrt.distributed.plans import GroupPlans
from visionrt.distributed.ranges import split_units
from visionrt.distributed.report import ClusterReport
from visionrt.distributed.summary import cluster_summary
from visionrt.distributed.units import WorkUnit
from visionrt.errors import Interrupted
from visionrt.fuse import check_analytics, parse_analytics
from visionrt.pipeline.output import close_sinks
from visionrt.sinks.base import FileSink, check_writable, unwritable
from visionrt.sinks.files import named_after
from visionrt.sources.naming import named_specs
from visionrt.sources.registry import LIVE_KINDS, source_kind
from visionrt.telemetry.stats import RunSummary
from visionrt.types import FrameResult


class LinesSink(FileSink):
    """JSON lines handed over already serialized (by the workers), committed in order."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, one_source=False)

    def write(self, result: FrameResult) -> None:
        self.append(json.dumps(result.to_json(), separators=(",", ":")) + "\n")


# What a live stream that cannot be probed from the driver (a camera, an RTSP URL) is taken to
# cost: 1080p at 30 FPS. Opening a stream only to size it would hold a connection it may refuse.
UNPROBED_COST = 1920 * 1080 * 30.0


def check_sources(cfg: RunConfig) -> None:
    """Refuse what a plain run refuses of its sources as a whole before anything loads: zones
    and lines that name no source of the run (a worker's Pipeline sees only its own group's,
    so the run's names are checked here)."""
    names = [name for name, _ in named_specs(cfg.sources)]
    check_analytics(parse_analytics(cfg.analytics), names, cfg.pipeline.tracking.enabled)


def work_units(cfg: RunConfig) -> list[WorkUnit]:
    """A unit per source, named as a single-process run names it; a live one costs its pixels
    a second (placed by it); a file read in real time knows its frames (its header's, up to
    `source.max_frames`; 0 when it loops)."""
    units = []
    for i, (name, spec) in enumerate(named_specs(cfg.sources)):
        kind = source_kind(spec)
        if not (kind in LIVE_KINDS or cfg.source.realtime):
            units.append(WorkUnit(i, name, spec, place=i))
            continue
        cost, frames = UNPROBED_COST, 0
        width: float  # a synthetic spec's are ints, a header's floats
        height: float
        if kind == "synthetic":
            width, height = (int(v) for v in spec.split(":")[1].split("x"))
            cost = width * height * 30.0
        elif kind == "file":  # its header, no frame decoded
            width, height, fps, count = _header(spec)
            cost = width * height * (fps or 30.0) or UNPROBED_COST
            frames = 0 if cfg.source.loop else min(count, cfg.source.max_frames or count)
        paced = kind == "file"
        units.append(
            WorkUnit(i, name, spec, live=True, paced=paced, frames=frames, cost=cost, place=i)
        )
    return units


def split_long_files(
    cfg: RunConfig, units: list[WorkUnit], workers: int
) -> tuple[list[WorkUnit], list[str]]:
    """`units` with each video file longer than its share of `workers` split into frame
    ranges (see ranges.split_units), and a line for each file split or left whole."""
    if workers < 2 or not cfg.cluster.range_frames:
        return units, []
    limit = cfg.source.max_frames
    frames = [
        min(_header(u.spec)[3], limit or 2**62)
        if not u.live and source_kind(u.spec) == "file"
        else 0
        for u in units
    ]
    return split_units(units, frames, workers, cfg)


def _header(spec: str) -> tuple[float, float, float, int]:
    """A video file's width, height, frame rate and frame count as its header says (0 where
    it does not), no frame decoded."""
    import cv2

    capture = cv2.VideoCapture(spec)
    try:
        props = (cv2.CAP_PROP_FRAME_WIDTH, cv2.CAP_PROP_FRAME_HEIGHT, cv2.CAP_PROP_FPS)
        width, height, fps = (capture.get(prop) for prop in props)
        return width, height, fps, int(capture.get(cv2.CAP_PROP_FRAME_COUNT))
    finally:
        capture.release()


class LiveClock:
    """A live source's timestamps across attempts. Each attempt opens the stream again, and its
    timestamps start again at 0; they are placed after the last one written, the frames
    between (the gap the coordinator numbered) at the stream's rate so far."""

    def __init__(self) -> None:
        self.offset = 0.0
        self.first: tuple[int, float] | None = None  # (frame, timestamp) written first
        self.last: tuple[int, float] | None = None

    def place(self, frame: int, timestamp: float) -> float:
        placed = timestamp + self.offset
        if self.first is not None and self.last is not None and placed < self.last[1]:
            frames, seconds = self.last[0] - self.first[0], self.last[1] - self.first[1]
            step = seconds / frames if frames > 0 and seconds > 0 else 0.0
            expected = self.last[1] + (frame - self.last[0]) * step
            self.offset += expected - placed
            placed = expected
        self.first = self.first or (frame, placed)
        self.last = (frame, placed)
        return round(placed, 6)


def frame_total(cfg: RunConfig) -> int | None:
    """The frames the run will write, from the files' headers (`source.max_frames` each at
    most); None when a source is live or a header does not say."""
    total = 0
    for _, spec in named_specs(cfg.sources):
        if cfg.source.realtime or source_kind(spec) != "file":
            return None
        frames = _header(spec)[3]
        if frames <= 0:
            return None
        total += min(frames, cfg.source.max_frames or frames)
    return total


def worker_settings(cfg: RunConfig) -> dict[str, Any]:
    """What a worker builds its Pipeline from: the run's sections, its plan already in them,
    and where its videos go (`output.dir`, absolute: a worker's working folder is not the
    driver's); sources and the cluster are the driver's."""
    settings = asdict(cfg)
    for key in ("sources", "cluster", "serve"):
        settings.pop(key, None)
    settings["output"]["dir"] = str(Path(cfg.output.dir).resolve())
    return settings


def run_on_cluster(
    cfg: RunConfig,
    executor: Executor,
    on_progress: Callable[[ClusterReport], None] | None = None,
    plans: GroupPlans | None = None,
    metrics: ClusterMetrics | None = None,
    regroup_after: float = REGROUP_AFTER,
    stop: RunStop | None = None,
    say: Callable[[str], None] = lambda _line: None,
    before_writing: Callable[[], object] | None = None,
) -> tuple[RunSummary, ClusterReport]:
    """Run every source of `cfg` as a unit on `executor`'s workers; the JSONL goes to
    `output.dir` as a single-process run names it, each source's `source_id` its place in
    `cfg.sources`. The summary's `error` names the sources that failed; its `cluster` section
    holds the report and, with `plans`, the plan groups. `metrics` is kept up to date with
    the report and the workers' endpoints. `regroup_after`: see coordinator.REGROUP_AFTER.
    `stop` ends the run early (Ctrl-C): the outputs hold what was committed, finalized, and
    the summary says `interrupted`. A long video file runs as frame ranges on several workers
    (`cluster.range_frames`); `say` gets a line for each file split or left whole.
    `before_writing` is called before the first output is opened (the CLI's --overwrite
    removes an earlier run's outputs there)."""
    cpu_started = time.process_time()
    check_sources(cfg)  # run_on_ray checked before Ray started; here for any executor
    if stop is not None:  # from here a stop finalizes what was committed
        stop.started.set()
        if stop.asked.is_set():
            raise Interrupted("interrupted while starting: nothing processed")
    whole = work_units(cfg)
    units, notes = split_long_files(cfg, whole, len(executor.workers()))
    for note in notes:
        say(note)
    if before_writing is not None:
        before_writing()
    out, output = Path(cfg.output.dir), cfg.output
    name = f"{whole[0].name}.jsonl" if len(whole) == 1 else "detections.jsonl"
    sink = LinesSink(out / name) if output.jsonl else None
    # Written here from the committed lines, as the JSONL is: one writer, frames once, in order.
    tables = [
        table
        for unit in whole
        for table in driver_files(cfg).sinks(named_after(out, unit.name), unit.unit_id, 0.0)
    ]
    telemetry = open_telemetry(output.telemetry) if output.telemetry else None

    def sample(worker: str, line: dict[str, Any]) -> None:
        """A worker's telemetry line into the run's file, with whose it is."""
        if telemetry is not None:
            node = executor.info(worker).get("node", "") if worker in executor.workers() else ""
            tagged = {"worker": worker, "node": node, **line}
            telemetry.write(json.dumps(tagged, separators=(",", ":")) + "\n")
            telemetry.flush()

    clocks = {unit.name: LiveClock() for unit in units if unit.live}

    def write(source: str, frame: int, line: str) -> None:
        # A worker's line is the run's line (its `source_id` the run's): written as it comes,
        # decoded once where a table needs the result. A live stream's retry numbers its
        # frames from 0 again, and its clock too: the run's numbers are the coordinator's.
        record: dict[str, Any] | None = None
        if source in clocks:
            record = json.loads(line)
            record["frame"] = frame
            record["timestamp"] = clocks[source].place(frame, record["timestamp"])
            line = json.dumps(record, separators=(",", ":"))
        if sink is not None:
            sink.append(line + "\n")
        if tables:
            found = FrameResult.from_json(
                record if record is not None else json.loads(line),
                tracked=cfg.pipeline.tracking.enabled,
            )
            for table in tables:
                table.write(found)

    def progress(report: ClusterReport) -> None:
        if metrics is not None:  # the service-discovery file follows the workers
            metrics.update(report, {w: executor.info(w) for w in executor.workers()})
        if on_progress is not None:
            on_progress(report)

    coordinator = Coordinator(
        units,
        executor,
        write,
        cfg.cluster.max_attempts,
        progress,
        group=cfg.cluster.files_per_worker,
        regroup_after=regroup_after,
        on_sample=sample,
        stop=stop,
        spool_dir=out,
    )
    report: ClusterReport | None = None
    try:
        report = coordinator.run()
    finally:
        if telemetry is not None:
            telemetry.close()
        finished = [*tables, *([sink] if sink is not None else [])]
        closed, close_error = close_sinks(finished, complete=report is not None)
        if close_error is not None:
            raise close_error
    done = {
        name: s.unit_finals() for name, s in report.sources.items() if s.done_units and not s.error
    }
    live = frozenset(u.name for u in units if u.live)
    outputs = [str(p) for p in closed] + finalize_outputs(out, done, live)
    outputs += [str(output.telemetry)] if telemetry is not None else []
    summary = cluster_summary(report, live, outputs, time.process_time() - cpu_started)
    summary.notes = [*notes, *summary.notes]
    summary.interrupted = coordinator.stop.asked.is_set()
    if plans is not None:
        summary.cluster["plan_groups"] = plans.report()
    return summary, report


def open_telemetry(path: str | Path) -> TextIO:
    """The run's telemetry file, open for the workers' lines: one line per worker a second,
    as `run --telemetry` writes, plus `worker` and `node`. A SinkError when it cannot be."""
    target = Path(path)
    check_writable(target, "telemetry")
    try:
        return target.open("w", encoding="utf-8")
    except OSError as err:
        raise unwritable(target, err, "telemetry") from err
