"""A run cut short still accounts for every frame and keeps every result it computed: the caller
stops iterating, a stage fails, a sink fails beside another that works (issue #47, items 2
and 4)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import finishes

from visionrt import Pipeline, PipelineOptions
from visionrt.errors import SinkError
from visionrt.sinks import JsonlSink, Sink
from visionrt.types import FrameResult


def test_a_break_in_the_callers_loop_still_accounts_for_every_frame(tiny_model: Path) -> None:
    pipeline = Pipeline(
        ["synthetic:64x48:100"], tiny_model, "null", options=PipelineOptions(warmup=0)
    )
    delivered = 0
    for delivered, _ in enumerate(pipeline, start=1):
        if delivered == 4:
            break
    pipeline.close()
    summary = pipeline.summary()
    assert summary.frames_out == 4
    assert summary.frames_in > 4  # read ahead into the queues, then never delivered
    missing = summary.frames_in - summary.frames_out
    assert summary.dropped == {
        "pipeline: not delivered: the caller stopped taking results": missing
    }
    assert summary.accounted
    (source,) = summary.sources
    assert source["frames_in"] == source["frames_out"] + sum(source["dropped"].values())


class FailingSink(Sink):
    """Takes `good` results, then raises on the next one (a video that cannot be encoded)."""

    def __init__(self, good: int) -> None:
        self.good, self.written, self.closed_complete = good, 0, None

    def write(self, result: FrameResult) -> None:
        if self.written == self.good:
            raise SinkError("cannot encode out.mp4 with mjpeg: Invalid argument")
        self.written += 1

    def close(self, complete: bool = True) -> list[Path]:
        self.closed_complete = complete
        return []


@pytest.mark.parametrize("good", [0, 3])
def test_a_sink_that_fails_loses_none_of_the_others_results(
    tmp_path: Path, tiny_model: Path, good: int
) -> None:
    """Before: the video sink failed first in the list and the JSONL never got the frame in
    hand, so the run left only summary.json (8 frames in, 1 out, not accounted)."""
    pipeline = Pipeline(
        ["synthetic:64x48:200"], tiny_model, "null", options=PipelineOptions(warmup=0)
    )
    failing, jsonl = FailingSink(good), tmp_path / "out.jsonl"

    def run() -> None:
        with pytest.raises(SinkError, match="mjpeg"):
            pipeline.run([failing, JsonlSink(jsonl)])

    finishes(run, "the run after a sink failed")
    pipeline.close()
    summary = pipeline.summary()
    frames = [json.loads(line)["frame"] for line in jsonl.read_text().splitlines()]
    # Every result that reached the sinks is in the JSONL, in order, the failed one included.
    assert len(frames) == summary.frames_out >= good + 1
    assert frames == list(range(len(frames)))
    assert failing.closed_complete is False  # only the sink that failed stays partial
    assert summary.accounted, (summary.frames_in, summary.frames_out, summary.dropped)
    assert set(summary.dropped) <= {"pipeline: not delivered: the run failed"}
    assert "mjpeg" in summary.error
