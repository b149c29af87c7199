"""The sink contract over JsonlSink and VideoSink: complete files only when finalized, partial
files with what was written otherwise, nothing for nothing, all-or-nothing finalization."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest

from visionrt.errors import SinkError
from visionrt.sinks import JsonlSink, NullSink, Sink, VideoSink, partial_path
from visionrt.types import Detections, Frame, FrameResult


def _results(count: int) -> list[FrameResult]:
    return [
        FrameResult(
            Frame(
                source_id=0,
                index=i,
                image=np.full((48, 64, 3), 10 * i, np.uint8),
                timestamp=i / 25,
                captured_at=time.perf_counter(),
                source_name="s",
            ),
            Detections.empty(),
            {},
        )
        for i in range(count)
    ]


def _sink(kind: str, folder: Path) -> Sink:
    if kind == "jsonl":
        return JsonlSink(folder / "out.jsonl")
    return VideoSink(folder / "out.mp4", fps=25)


def _count(path: Path) -> int:
    if path.suffix == ".jsonl":
        return len(path.read_text().splitlines())
    import av

    with av.open(str(path)) as container:
        return sum(1 for _ in container.decode(video=0))


KINDS = ["jsonl", "video"]


@pytest.mark.parametrize("kind", KINDS)
def test_complete_run_is_finalized(kind: str, tmp_path: Path) -> None:
    sink = _sink(kind, tmp_path)
    for result in _results(7):
        sink.write(result)
    (final,) = sink.close(complete=True)
    assert sink.close() == []  # twice is fine
    assert final.exists()
    assert not partial_path(final).exists()
    assert _count(final) == 7


@pytest.mark.parametrize("kind", KINDS)
def test_incomplete_run_stays_partial_with_what_was_written(kind: str, tmp_path: Path) -> None:
    sink = _sink(kind, tmp_path)
    for result in _results(5):
        sink.write(result)
    (partial,) = sink.close(complete=False)
    assert ".partial" in partial.name
    assert _count(partial) == 5
    assert [p.name for p in tmp_path.iterdir()] == [partial.name]


@pytest.mark.parametrize("kind", KINDS)
def test_nothing_written_leaves_nothing(kind: str, tmp_path: Path) -> None:
    sink = _sink(kind, tmp_path)
    assert sink.close(complete=False) == []
    assert list(tmp_path.iterdir()) == []


def test_jsonl_lines_reach_the_file_as_they_are_written(tmp_path: Path) -> None:
    sink = JsonlSink(tmp_path / "out.jsonl")
    for result in _results(3):
        sink.write(result)
    # Before close: a killed process would leave these three lines.
    lines = partial_path(tmp_path / "out.jsonl").read_text().splitlines()
    assert [json.loads(line)["frame"] for line in lines] == [0, 1, 2]
    sink.close()


def test_a_failed_final_flush_leaves_the_file_partial(tmp_path: Path) -> None:
    class FullDisk:
        def write(self, text: str) -> int:
            return len(text)

        def flush(self) -> None:
            pass

        def close(self) -> None:
            raise OSError(28, "No space left on device")

    sink = JsonlSink(tmp_path / "out.jsonl")
    sink.write(_results(1)[0])
    sink._file.close()  # type: ignore[union-attr]
    sink._file = FullDisk()  # type: ignore[assignment]
    with pytest.raises(SinkError, match=r"cannot finalize .*out\.jsonl: No space left on device"):
        sink.close(complete=True)
    assert not (tmp_path / "out.jsonl").exists()
    assert partial_path(tmp_path / "out.jsonl").exists()


def test_null_sink_counts_and_writes_nothing(tmp_path: Path) -> None:
    sink = NullSink()
    for result in _results(4):
        sink.write(result)
    assert (sink.frames, sink.detections) == (4, 0)
    assert sink.close() == []
