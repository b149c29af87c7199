"""`profile`'s verdicts on three built cases: a slow model, a heavy video with a model that costs
nothing, and no model at all; and the trace it writes."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from conftest import write_video

from visionrt import BackendOptions, Pipeline, PipelineOptions
from visionrt.bench.profile import profile_pipeline, verdict, write_trace


def _profile(video: Path, model: Path, delay_ms: int = 0, costs: dict[str, float] | None = None):
    """`profile` of a run of `video` on the null backend (`delay_ms` a frame); `costs`: the
    seconds each stage named there records per frame, whatever it measured."""
    pipeline = Pipeline(
        [str(video)],
        model,
        "null",
        BackendOptions(settings={"delay_ms": str(delay_ms)}),
        options=PipelineOptions(warmup=0),
    )
    if costs is not None:
        record = pipeline.telemetry.record
        pipeline.telemetry.record = (  # type: ignore[method-assign]
            lambda stage, seconds: record(stage, costs.get(stage, seconds))
        )
    try:
        return profile_pipeline(pipeline)
    finally:
        pipeline.close()


def test_a_slow_model_is_inference_bound(small_video: Path, tiny_model: Path) -> None:
    profile = _profile(small_video, tiny_model, delay_ms=25)
    assert profile.bottleneck == "infer", profile.busy
    assert profile.verdict.startswith("inference-bound")
    assert "visionrt tune" in profile.verdict
    assert "halving it →" in profile.verdict
    assert profile.frames == 40


def test_a_heavy_video_with_a_free_model_is_decode_bound(tmp_path: Path, tiny_model: Path) -> None:
    video = write_video(tmp_path / "big.mp4", frames=10, width=3840, height=2160)
    profile = _profile(video, tiny_model)
    assert profile.bottleneck == "decode", (profile.busy, profile.stage_ms)
    assert profile.verdict.startswith("decode-bound")


def test_no_model_is_overhead_bound(small_video: Path, tiny_model: Path) -> None:
    """No model and a 128×96 video: no thread does a bottleneck's 3 ms of work per frame. The
    stages record what they cost on a quiet machine (decoding ~1 ms): measured, a loaded
    machine stretches each stage's wall time, and decoding read 3 ms or more ('decode-bound')
    beside two CPU hogs on 2 cores. The profile still runs the pipeline, takes each stage's
    spans on its thread and names the verdict from them."""
    quiet = {"decode": 1e-3, "preprocess": 4e-4, "infer": 1e-5, "postprocess": 2e-4, "fuse": 1e-4}
    profile = _profile(small_video, tiny_model, costs=quiet)
    assert profile.frames == 40
    assert profile.stage_ms["decode"] == pytest.approx(1.0)
    assert profile.bottleneck == "overhead", (profile.busy, profile.stage_ms)
    assert profile.verdict.startswith("overhead-bound")


@pytest.mark.parametrize(
    ("stage_ms", "busy", "expected"),
    [
        ({"infer": 80, "decode": 3}, {"infer": 0.95, "decode": 0.04}, "inference-bound, 95%"),
        ({"infer": 1, "sink": 9}, {"infer": 0.1, "sink": 0.9}, "sink-bound"),
        ({"preprocess": 6}, {"preprocess": 0.8}, "preprocess-bound"),
        ({"fuse": 9}, {"fuse": 0.8, "sink": 0.1}, "fuse-bound"),
        ({"decode": 5, "fuse": 4}, {"decode": 0.9, "fuse": 0.5}, "overhead"),
        ({"decode": 1}, {"decode": 0.9, "sink": 0.1}, "overhead"),
        ({"decode": 9}, {"decode": 0.9, "sink": 0.1}, "decode-bound"),
    ],
)
def test_verdict_by_hand(stage_ms, busy, expected) -> None:
    _, text = verdict(stage_ms, busy, fps=10, concurrency=1)
    assert text.startswith(expected)


def test_amdahl_what_if() -> None:
    # 80 ms inference, 3 ms decode: halving inference gives a 40 ms period → 25 FPS.
    _, text = verdict({"infer": 80, "decode": 3}, {"infer": 0.95}, fps=12, concurrency=1)
    assert text.endswith("halving it → ~25 FPS")


def test_trace_has_a_track_per_thread(tmp_path: Path, small_video: Path, tiny_model: Path) -> None:
    profile = _profile(small_video, tiny_model, delay_ms=2)
    trace = json.loads(write_trace(profile, tmp_path / "trace.json").read_text())["traceEvents"]
    tracks = {e["tid"]: e["args"]["name"] for e in trace if e["ph"] == "M"}
    assert {"source-0", "preprocess", "infer-0"} <= set(tracks.values())
    slices = [e for e in trace if e["ph"] == "X"]
    # Each stage on the thread that does it, once per frame.
    threads = {"decode": "source-0", "preprocess": "preprocess", "infer": "infer-0"}
    for stage, thread in threads.items():
        mine = [e for e in slices if e["name"] == stage]
        assert len(mine) == 40, stage
        assert {tracks[e["tid"]] for e in mine} == {thread}, stage
    infer = [e["dur"] for e in slices if e["name"] == "infer"]
    assert min(infer) >= 2000  # µs: the null backend sleeps 2 ms a call
    # The slices are the stage timings the summary reports, in the trace's microseconds.
    assert sum(infer) / len(infer) / 1e3 == pytest.approx(profile.stage_ms["infer"], abs=0.01)
    # A thread does one thing at a time: its slices follow each other without overlapping
    # (0.2 µs: the trace's rounding).
    for tid, name in tracks.items():
        spans = sorted((e["ts"], e["dur"]) for e in slices if e["tid"] == tid)
        for (start, dur), (following, _) in itertools.pairwise(spans):
            assert start + dur <= following + 0.2, (name, start, dur, following)


def test_a_full_sink_queue_names_the_sink() -> None:
    # x264 "slower" on 2 cores: the sink slows inference too, so busy shares alone say infer;
    # results waiting in front of the sink thread say who holds the run back.
    stage_ms = {"infer": 107.0, "decode": 30.0, "sink": 51.0}
    busy = {"infer": 0.93, "decode": 0.52, "sink": 0.89}
    assert verdict(stage_ms, busy, fps=17, concurrency=2, sink_backlog=0.67)[0] == "sink"
    assert verdict(stage_ms, busy, fps=17, concurrency=2, sink_backlog=0.0)[0] == "infer"
