"""The pipeline end to end on generated media: frame accounting, order, boxes, live drops."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import HANG_SECONDS, finishes, until, write_video

from visionrt import BackendOptions, Pipeline, PipelineOptions, SourceOptions
from visionrt.errors import SourceError
from visionrt.sinks import JsonlSink, VideoSink
from visionrt.sources import Source
from visionrt.telemetry import RunSummary
from visionrt.types import Frame


def test_every_frame_in_order_with_known_box(small_video: Path, tiny_model: Path) -> None:
    pipeline = Pipeline([str(small_video)], tiny_model, "onnxruntime")
    results = list(pipeline)
    pipeline.close()
    assert [r.frame.index for r in results] == list(range(40))
    summary = pipeline.summary()
    assert (summary.frames_in, summary.frames_out, summary.accounted) == (40, 40, True)
    # Input box cx 32, cy 32, 20×10 in a 64×64 letterbox of a 128×96 frame:
    # scale 0.5, pad top 8 → source (44, 38, 84, 58).
    for result in results:
        assert result.detections.class_id.tolist() == [0]
        np.testing.assert_allclose(result.detections.xyxy, [[44, 38, 84, 58]], atol=1e-3)
        assert result.class_names == ("person", "car")


def test_several_sources_each_in_order(tmp_path: Path, tiny_model: Path) -> None:
    a = write_video(tmp_path / "a.mp4", frames=25)
    b = write_video(tmp_path / "b.mp4", frames=17, width=96, height=96)
    pipeline = Pipeline([str(a), str(b)], tiny_model, "onnxruntime")
    by_source: dict[int, list[int]] = {0: [], 1: []}
    for result in pipeline:
        by_source[result.frame.source_id].append(result.frame.index)
    pipeline.close()
    assert by_source == {0: list(range(25)), 1: list(range(17))}


def test_parallel_inference_workers_keep_order(small_video: Path, tiny_model: Path) -> None:
    pipeline = Pipeline(
        [str(small_video)], tiny_model, "null", BackendOptions(settings={"delay_ms": "3"})
    )
    pipeline.task.backend.concurrency = 3  # results overtake each other; the pipeline reorders
    indices = [r.frame.index for r in pipeline]
    pipeline.close()
    assert indices == list(range(40))


def test_batching_processes_every_frame(small_video: Path, tiny_model: Path) -> None:
    # A batch may wait up to a second to fill (frames come every millisecond or so): the 40
    # frames run as ten batches of four different frames, not forty padded ones.
    pipeline = Pipeline(
        [str(small_video)],
        tiny_model,
        "null",
        BackendOptions(batch=4),
        options=PipelineOptions(batch_wait_ms=1000, warmup=0),
    )
    infer, frames_per_call = pipeline.task.backend.infer, []

    def counted(inputs: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        (tensor,) = inputs.values()
        frames_per_call.append(len(np.unique(tensor.reshape(len(tensor), -1), axis=0)))
        return infer(inputs)

    pipeline.task.backend.infer = counted  # type: ignore[method-assign]
    results = list(pipeline)
    pipeline.close()
    assert [r.frame.index for r in results] == list(range(40))
    assert frames_per_call == [4] * 10


def test_run_into_sinks_writes_complete_files(
    tmp_path: Path, small_video: Path, tiny_model: Path
) -> None:
    import av

    pipeline = Pipeline([str(small_video)], tiny_model, "onnxruntime")
    jsonl, mp4 = tmp_path / "out.jsonl", tmp_path / "out.mp4"
    summary = pipeline.run([JsonlSink(jsonl), VideoSink(mp4, fps=25)])
    pipeline.close()
    lines = [json.loads(line) for line in jsonl.read_text().splitlines()]
    assert [line["frame"] for line in lines] == list(range(40))
    assert lines[0]["detections"][0]["class_name"] == "person"
    assert lines[0]["detections"][0]["xyxy"] == [44.0, 38.0, 84.0, 58.0]
    with av.open(str(mp4)) as container:
        assert sum(1 for _ in container.decode(video=0)) == 40
    assert not list(tmp_path.glob("*.partial*"))
    assert sorted(summary.outputs) == sorted([str(jsonl), str(mp4)])
    # Every frame was timed once per stage, and the percentiles are of those samples.
    for stage in ("decode", "preprocess", "infer", "postprocess", "sink"):
        assert len(pipeline.telemetry.samples[stage]) == 40, stage
        figures = summary.stages[stage]
        assert 0 < figures["p50"] <= figures["p95"] <= figures["p99"], (stage, figures)
    assert 0 < summary.latency["p50"] <= summary.latency["p99"]


def test_live_mode_drops_are_counted(tiny_model: Path) -> None:
    """A source faster than inference: the freshest frame wins, every drop is counted. Faster
    on any machine: inference holds its first frame until the 30 FPS source has read all 90."""
    pipeline = Pipeline(
        ["synthetic:320x240:90"],
        tiny_model,
        "null",
        source_options=SourceOptions(mode="live"),
        options=PipelineOptions(warmup=0),
    )
    source, infer = pipeline.sources[0], pipeline.task.backend.infer
    held: list[int] = []

    def slower_than_the_source(inputs: Any) -> Any:
        if not held:
            held.append(1)
            until(lambda: source.stats.frames == 90, "read its 90 frames")
        return infer(inputs)

    pipeline.task.backend.infer = slower_than_the_source  # type: ignore[method-assign]
    out = finishes(lambda: [r.frame.index for r in pipeline], "the live run")
    pipeline.close()
    summary = pipeline.summary()
    assert summary.frames_in == 90
    assert 0 < len(out) < 90
    assert out == sorted(out)
    assert summary.accounted
    assert sum(summary.dropped.values()) == 90 - len(out)


def test_stop_finishes_frames_in_flight(small_video: Path, tiny_model: Path) -> None:
    pipeline = Pipeline(
        [str(small_video)], tiny_model, "null", BackendOptions(settings={"delay_ms": "5"})
    )
    seen = []
    for result in pipeline:
        seen.append(result.frame.index)
        if len(seen) == 5:
            pipeline.stop()
    pipeline.close()
    summary = pipeline.summary()
    assert summary.interrupted
    assert seen == list(range(len(seen)))
    assert 5 <= len(seen) < 40
    assert summary.accounted


def test_corrupt_middle_skips_and_counts(tmp_path: Path, tiny_model: Path) -> None:
    video = write_video(tmp_path / "corrupt.avi", frames=60, width=160, height=120)
    data = bytearray(video.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 4000] = (
        np.random.default_rng(1).integers(0, 256, 4000, dtype=np.uint8).tobytes()
    )
    video.write_bytes(bytes(data))
    pipeline = Pipeline([str(video)], tiny_model, "null")
    results = list(pipeline)
    pipeline.close()
    summary = pipeline.summary()
    assert 0 < len(results) < 60
    assert summary.accounted
    # What the damage cost is counted and said, not silently absorbed.
    source = summary.sources[0]
    assert source["declared"] == 60
    assert source["lost"] == 60 - len(results) > 0
    assert f"{len(results)} of 60 declared frames decoded" in source["warnings"][0]


def test_truncated_file_ends_cleanly(tmp_path: Path, tiny_model: Path) -> None:
    video = write_video(tmp_path / "cut.mkv", frames=60, width=160, height=120)
    data = video.read_bytes()
    video.write_bytes(data[: len(data) // 2])
    pipeline = Pipeline([str(video)], tiny_model, "null")
    results = list(pipeline)
    pipeline.close()
    assert 5 < len(results) < 60
    assert [r.frame.index for r in results] == list(range(len(results)))
    summary = pipeline.summary()
    assert summary.accounted
    # Matroska declares a duration (2.4 s at 25 FPS), not a count.
    assert summary.sources[0]["lost"] == 60 - len(results)


def test_truncated_mp4_without_index_is_a_clear_error(tmp_path: Path, tiny_model: Path) -> None:
    video = write_video(tmp_path / "cut.mp4", frames=30)
    video.write_bytes(video.read_bytes()[:2000])  # the moov index is written last
    with pytest.raises(SourceError, match=r"cannot open file|cannot be decoded"):
        Pipeline([str(video)], tiny_model)


def test_missing_source_fails_before_model_load(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="source not found"):
        Pipeline([str(tmp_path / "nope.mp4")], tmp_path / "also-missing.onnx")


def test_not_a_video(tmp_path: Path, tiny_model: Path) -> None:
    bogus = tmp_path / "bogus.mp4"
    bogus.write_bytes(b"this is not a video" * 100)
    with pytest.raises(SourceError, match="cannot open file"):
        Pipeline([str(bogus)], tiny_model)


def test_fixed_batch_model_rejects_other_batch(small_video: Path, tiny_model: Path) -> None:
    from visionrt.errors import ConfigError

    with pytest.raises(ConfigError, match="batch axis fixed at 1, got 4"):
        Pipeline([str(small_video)], tiny_model, "onnxruntime", BackendOptions(batch=4))


def test_image_folder_source(tmp_path: Path, tiny_model: Path) -> None:
    import cv2

    for i in range(5):
        cv2.imwrite(str(tmp_path / f"img{i:02d}.png"), np.full((96, 128, 3), i * 40, np.uint8))
    (tmp_path / "broken.png").write_bytes(b"not a png")
    pipeline = Pipeline([str(tmp_path)], tiny_model, "onnxruntime")
    results = list(pipeline)
    pipeline.close()
    assert [Path(r.frame.source_name).name for r in results] == [
        f"img{i:02d}.png" for i in range(5)
    ]
    np.testing.assert_allclose(results[0].detections.xyxy, [[44, 38, 84, 58]], atol=1e-3)
    assert pipeline.summary().sources[0]["corrupt"] == 1


def test_dropped_stream_reconnects_then_reports(
    tmp_path: Path, small_video: Path, tiny_model: Path
) -> None:
    from conftest import write_video

    from visionrt.sources.video import VideoSource

    # A stream that declares no end (raw H.264), then removed: its end is a disconnect (a file
    # that declares its length ends there), and every reconnect fails until the source gives up.
    stream = write_video(tmp_path / "stream.h264", frames=40, codec="libx264")
    options = SourceOptions(mode="live", reconnect_attempts=2, reconnect_backoff=0.01)
    source = VideoSource(str(stream), 0, options, kind="stream")
    Path(stream).unlink()
    pipeline = Pipeline([source], tiny_model, "null", options=PipelineOptions(stale_after=30))
    results = list(pipeline)
    pipeline.close()
    summary = pipeline.summary()
    assert summary.sources[0]["reconnects"] == 2
    assert "gave up after 2 reconnects" in summary.error
    assert summary.frames_in == 40
    assert summary.accounted
    assert [r.frame.index for r in results] == sorted(r.frame.index for r in results)


class CameraSource(Source):
    """A live camera of `count` 64×64 frames: the first, then, once `go` is set, the rest as
    fast as they are read."""

    def __init__(self, count: int) -> None:
        super().__init__()
        self.name, self.count, self.live, self.fps = "camera", count, True, 30.0
        self.go = threading.Event()

    def frames(self) -> Iterator[Frame]:
        for index in range(self.count):
            if self._stopped:
                return
            image = np.full((64, 64, 3), index % 250, np.uint8)
            yield Frame(0, index, image, index / 30, time.perf_counter(), self.name)
            self.stats.frames = index + 1
            if index == 0:
                self.go.wait(HANG_SECONDS)


def test_live_latency_does_not_build_up(tiny_model: Path) -> None:
    """Queues must not hold old frames: inference holds frame 0 while the camera sends all 60.
    Then the next result is one of the last frames, not frame 1 (4-deep queues in order would
    deliver 1, 2, 3 …): a frame waits for at most the one in inference and the ones being
    prepared, never in a backlog. Every frame in between is dropped, counted."""
    source = CameraSource(60)
    pipeline = Pipeline(
        [source],
        tiny_model,
        "null",
        # Age is not what this is about: none is dropped as stale however long the hold.
        options=PipelineOptions(warmup=0, stale_after=2 * HANG_SECONDS),
    )
    infer, held = pipeline.task.backend.infer, []

    def holding_frame_0(inputs: Any) -> Any:
        if not held:
            held.append(1)
            source.go.set()
            until(lambda: source.stats.frames == 60, "sent its 60 frames")
        return infer(inputs)

    pipeline.task.backend.infer = holding_frame_0  # type: ignore[method-assign]
    results = finishes(lambda: [r.frame.index for r in pipeline], "the live run")
    pipeline.close()
    summary = pipeline.summary()
    assert results[0] == 0
    assert results[1] >= 60 - 3, results  # the freshest, but for those already being prepared
    assert results[-1] == 59
    assert len(results) <= 4
    assert summary.accounted
    assert len(results) + sum(summary.dropped.values()) == summary.frames_in == 60


def test_batch_buffers_fill_in_place_and_pad() -> None:
    from visionrt.tasks.base import BatchBuffers

    rows = [np.full((1, 2), i, np.float32) for i in range(3)]
    batches = BatchBuffers(4, pad=True)
    first = batches.fill(rows)
    assert first.tolist() == [[0, 0], [1, 1], [2, 2], [0, 0]]  # padded with the first row
    again = batches.fill(rows[:2])
    assert np.shares_memory(first, again)  # the same array, filled again: no allocation
    assert again.tolist() == [[0, 0], [1, 1], [0, 0], [0, 0]]
    assert BatchBuffers(1).fill(rows[:1]) is rows[0]  # a batch of one is its row
    assert BatchBuffers(4).fill(rows).shape == (3, 2)  # no padding unless the axis is fixed


def test_a_slow_sink_backs_up_its_own_queue_and_loses_nothing(
    small_video: Path, tiny_model: Path
) -> None:
    """Sinks write on a thread of their own: while one is held, results wait in the `fused`
    queue (its room filled, visible to `queue_depths`), then every frame is written in order."""
    from visionrt.sinks import Sink

    gate, written, threads = threading.Event(), [], set()

    class Held(Sink):
        def write(self, result) -> None:
            gate.wait(HANG_SECONDS)
            threads.add(threading.current_thread().name)
            written.append(result.frame.index)

        def close(self, complete: bool = True) -> list[Path]:
            return []

    options = PipelineOptions(warmup=0, queue_size=2)
    pipeline = Pipeline([str(small_video)], tiny_model, "null", options=options)
    summaries: list[RunSummary] = []
    runner = threading.Thread(target=lambda: summaries.append(pipeline.run([Held()])))
    runner.start()
    deadline, full = time.monotonic() + HANG_SECONDS, False
    while not full and time.monotonic() < deadline and runner.is_alive():
        full = pipeline.queue_depths().get("fused") == 2
        time.sleep(0.01)
    gate.set()
    runner.join(HANG_SECONDS)
    pipeline.close()
    assert full, "the sink queue never filled while its sink was held"
    assert summaries[0].frames_out == 40
    assert summaries[0].accounted
    assert written == list(range(40))
    assert threads == {"sink"}


def test_a_sink_that_fails_ends_the_run_with_its_error(small_video: Path, tiny_model: Path) -> None:
    """The sink thread's error is the run's, raised by `run` after the sinks are finalized,
    even when it fails while the consumer waits for room in the sink queue."""

    from visionrt.errors import SinkError
    from visionrt.sinks import Sink

    class Broken(Sink):
        def write(self, result) -> None:
            # Fail once the consumer waits on a full queue.
            deadline = time.monotonic() + HANG_SECONDS
            while pipeline.queue_depths().get("fused") != 1 and time.monotonic() < deadline:
                time.sleep(0.01)
            raise OSError("disk full")

        def close(self, complete: bool = True) -> list[Path]:
            self.complete = complete
            return []

    sink = Broken()
    options = PipelineOptions(warmup=0, queue_size=1)
    pipeline = Pipeline([str(small_video)], tiny_model, "null", options=options)
    with pytest.raises(SinkError, match="writing Broken output failed: disk full"):
        pipeline.run([sink])
    pipeline.close()
    assert sink.complete is False
    assert "disk full" in pipeline.summary().error
