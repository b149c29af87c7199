"""The live accuracy audit: its lane never holds results back, sampling is deterministic and
counted, its fidelity is `fidelity.fidelity` of the reference against what the run delivered,
events, Prometheus and the per-second file, configuration, and depth."""

from __future__ import annotations

import json
import os
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from conftest import HANG_SECONDS, finishes, run_cli, write_tiny_detector, write_video
from test_cli import assert_one_line_error, visionrt

from visionrt import Pipeline, PipelineOptions, SourceOptions
from visionrt import fidelity as coco
from visionrt.accuracy import AuditEvent, sample_period
from visionrt.accuracy import audit as lane
from visionrt.bench.reference import collect_detections
from visionrt.config import load_config, pipeline_options
from visionrt.config.pipeline import AuditOptions
from visionrt.errors import ConfigError
from visionrt.pipeline import DepthOptions
from visionrt.pipeline.audit import planned_audit, planned_depth_audit
from visionrt.pipeline.hooks import Hooks
from visionrt.plans import Plan
from visionrt.sources import Source
from visionrt.tasks import DetectTask
from visionrt.types import Frame, FrameResult

PERSON = (32, 32, 20, 10, 0.9, 0.0)  # the tiny model's box, in 64×64 input pixels


@pytest.fixture(scope="module")
def wider(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 'reference' that sees the tiny model's person and one more: fidelity 0.5."""
    path = tmp_path_factory.mktemp("ref") / "wider.onnx"
    return write_tiny_detector(path, [PERSON, (10, 10, 8, 8, 0.8, 0.0)])


@pytest.fixture(scope="module")
def elsewhere(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 'reference' whose one person is nowhere near the tiny model's: fidelity 0."""
    path = tmp_path_factory.mktemp("ref") / "elsewhere.onnx"
    return write_tiny_detector(path, [(52, 52, 8, 8, 0.9, 0.0)])


@pytest.fixture
def lane_gets_its_share(monkeypatch: pytest.MonkeyPatch) -> None:
    """The lane at the run's own priority, and a file run's end waiting for every sample: for
    the tests that count audited frames, which are not about the priority
    (test_the_reference_runs_only_on_idle_cycles is). On a busy machine a SCHED_IDLE thread gets
    next to no CPU: beside two CPU hogs on 2 cores the lane audited 1 of 2 frames in the 30 s."""
    monkeypatch.setattr(lane, "idle_priority", lambda: None)
    monkeypatch.setattr(lane, "DRAIN_SECONDS", HANG_SECONDS)


def _pipeline(
    video: Path, model: Path, mode: str = "file", realtime: bool = False, **options: object
) -> Pipeline:
    return Pipeline(
        [str(video)],
        model,
        "onnxruntime",
        source_options=SourceOptions(mode=mode, realtime=realtime),
        options=pipeline_options(warmup=0, **options),  # type: ignore[arg-type]
    )


@pytest.mark.usefixtures("lane_gets_its_share")
def test_a_reference_that_never_answers_delays_no_result(
    small_video: Path, tiny_model: Path, wider: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reference is held inside its first sample for the whole run. Every result still
    comes (a lane in the way would hold them for ever); a file run waits for the queued samples
    at most DRAIN_SECONDS, then skips them, counted; a live run skips samples as they come (its
    queue holds 8) and waits for nothing at its end."""
    infer = DetectTask.infer
    entered, release = threading.Event(), threading.Event()

    def held(self: DetectTask, rows: list) -> object:
        if threading.current_thread().name == "audit":
            entered.set()
            release.wait(HANG_SECONDS)
        return infer(self, rows)

    monkeypatch.setattr(DetectTask, "infer", held)

    def deliver(mode: str, drain: float) -> Pipeline:
        monkeypatch.setattr(lane, "DRAIN_SECONDS", drain)
        entered.clear()
        release.clear()
        # Live: the file at its 25 FPS, a camera's pace.
        pipeline = _pipeline(
            small_video, tiny_model, mode, mode == "live", audit=0.5, audit_reference=str(wider)
        )

        def consume() -> int:
            delivered = 0
            for _ in pipeline:
                if not delivered:  # the lane holds its first sample from now on
                    assert entered.wait(HANG_SECONDS), "the reference never started"
                delivered += 1
            return delivered

        try:
            delivered = finishes(consume, f"a {mode} run beside a reference that never answers")
        finally:
            release.set()
            pipeline.close()
        assert delivered == pipeline.summary().frames_out
        return pipeline

    # File mode queues every sample (memory allows); the drain gives up on them after 0.2 s.
    summary = deliver("file", 0.2).summary()
    counts = summary.audit["sources"]["small"]
    assert summary.frames_out == 40
    assert summary.accounted
    assert counts["sampled"] == 20 == counts["skipped"]
    assert counts["audited"] == 0
    assert summary.events["audit: sampled"] == 20
    assert "audit: skipped (busy)" not in summary.events
    assert summary.events["audit: skipped (run ended)"] == 20
    # Live: a drain that would wait for ever is not waited for.
    summary = deliver("live", HANG_SECONDS).summary()
    counts, events = summary.audit["sources"]["small"], summary.events
    sampled = counts["sampled"]  # a loaded machine may drop frames, and their samples with them
    assert sampled == events["audit: sampled"] == counts["skipped"]
    assert counts["audited"] == 0
    # One held by the reference and 8 queued behind it, skipped at the end; the rest skipped as
    # they came (11 when no frame was dropped).
    kept = min(sampled, 1 + lane.QUEUE_FRAMES)
    assert events["audit: skipped (run ended)"] == kept
    assert events.get("audit: skipped (busy)", 0) == sampled - kept


@pytest.mark.skipif(not hasattr(os, "SCHED_IDLE"), reason="SCHED_IDLE is Linux's")
def test_the_reference_runs_only_on_idle_cycles(
    small_video: Path, tiny_model: Path, wider: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Niceness is relative to the process's: in a Ray worker (niceness 15) a nice-19 lane took
    a share of the cores from the run; SCHED_IDLE holds whatever the process's niceness. The
    lane lowers its priority before it builds the reference (whose runtime threads inherit it):
    the policy is read there, which needs the lane to run for a moment only (on a busy machine a
    SCHED_IDLE thread may not get the CPU to audit a frame in the run's time)."""
    build, policies, built = DetectTask.__init__, set(), threading.Event()

    def seen(self: DetectTask, *args: object, **kwargs: object) -> None:
        if threading.current_thread().name == "audit":
            policies.add(os.sched_getscheduler(threading.get_native_id()))
            built.set()
        build(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(DetectTask, "__init__", seen)
    monkeypatch.setattr(lane, "DRAIN_SECONDS", 0.0)  # what it audits is not the question
    pipeline = _pipeline(small_video, tiny_model, audit=0.5, audit_reference=str(wider))
    assert _delivered(pipeline, built, "the run") == 40
    pipeline.close()
    assert policies == {os.SCHED_IDLE}


def _delivered(pipeline: Pipeline, lane_started: threading.Event, what: str) -> int:
    """The results of `pipeline`'s run (which must end: `finishes`), the first one taken only
    once the lane's reference has started (`lane_started`)."""

    def consume() -> int:
        delivered = 0
        for _ in pipeline:
            if not delivered:
                assert lane_started.wait(HANG_SECONDS), "the lane's reference never started"
            delivered += 1
        return delivered

    return finishes(consume, what)


def _can_wake_an_idle_thread() -> bool:
    """Whether this process may move a SCHED_IDLE thread back to SCHED_OTHER (root,
    CAP_SYS_NICE or RLIMIT_NICE): a thread tries it on itself."""
    if not hasattr(os, "SCHED_IDLE"):
        return False
    allowed: list[bool] = []

    def attempt() -> None:
        tid = threading.get_native_id()
        try:
            os.sched_setscheduler(tid, os.SCHED_IDLE, os.sched_param(0))
            os.sched_setscheduler(tid, os.SCHED_OTHER, os.sched_param(0))
            allowed.append(True)
        except OSError:
            allowed.append(False)

    thread = threading.Thread(target=attempt)
    thread.start()
    thread.join()
    return allowed == [True]


@pytest.mark.skipif(not _can_wake_an_idle_thread(), reason="needs SCHED_IDLE and leave to wake")
def test_closing_finishes_the_lanes_last_call_at_normal_priority(
    small_video: Path, tiny_model: Path, wider: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lane runs at SCHED_IDLE; on a loaded machine its last reference call (or the
    reference's load) would get ~0.3 % of a core and outlast the run's close, and the process's
    exit under it aborted inside the runtime (SIGABRT, `profile` with a plan, twice under
    `stress-ng`). Here the reference's call returns only once its thread runs at normal
    priority again: closing moves it there and waits for the lane, which is gone after."""
    infer = DetectTask.infer
    entered = threading.Event()

    def starved(self: DetectTask, rows: list) -> object:
        if threading.current_thread().name == lane.LANE:
            entered.set()
            tid = threading.get_native_id()
            deadline = threading.Event()
            for _ in range(int(HANG_SECONDS * 100)):  # until woken (or the test's hang limit)
                if os.sched_getscheduler(tid) != os.SCHED_IDLE:
                    break
                deadline.wait(0.01)
        return infer(self, rows)

    monkeypatch.setattr(DetectTask, "infer", starved)
    pipeline = _pipeline(
        small_video, tiny_model, "live", True, audit=0.5, audit_reference=str(wider)
    )

    assert _delivered(pipeline, entered, "a live run beside a starved reference") > 0
    assert lane.lane_running()  # its call is still held: nothing woke it during the run
    pipeline.close()
    assert not lane.lane_running()


@pytest.mark.parametrize(
    ("rate", "avoid", "period"),
    [(0.02, 1, 50), (0.1, 1, 10), (0.5, 1, 2), (0.02, 2, 51), (0.1, 3, 11), (0.5, 2, 3)],
)
def test_sample_period_avoids_the_detect_every_phase(rate: float, avoid: int, period: int) -> None:
    assert sample_period(rate, avoid) == period


@pytest.mark.usefixtures("lane_gets_its_share")
def test_sampling_is_deterministic_per_source(tmp_path: Path, tiny_model: Path, wider: Path):
    video = write_video(tmp_path / "fifty.mp4", frames=50)
    pipeline = _pipeline(video, tiny_model, audit=0.1, audit_reference=str(wider))
    summary = pipeline.run()
    pipeline.close()
    assert pipeline.auditor is not None
    assert pipeline.auditor.audited_frames("fifty") == [0, 10, 20, 30, 40]
    assert summary.audit["sources"]["fifty"]["sampled"] == 5
    assert summary.audit["period"] == 10


@pytest.mark.usefixtures("lane_gets_its_share")
def test_audited_fidelity_is_fidelity_of_what_the_run_delivered(
    small_video: Path, tiny_model: Path, wider: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []
    shared = coco.fidelity

    def spy(reference: list, candidate: list) -> coco.FidelityReport:
        calls.append(len(reference))
        return shared(reference, candidate)

    monkeypatch.setattr(coco, "fidelity", spy)
    # Tracking, detect every 2nd frame: the boxes the user got are the tracker's.
    pipeline = _pipeline(
        small_video, tiny_model, audit=0.125, audit_reference=str(wider),
        track=True, detect_every=2,
    )  # fmt: skip
    delivered = {r.frame.index: r.detections for r in pipeline}
    pipeline.close()
    assert pipeline.auditor is not None
    frames = pipeline.auditor.audited_frames("small")
    assert frames == [0, 9, 18, 27, 36]  # 1 in 8 → 9: odd, both kinds of frame
    reference = collect_detections(small_video, wider, frames=40)
    expected = shared([reference[i] for i in frames], [delivered[i] for i in frames])
    found = pipeline.summary().audit["sources"]["small"]
    assert found["fidelity"]["map50"] == round(expected.map50, 4)
    assert found["fidelity"]["reference_boxes"] == expected.reference_boxes == 10
    assert found["fidelity"]["frames"] == 5
    assert calls, "the audit scores through fidelity.fidelity"


@pytest.mark.usefixtures("lane_gets_its_share")
def test_the_reference_audited_against_itself_scores_one(
    small_video: Path, tiny_model: Path
) -> None:
    pipeline = _pipeline(small_video, tiny_model, audit=0.25)
    summary = pipeline.run()
    pipeline.close()
    assert any("its own FP32 reference" in note for note in summary.notes)
    assert summary.audit["sources"]["small"]["fidelity"]["map50"] == 1.0
    # Left to its default, an audit of the run against itself is not made at all.
    plain = _pipeline(small_video, tiny_model, audit_reference=str(tiny_model))
    assert plain.auditor is None
    plain.close()


@pytest.mark.usefixtures("lane_gets_its_share")
def test_fidelity_below_budget_raises_one_event(
    small_video: Path, tiny_model: Path, elsewhere: Path
) -> None:
    pipeline = _pipeline(
        small_video, tiny_model, audit=0.5, audit_reference=str(elsewhere), audit_window=5
    )
    told: list[AuditEvent] = []
    pipeline.hooks.on_audit = told.append
    summary = pipeline.run()
    pipeline.close()
    assert len(told) == 1  # once per crossing: it never recovers
    event = told[0]
    assert (event.source, event.metric, event.value, event.frames) == ("small", "fidelity", 0, 5)
    assert re.fullmatch(
        r"audit: small fidelity 0\.000 < 0\.95 over the last 5 audited frames \(frame \d+\)",
        str(event),
    )
    assert summary.events["audit: below budget"] == 1
    assert summary.audit["events"][0]["source"] == "small"


@pytest.mark.usefixtures("lane_gets_its_share")
def test_a_reference_that_does_not_load_leaves_the_run_alone(
    tmp_path: Path,
    small_video: Path,
    tiny_model: Path,
    wider: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(b"not a model")
    with pytest.raises(ConfigError, match=r"pipeline\.audit\.reference: .*broken\.onnx: not read"):
        _pipeline(small_video, tiny_model, audit=0.25, audit_reference=str(broken))
    # Not asked for (a plan's reference that was moved, say): no audit, and a line says why.
    quiet = _pipeline(small_video, tiny_model, audit_reference=str(tmp_path / "gone.onnx"))
    quiet.close()
    assert quiet.auditor is None
    assert any(note.endswith("gone.onnx is not found") for note in quiet.notes)
    load = DetectTask.__init__

    def no_memory(self: DetectTask, *args: object, **kwargs: object) -> None:
        if threading.current_thread().name == "audit":
            raise MemoryError("std::bad_alloc")
        load(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(DetectTask, "__init__", no_memory)
    pipeline = _pipeline(small_video, tiny_model, audit=0.25, audit_reference=str(wider))
    summary = pipeline.run()
    pipeline.close()
    assert summary.frames_out == 40
    assert not summary.error
    counts = summary.audit["sources"]["small"]
    assert counts["sampled"] == 10 == counts["skipped"]
    assert summary.audit["error"] == "the audit's reference did not load: std::bad_alloc"


def _sample(text: str, name: str, source: str) -> float:
    match = re.search(rf'^{name}\{{source="{source}"\}} (\S+)$', text, re.MULTILINE)
    assert match is not None, f"{name}{{source={source}}} not in the scrape"
    return float(match.group(1))


@pytest.mark.usefixtures("lane_gets_its_share")
def test_prometheus_and_the_telemetry_file_carry_the_fidelity(
    tmp_path: Path, small_video: Path, tiny_model: Path, wider: Path
) -> None:
    from visionrt.telemetry.metrics import MetricsServer, scrape
    from visionrt.telemetry.report import TelemetryWriter

    pipeline = _pipeline(small_video, tiny_model, audit=0.25, audit_reference=str(wider))
    assert pipeline.auditor is not None
    server = MetricsServer(0)
    server.watch({}, pipeline.queue_depths, pipeline.auditor.figures)
    pipeline.telemetry.add_listener(server)
    server.start()
    path = tmp_path / "telemetry.jsonl"
    try:
        with TelemetryWriter(pipeline.telemetry, path, interval=0.2):
            summary = pipeline.run()
        text = scrape(server.url)
    finally:
        server.close()
        pipeline.close()
    window = summary.audit["sources"]["small"]["window"]
    assert _sample(text, "visionrt_fidelity", "small") == window["map50"] == 0.505
    assert _sample(text, "visionrt_fidelity_frames", "small") == window["frames"] == 10
    assert 'visionrt_events_total{event="audit: sampled",source="small"} 10.0' in text
    last = json.loads(path.read_text().splitlines()[-1])
    assert last["sources"]["small"]["fidelity"] == 0.505


def test_audit_options_from_flags_yaml_and_plans(tmp_path: Path) -> None:
    config = tmp_path / "run.yaml"
    config.write_text("pipeline:\n  audit: {share: 0.05, window: 12}\n", encoding="utf-8")
    assert load_config(config).pipeline.audit == AuditOptions(share=0.05, window=12)
    # The flat keys of before the audit had its own section read the same.
    config.write_text("pipeline:\n  audit: 0.05\n  audit_window: 12\n", encoding="utf-8")
    assert load_config(config).pipeline.audit == AuditOptions(share=0.05, window=12)
    with pytest.raises(ConfigError, match=r"pipeline.audit.share \(--audit\): expected a share"):
        load_config(overrides=["pipeline.audit=0.7"])
    plan = Plan(run={}, tuned={"source_model": "/m/yolo.onnx", "limits": {"min_fidelity": 0.9}})
    planned = planned_audit(PipelineOptions(), plan)
    assert (planned.audit.reference, planned.audit.min_fidelity) == ("/m/yolo.onnx", 0.9)
    mine = planned_audit(pipeline_options(audit_reference="/m/mine.onnx"), plan)
    assert mine.audit.reference == "/m/mine.onnx"  # the user's own stays
    depth = Plan(run={}, tuned={"source_model": "/m/da.onnx", "limits": {"max_abs_rel": 0.05}})
    depth_options = planned_depth_audit(DepthOptions("/m/da-int8.xml"), depth)
    assert (depth_options.audit_reference, depth_options.audit_max_abs_rel) == ("/m/da.onnx", 0.05)


@pytest.mark.usefixtures("lane_gets_its_share")
def test_cli_audit_flag(
    tmp_path: Path,
    small_video: Path,
    tiny_model: Path,
    wider: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    proc = visionrt("run", str(small_video), "-m", str(tiny_model), "--audit", "2")
    assert_one_line_error(proc, 2, "pipeline.audit.share (--audit): expected a share of frames")
    out = tmp_path / "out"
    # In this process, where the lane gets its share of the CPU (lane_gets_its_share).
    code, err = run_cli(
        ["run", str(small_video), "-m", str(tiny_model), "--audit", "0.25", "-o", str(out),
         "--set", f"pipeline.audit_reference={wider}", "--no-video", "--no-jsonl"],
        capsys,
    )  # fmt: skip
    assert code == 0, err
    said = " ".join(err.split())  # the console folds long lines
    assert (
        "audit: small fidelity 0.505 over 10 frames, below the 0.95 budget (25 % sampled, 0 of 10"
        " skipped)"
    ) in said
    summary = json.loads((out / "summary.json").read_text())
    assert summary["audit"]["sources"]["small"]["audited"] == 10


@pytest.mark.usefixtures("lane_gets_its_share")
def test_depth_is_audited_after_alignment(
    small_video: Path, tiny_model: Path, depth_model: Path
) -> None:
    pipeline = Pipeline(
        [str(small_video)],
        tiny_model,
        "onnxruntime",
        source_options=SourceOptions(mode="file", max_frames=4),
        options=pipeline_options(warmup=0, audit=0.5, audit_reference=str(tiny_model)),
        # Smoothed: what the user gets is no longer the reference's own map.
        depth=DepthOptions(depth_model, short_side=266, smoothing=0.5),
    )
    results: list[FrameResult] = list(pipeline)
    pipeline.close()
    assert all(r.depth is not None for r in results)
    audit = pipeline.summary().audit
    depth = audit["sources"]["small"]["depth"]
    assert depth["frames"] == 2
    assert 0 <= depth["abs_rel"] < 1
    assert 0 <= depth["delta1"] <= 1
    assert audit["depth_reference"] == str(depth_model)
    assert audit["depth_architecture_only"] is True


def test_the_printed_summary_says_a_figure_below_the_budget() -> None:
    from visionrt.telemetry.report import audit_lines

    def line(map50: float) -> str:
        entry = {"fidelity": {"map50": map50, "frames": 16}, "sampled": 16, "skipped": 0}
        audit = {"period": 50, "budget": {"min_fidelity": 0.95}, "sources": {"pan": entry}}
        return audit_lines(audit)[0]

    assert line(0.909) == (
        "audit: pan fidelity 0.909 over 16 frames, below the 0.95 budget (2 % sampled, 0 of 16"
        " skipped)"
    )
    assert "below" not in line(0.97)


def test_an_audit_event_reads_back_what_it_wrote() -> None:
    """A cluster's workers send their events as JSON; the driver says them as a plain run."""
    from visionrt.accuracy.audit_window import AuditEvent

    event = AuditEvent(12.25, "cam", "fidelity", 0.81234, 0.95, 30, 240)
    again = AuditEvent.from_json(event.to_json())
    assert str(again) == str(event)
    assert again.to_json() == event.to_json()


class StillUntil(Source):
    """`before` grey frames, then (once `go` is set) `after` more: motion gating spares all but
    the first (reused when still; with `moving`, a small square walks across a corner, and
    regions mode runs the detector on a window around it), and the test holds the rest back
    until the audit has spoken."""

    def __init__(self, before: int, after: int, go: threading.Event, moving: bool) -> None:
        super().__init__()
        self.name, self.before, self.after, self.go = "still", before, after, go
        self.frame_count, self.fps, self.moving = before + after, 30.0, moving

    def frames(self) -> Iterator[Frame]:
        for index in range(self.before + self.after):
            if index == self.before and not self.go.wait(HANG_SECONDS):
                raise AssertionError("the audit never turned gating off")
            image = np.full((256, 256, 3), 90, np.uint8)
            if self.moving:
                x = 4 + 4 * (index % 8)
                image[4:16, x : x + 12] = 255
            yield Frame(0, index, image, index / 30, time.perf_counter(), self.name)
            self.stats.frames = index + 1


@pytest.mark.usefixtures("lane_gets_its_share")
@pytest.mark.parametrize(("mode", "spared"), [("skip", "reused"), ("regions", "regions: 1")])
def test_frames_gating_spared_below_the_budget_turn_gating_off_for_their_source(
    tmp_path: Path, tiny_model: Path, elsewhere: Path, mode: str, spared: str
) -> None:
    """The plan's skip held the budget on the video it was tuned on and scored 0.883 on another,
    regions 0.866 on a panning clip (issue #47): the audit scores the frames gating spared on
    their own, and a source where they break the budget is gated no more, said in one line."""
    go = threading.Event()
    notes: list[str] = []

    def noted(note: str) -> None:
        notes.append(note)
        if note.startswith("motion gating off"):
            go.set()

    # A 256-px detector on 256-px frames; regions run a 64-px one on 64-px windows.
    model = write_tiny_detector(tmp_path / "wide.onnx", [(128, 128, 80, 40, 0.9, 0.0)], 256)
    motion = {"mode": mode, "region": 64, "region_model": str(tiny_model)}
    pipeline = Pipeline(
        [StillUntil(20, 10, go, moving=mode == "regions")],
        model,
        "onnxruntime",
        options=pipeline_options(
            warmup=0, audit=0.2, audit_reference=str(elsewhere), motion=motion
        ),
        hooks=Hooks(on_note=noted),
    )
    results = finishes(lambda: list(pipeline), "the gated run")
    pipeline.close()
    processed = [r.processed for r in results]
    assert processed[0] == "full"  # a source's first frame is always seen whole
    assert processed[1:20].count(spared) >= 10  # enough for an event (MIN_EVENT_FRAMES)
    assert processed[20:] == ["full"] * 10  # gated no more once the audit spoke
    (note,) = [n for n in notes if n.startswith("motion gating off")]
    assert re.fullmatch(
        r"motion gating off for still: the frames it spared scored 0\.000 against the FP32"
        r" reference \(budget 0\.95, \d+ frames\); from frame \d+ on, the detector runs on each"
        r" of its frames, whole",
        note,
    )
    audit = pipeline.summary().audit
    (event,) = [e for e in audit["events"] if e["metric"] == "fidelity of frames gating spared"]
    assert event["source"] == "still"
    assert 10 <= audit["sources"]["still"]["spared"]["frames"] <= 19
    assert audit["sources"]["still"]["spared"]["map50"] == 0.0
