"""`profile`'s verdicts on three built cases: a slow model, a heavy video with a model that costs
nothing, and no model at all; and the trace it writes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import write_video

from visionrt import BackendOptions, Pipeline, PipelineOptions
from visionrt.bench.profile import profile_pipeline, verdict, write_trace


def _profile(video: Path, model: Path, delay_ms: int = 0):
    pipeline = Pipeline(
        [str(video)],
        model,
        "null",
        BackendOptions(settings={"delay_ms": str(delay_ms)}),
        options=PipelineOptions(warmup=0),
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
    profile = _profile(small_video, tiny_model)
    assert profile.bottleneck == "overhead", (profile.busy, profile.stage_ms)
    assert profile.verdict.startswith("overhead-bound")


@pytest.mark.parametrize(
    ("stage_ms", "busy", "expected"),
    [
        ({"infer": 80, "decode": 3}, {"infer": 0.95, "decode": 0.04}, "inference-bound, 95%"),
        ({"infer": 1, "sink": 9}, {"infer": 0.1, "postprocess+sink": 0.9}, "sink-bound"),
        ({"preprocess": 6}, {"preprocess": 0.8}, "preprocess-bound"),
        ({"decode": 5, "postprocess": 4}, {"decode": 0.9, "postprocess+sink": 0.5}, "overhead"),
        ({"decode": 1}, {"decode": 0.9, "postprocess+sink": 0.1}, "overhead"),
        ({"decode": 9}, {"decode": 0.9, "postprocess+sink": 0.1}, "decode-bound"),
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
    names = {e["args"]["name"] for e in trace if e["ph"] == "M"}
    assert {"source-0", "preprocess", "infer-0"} <= names
    slices = [e for e in trace if e["ph"] == "X"]
    assert sum(e["name"] == "infer" for e in slices) == 40
    assert all(e["dur"] >= 0 for e in slices)
