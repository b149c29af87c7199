"""`profile`: run the pipeline with every stage span recorded, sample queue depths and CPU per
thread, and name the bottleneck with what to try and what it would gain (Amdahl)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from visionrt.pipeline import Pipeline
from visionrt.sinks import Sink
from visionrt.sinks.base import write_output

# Which thread does which stages: the preprocess thread also measures motion, inference workers
# decode their own results, the caller's thread joins and fuses frames, the sink thread writes.
THREADS = {"decode": ("decode",), "preprocess": ("motion", "preprocess"),
           "infer": ("infer", "postprocess"), "fuse": ("fuse",), "sink": ("sink",)}  # fmt: skip
# Overhead-bound: inference is mostly idle while two or more host threads are each busy this
# share of the time — small work per frame, contended for (the GIL, queues, wake-ups), rather than
# one stage's work. A share, not milliseconds: it holds on fast and slow CPUs alike.
CONTENDED_SHARE = 0.3
# Or: its busiest thread spends less than this per frame — Python's own per-frame costs, not the
# stage's work (decoding a 128×96 frame takes ~1 ms here, mostly that; a 4K one ~10 ms).
OVERHEAD_MS = 3.0
# Sink-bound: the queue in front of the sink thread holds at least this share of its room on
# average (it is empty when the sinks keep up: measured 0 with x264 veryfast on the demo).
SINK_BACKLOG = 0.5


@dataclass(frozen=True, slots=True)
class Span:
    stage: str
    thread: str
    start: float  # seconds since the run started
    seconds: float


@dataclass(slots=True)
class Profile:
    """What `profile` measured: per-thread busy share of the wall time, per-stage ms per frame,
    queue depths over time, CPU seconds per thread, and the verdict."""

    fps: float
    frames: int
    seconds: float
    stage_ms: dict[str, float]
    busy: dict[str, float]  # thread group → share of wall time busy (per worker for infer)
    queues: list[dict[str, float]]
    cpu_by_thread: dict[str, float]
    spans: list[Span] = field(default_factory=list)
    bottleneck: str = ""
    verdict: str = ""

    def to_json(self) -> dict[str, Any]:
        data = {k: getattr(self, k) for k in self.__slots__ if k != "spans"}
        data["spans"] = len(self.spans)
        return data


def verdict(
    stage_ms: dict[str, float],
    busy: dict[str, float],
    fps: float,
    concurrency: int,
    planned: str = "",
    sink_backlog: float = 0.0,
) -> tuple[str, str]:
    """The bottleneck (a thread group, or "overhead") and one sentence: why, what to try, and
    the Amdahl what-if for the main suggestion. `planned` names the tuned plan that ran ("":
    none), so a run already on it is not told to tune. `sink_backlog` is the mean share of the
    sink queue held: from SINK_BACKLOG on, results wait for the sinks, whatever else is busy
    (on a machine with few cores the encoder also slows inference down)."""
    group = max(busy, key=lambda g: busy[g]) if busy else "overhead"
    backlogged = sink_backlog >= SINK_BACKLOG and "sink" in busy
    if backlogged:
        group = "sink"
    per_frame = {g: sum(stage_ms.get(s, 0.0) for s in stages) for g, stages in THREADS.items()}
    per_frame["infer"] = sum(stage_ms.get(s, 0.0) for s in THREADS["infer"]) / max(1, concurrency)
    period = 1e3 / fps if fps else 0.0
    share = busy.get(group, 0.0)
    host_busy = [g for g, b in busy.items() if g != "infer" and b >= CONTENDED_SHARE]
    overhead = per_frame.get(group, 0.0) < OVERHEAD_MS or len(host_busy) >= 2
    if group != "infer" and not backlogged and overhead:
        why = (
            f"{' and '.join(host_busy)} are all busy with little work each"
            if len(host_busy) >= 2
            else f"no thread does {OVERHEAD_MS:.0f} ms of work per frame"
        )
        return "overhead", (
            f"overhead-bound: {why} ({period:.1f} ms per frame in all): per-frame costs and their"
            " contention dominate, not a stage's work: batch frames (inference.batch) or run"
            " several sources in one pipeline"
        )
    others = max((v for g, v in per_frame.items() if g != group), default=0.0)
    halved = max(per_frame[group] / 2, others)
    gain = f"halving it → ~{1e3 / halved:.0f} FPS" if halved else ""
    if group == "infer" and planned:
        return group, (
            f"inference-bound, {share:.0%} of frame time, on the tuned plan ({planned}): detect"
            " less often (--track --detect-every 2), a smaller model, or a faster device;"
            f" {gain}"
        )
    if group == "infer":
        return group, (
            f"inference-bound, {share:.0%} of frame time: `visionrt tune`, or INT8 via"
            f" `visionrt export`; {gain}"
        )
    if group == "decode":
        return group, (
            f"decode-bound, {share:.0%} of the decode thread's time: a lower-resolution stream,"
            f" hardware decoding, or source.decode_threads; {gain}"
        )
    if group == "preprocess":
        return group, (
            f"preprocess-bound, {share:.0%}: fold preprocessing into the model"
            f" (inference.fold_preprocess, OpenVINO) or a smaller source; {gain}"
        )
    if group == "fuse":
        return group, (
            f"fuse-bound, {share:.0%} of the consumer thread (tracking, distances, depth"
            f" smoothing): fewer sources per pipeline, or depth smoothing off; {gain}"
        )
    return group, (
        f"sink-bound, {share:.0%} of the sink thread: x264 preset ultrafast"
        f" (--set output.preset=ultrafast), or --no-video; {gain}"
    )


def gpu_verdict(figures: dict[str, Any], device: str) -> str:
    """What the GPU figures (RunSummary.gpu) add when the model ran on a GPU: whether the GPU
    or the host was the limit, from the GPU's busy share ("" otherwise)."""
    if not figures or not device.startswith("cuda"):
        return ""
    index = device.partition(":")[2] or "0"
    gpu = figures["gpus"].get(index) or next(iter(figures["gpus"].values()))
    throttled = [r for r, share in gpu["throttle"].items() if r != "gpu_idle" and share > 0.1]
    slowed = f", clocks held down ({', '.join(throttled)})" if throttled else ""
    if figures["limit"] == "gpu":
        return (
            f"; the GPU was busy {gpu['busy']:.0%} of the run{slowed}: GPU-bound, so fp16 or a"
            " larger batch (inference.batch), not the host, would move it"
        )
    return (
        f"; the GPU was busy only {gpu['busy']:.0%} of the run{slowed}: the host is the limit"
        " (decoding, feeding frames, results), not the GPU"
    )


class _Sampler(threading.Thread):
    """Samples queue depths and per-thread CPU times every `interval` seconds."""

    def __init__(self, pipeline: Pipeline, interval: float = 0.05) -> None:
        super().__init__(name="profile-sampler", daemon=True)
        self.pipeline, self.interval = pipeline, interval
        self.queues: list[dict[str, float]] = []
        self.cpu: dict[int, tuple[str, float]] = {}
        self.done = threading.Event()
        self.started_at = time.perf_counter()

    def run(self) -> None:
        process = psutil.Process()
        while not self.done.wait(self.interval):
            depths = self.pipeline.queue_depths()
            if depths:
                self.queues.append({"t": round(time.perf_counter() - self.started_at, 3), **depths})
            names = {t.native_id: t.name for t in threading.enumerate()}
            for thread in process.threads():
                name = names.get(thread.id, f"runtime pool {thread.id}")
                self.cpu[thread.id] = (name, thread.user_time + thread.system_time)


def profile_pipeline(
    pipeline: Pipeline, sinks: Sequence[Sink] = (), on_frame: Callable[[Any], None] | None = None
) -> Profile:
    """Run `pipeline` into `sinks` to its end and profile it."""
    spans: list[Span] = []
    record = pipeline.telemetry.record
    started = time.perf_counter()

    def traced(stage: str, seconds: float) -> None:  # called right after the stage's work
        end = time.perf_counter() - started
        spans.append(Span(stage, threading.current_thread().name, end - seconds, seconds))
        record(stage, seconds)

    pipeline.telemetry.record = traced  # type: ignore[method-assign]
    sampler = _Sampler(pipeline)
    sampler.start()
    try:
        pipeline.run(sinks, on_result=on_frame)
    finally:
        sampler.done.set()
        sampler.join()
        pipeline.telemetry.record = record  # type: ignore[method-assign]
    summary = pipeline.summary()
    wall = max(summary.seconds, 1e-9)
    stage_ms = {s: v["mean"] for s, v in summary.stages.items() if v["mean"]}
    concurrency = max(1, pipeline.task.backend.concurrency)
    totals: dict[str, float] = {}
    for span in spans:
        totals[span.stage] = totals.get(span.stage, 0.0) + span.seconds
    busy = {
        group: sum(totals.get(s, 0.0) for s in stages) / wall for group, stages in THREADS.items()
    }
    busy["infer"] /= concurrency
    cpu: dict[str, float] = {}
    for name, seconds in sampler.cpu.values():
        cpu[name] = round(cpu.get(name, 0.0) + seconds, 3)
    planned = pipeline.plan.summary_line() if pipeline.plan is not None else ""
    held = [sample.get("fused", 0.0) for sample in sampler.queues]
    backlog = sum(held) / len(held) / max(1, pipeline.options.queue_size) if held else 0.0
    bottleneck, text = verdict(stage_ms, busy, summary.fps, concurrency, planned, backlog)
    text += gpu_verdict(summary.gpu, str(summary.backend.get("device", "")))
    return Profile(
        fps=summary.fps,
        frames=summary.frames_out,
        seconds=summary.seconds,
        stage_ms={k: round(v, 3) for k, v in stage_ms.items()},
        busy={k: round(v, 3) for k, v in busy.items()},
        queues=sampler.queues,
        cpu_by_thread=cpu,
        spans=spans,
        bottleneck=bottleneck,
        verdict=text,
    )


def write_trace(profile: Profile, path: Path, what: str = "trace") -> Path:
    """A Chrome/Perfetto trace: one track per thread, a slice per stage span, queue counters.
    A SinkError naming `path` (`what`: the output) when it cannot be written (a full disk)."""
    threads = sorted({span.thread for span in profile.spans})
    tids = {name: index + 1 for index, name in enumerate(threads)}
    events: list[dict[str, Any]] = [
        {"name": "thread_name", "ph": "M", "pid": 1, "tid": tid, "args": {"name": name}}
        for name, tid in tids.items()
    ]
    events += [
        {
            "name": span.stage,
            "ph": "X",
            "pid": 1,
            "tid": tids[span.thread],
            "ts": round(span.start * 1e6, 1),
            "dur": round(span.seconds * 1e6, 1),
        }
        for span in profile.spans
    ]
    events += [
        {
            "name": "queue depth",
            "ph": "C",
            "pid": 1,
            "ts": round(sample["t"] * 1e6, 1),
            "args": {k: v for k, v in sample.items() if k != "t"},
        }
        for sample in profile.queues
    ]
    return write_output(path, json.dumps({"traceEvents": events}), what)
