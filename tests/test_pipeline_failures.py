"""The pipeline when things go wrong: a stage that raises, a stuck reader, a second pass, an abort,
and batches whose rows must reach the right frames."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import numpy as np
import pytest
from conftest import HANG_SECONDS, finishes

from visionrt import BackendOptions, Pipeline, PipelineOptions, SourceOptions
from visionrt.backends import Backend, load_backend
from visionrt.backends.base import Array
from visionrt.errors import StageError
from visionrt.sinks import JsonlSink
from visionrt.sources import Source
from visionrt.types import BackendInfo, Frame, TensorSpec


class FrameSource(Source):
    """Frames from a list of images; optionally blocks forever (a stalled stream) at the end."""

    def __init__(self, images: list[np.ndarray], stall: bool = False, live: bool = False) -> None:
        super().__init__()
        self.name, self.images, self.stall, self.live = "frames", images, stall, live
        self.frame_count = 0 if stall else len(images)
        self.fps = 30.0

    def frames(self) -> Iterator[Frame]:
        for index, image in enumerate(self.images):
            if self._stopped:
                return
            yield Frame(0, index, image, index / 30, time.perf_counter(), self.name)
            self.stats.frames = index + 1
        while self.stall:  # stuck in I/O: does not even look at stop()
            time.sleep(0.05)


class EchoBackend(Backend):
    """An anchor-free head over a 64×64 input whose one box sits at x = 4 + 50 × (mean of that
    batch row): each row's box tells which frame it came from. Optionally fails on call N."""

    name = "echo"

    def __init__(self, batch: int = 1, fail_on_call: int = 0) -> None:
        self.fail_on_call, self.calls = fail_on_call, 0
        self.info = BackendInfo(
            "echo",
            "0",
            "cpu",
            "fp32",
            (TensorSpec("images", (batch, 3, 64, 64), "float32"),),
            (TensorSpec("output0", (batch, 6, 8), "float32"),),
        )

    def load(self, model: Path, options: BackendOptions) -> None:  # built ready
        pass

    def infer(self, inputs: Mapping[str, Array]) -> list[Array]:
        self.calls += 1
        if self.calls == self.fail_on_call:
            raise RuntimeError("Reshape: the input's values ask for an impossible shape\nmore")
        images = inputs["images"]
        output = np.zeros((images.shape[0], 6, 8), np.float32)
        output[:, 0, 0] = 4 + 50 * images.reshape(images.shape[0], -1).mean(axis=1)
        output[:, 1:4, 0] = (32, 4, 4)
        output[:, 4, 0] = 0.9
        return [output]


def grey_frames(count: int) -> list[np.ndarray]:
    """64×64 frames of uniform brightness (4k + 10) mod 250: distinct over 60 frames."""
    return [np.full((64, 64, 3), (4 * k + 10) % 250, np.uint8) for k in range(count)]


def _box_x(frame_index: int) -> float:
    return 4 + 50 * ((4 * frame_index + 10) % 250) / 255


def test_each_batch_row_reaches_its_own_frame(tiny_model: Path) -> None:
    backend = EchoBackend(batch=4)
    pipeline = Pipeline(
        [FrameSource(grey_frames(23))],  # 23: the last batch is short
        tiny_model,
        backend,
        BackendOptions(batch=4),
        # A batch waits for its 4 frames (the inbox's close releases the last, short one):
        # without the wait, a backend faster than the preprocessing ran one frame a call.
        options=PipelineOptions(warmup=0, batch_wait_ms=1000),
    )
    results = list(pipeline)
    pipeline.close()
    assert [r.frame.index for r in results] == list(range(23))
    for result in results:
        centre = result.detections.xyxy[0, [0, 2]].mean()
        assert centre == pytest.approx(_box_x(result.frame.index), abs=1e-3), result.frame.index
    assert backend.calls < 23  # frames really were batched


def test_a_stage_that_raises_stops_the_run_quickly(tmp_path: Path, tiny_model: Path) -> None:
    # The backend passes warm-up but fails on a real frame: the run must end at once with that
    # error in one line, and the frames before it are finalized.
    source, backend = FrameSource(grey_frames(200)), EchoBackend(fail_on_call=6)
    pipeline = Pipeline([source], tiny_model, backend, options=PipelineOptions(warmup=0))
    jsonl = tmp_path / "out.jsonl"

    def run() -> None:
        with pytest.raises(StageError, match=r"^infer-0 stage failed: RuntimeError: Reshape.*sha"):
            pipeline.run([JsonlSink(jsonl)])

    finishes(run, "the run after a stage failed")
    pipeline.close()
    # At once: the run was aborted, not drained; no frame inferred after the failing one, and
    # the source no longer read (its 200 frames would take the queues' room many times over).
    assert pipeline._flow.aborting.is_set()
    assert backend.calls == 6
    assert source.stats.frames < 200
    # Frames 0-4 were inferred; those already handed on are finalized, in order.
    frames = [json.loads(line)["frame"] for line in jsonl.read_text().splitlines()]
    assert 1 <= len(frames) <= 5
    assert frames == list(range(len(frames)))
    summary = pipeline.summary()
    assert "infer-0 stage failed" in summary.error
    assert not summary.interrupted


def test_a_preprocess_failure_is_reported_not_hung(tiny_model: Path) -> None:
    broken = [*grey_frames(3), np.zeros((0, 0, 3), np.uint8), *grey_frames(50)]
    pipeline = Pipeline([FrameSource(broken)], tiny_model, "null")

    def run() -> None:
        with pytest.raises(StageError, match="preprocess stage failed"):
            list(pipeline)

    finishes(run, "the run after preprocess failed")
    pipeline.close()


def test_stop_does_not_wait_for_a_stuck_reader(tiny_model: Path) -> None:
    source = FrameSource(grey_frames(5), stall=True, live=True)
    pipeline = Pipeline([source], tiny_model, "null", options=PipelineOptions(warmup=0))
    seen = []

    def run() -> None:
        for result in pipeline:
            seen.append(result.frame.index)
            if len(seen) == 1:
                pipeline.stop()

    # The reader never returns: a run that waited for it would never end.
    finishes(run, "the run stopped beside a stuck reader")
    pipeline.close()
    assert pipeline.summary().interrupted
    # Still stuck: only a daemon lets the process exit (pytest itself once hung on one).
    stuck = [t for t in pipeline.graph.readers if t.is_alive()] if pipeline.graph else []
    assert stuck, "the reader was expected to be stuck still"
    assert all(t.daemon for t in stuck)


def test_abort_leaves_at_once(tiny_model: Path) -> None:
    pipeline = Pipeline(
        ["synthetic:64x64:1000"],
        tiny_model,
        "null",
        BackendOptions(settings={"delay_ms": "20"}),
        options=PipelineOptions(warmup=0),
    )
    results: list[int] = []
    aborted_at: list[int] = []

    def abort() -> None:
        pipeline.abort()
        aborted_at.append(len(results))

    aborter = threading.Thread(target=abort)

    def run() -> None:  # 1000 frames of 20 ms: 20 s unless the abort ends it
        for result in pipeline:
            results.append(result.frame.index)
            if len(results) == 3:
                aborter.start()

    finishes(run, "the aborted run")
    aborter.join(HANG_SECONDS)
    # Nothing after abort() returned but the result it came during.
    assert 3 <= len(results) <= aborted_at[0] + 1
    pipeline.close()


def test_a_pipeline_runs_once(small_video: Path, tiny_model: Path) -> None:
    pipeline = Pipeline([str(small_video)], tiny_model, "null")
    assert len(list(pipeline)) == 40
    with pytest.raises(RuntimeError, match="runs once"):
        list(pipeline)
    pipeline.close()
    with pytest.raises(RuntimeError, match="closed"):
        list(pipeline)
    pipeline.close()  # twice is fine


def test_live_sources_drop_only_their_own_stale_frames(tiny_model: Path) -> None:
    pipeline = Pipeline(
        ["synthetic:64x48:30"],
        tiny_model,
        "null",
        BackendOptions(settings={"delay_ms": "5"}),
        source_options=SourceOptions(mode="live"),
        options=PipelineOptions(warmup=0),
    )
    results = list(pipeline)
    pipeline.close()
    summary = pipeline.summary()
    assert summary.accounted
    assert len(results) + sum(summary.dropped.values()) == 30


def test_model_file_picks_its_runtime(small_video: Path, tiny_model: Path) -> None:
    pipeline = Pipeline([str(small_video)], tiny_model)  # no backend named: .onnx → onnxruntime
    assert pipeline.task.backend.info.runtime == "onnxruntime"
    pipeline.close()
    with pytest.raises(Exception, match=r"backend 'openvino' cannot read x\.pt: .*torch"):
        load_backend("openvino", tiny_model.with_name("x.pt"))


class CountedSource(FrameSource):
    closed = 0

    def close(self) -> None:
        CountedSource.closed += 1
        super().close()


@pytest.mark.parametrize(
    ("model", "backend", "error"),
    [
        ("missing.onnx", "", "model file not found"),  # the detector cannot load
        ("tiny", "onnxruntime", "warmup"),  # a task that fails at warm-up
    ],
)
def test_a_pipeline_that_cannot_start_lets_go_of_its_sources(
    tmp_path: Path,
    tiny_model: Path,
    model: str,
    backend: str,
    error: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue #35: a model that cannot load (or a task that fails to warm up) no longer leaves
    the sources it was opened for open: each is closed once, and the error reaches the caller."""
    from visionrt.errors import ModelLoadError
    from visionrt.tasks.detect import DetectTask

    def fail(*_: object) -> None:
        raise RuntimeError("warmup failed")

    if error == "warmup":
        monkeypatch.setattr(DetectTask, "warm_up", fail)
    CountedSource.closed = 0
    sources = [CountedSource(grey_frames(3)), CountedSource(grey_frames(3))]
    path = tiny_model if model == "tiny" else tmp_path / model
    with pytest.raises((ModelLoadError, RuntimeError), match=error):
        Pipeline(sources, path, backend, plan=False)  # type: ignore[arg-type]
    assert CountedSource.closed == 2
