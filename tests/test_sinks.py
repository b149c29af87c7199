"""The sink contract over JsonlSink and VideoSink: complete files only when finalized, partial
files with what was written otherwise, nothing for nothing, all-or-nothing finalization."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import HANG_SECONDS, until

from visionrt.errors import SinkError
from visionrt.sinks import JsonlSink, NullSink, Sink, VideoSink, partial_path
from visionrt.telemetry import Telemetry
from visionrt.telemetry.report import TelemetryWriter
from visionrt.types import Detections, Frame, FrameResult


def _results(count: int) -> list[FrameResult]:
    return [
        FrameResult(
            Frame(
                source_id=0,
                index=i,
                pixels=np.full((48, 64, 3), 10 * i, np.uint8),
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


def _suffix(kind: str) -> str:
    return "jsonl" if kind == "jsonl" else "mp4"


class _Proxy:
    """An object that answers as `target` except for the attributes given."""

    def __init__(self, target: Any, **overrides: Any) -> None:
        self._target, self._overrides = target, overrides

    def __getattr__(self, name: str) -> Any:
        return self._overrides.get(name) or getattr(self._target, name)


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


@pytest.mark.parametrize("kind", KINDS)
def test_close_twice_after_an_incomplete_run_is_fine(kind: str, tmp_path: Path) -> None:
    sink = _sink(kind, tmp_path)
    for result in _results(2):
        sink.write(result)
    assert len(sink.close(complete=False)) == 1
    assert sink.close(complete=True) == []  # the first close decided: still partial
    assert [p.name for p in tmp_path.iterdir()] == [f"out.partial.{_suffix(kind)}"]


@pytest.mark.parametrize("kind", KINDS)
def test_a_complete_run_with_nothing_written_leaves_nothing(kind: str, tmp_path: Path) -> None:
    sink = _sink(kind, tmp_path)
    assert sink.close(complete=True) == []
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("kind", KINDS)
def test_write_after_close_is_an_error(kind: str, tmp_path: Path) -> None:
    sink = _sink(kind, tmp_path)
    sink.close()
    with pytest.raises(SinkError, match="write after close"):
        sink.write(_results(1)[0])


@pytest.mark.parametrize("kind", KINDS)
def test_an_unwritable_place_fails_at_construction(kind: str, tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(SinkError, match=r"file is a file, not a folder"):
        _sink(kind, tmp_path / "file")
    (tmp_path / "dir" / f"out.{_suffix(kind)}").mkdir(parents=True)
    with pytest.raises(SinkError, match="it is a folder"):
        _sink(kind, tmp_path / "dir")


@pytest.mark.parametrize("kind", KINDS)
def test_a_final_name_taken_by_a_folder_keeps_the_file_partial(kind: str, tmp_path: Path) -> None:
    sink = _sink(kind, tmp_path)
    for result in _results(3):
        sink.write(result)
    final = tmp_path / f"out.{_suffix(kind)}"
    final.mkdir()  # after the check at construction: the rename at close fails
    with pytest.raises(SinkError, match=rf"cannot finalize {final}"):
        sink.close(complete=True)
    assert _count(partial_path(final)) == 3


def test_jsonl_write_errors_name_the_file(tmp_path: Path) -> None:
    sink = JsonlSink(tmp_path / "out.jsonl")
    partial_path(tmp_path / "out.jsonl").symlink_to("/dev/full")  # every write: ENOSPC
    with pytest.raises(SinkError, match=r"cannot write .*out\.partial\.jsonl: No space left"):
        sink.write(_results(1)[0])
    with pytest.raises(SinkError, match="No space left"):
        sink.close(complete=True)
    assert not (tmp_path / "out.jsonl").exists()


def test_a_video_whose_index_cannot_be_written_stays_partial(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sink = VideoSink(tmp_path / "out.mp4", fps=25)
    for result in _results(3):
        sink.write(result)
    container = sink._container
    real_close = container.close

    def close_on_a_full_disk() -> None:
        real_close()
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(sink, "_container", _Proxy(container, close=close_on_a_full_disk))
    with pytest.raises(SinkError, match=r"cannot finalize .*out\.mp4: .*No space left on device"):
        sink.close(complete=True)
    assert not (tmp_path / "out.mp4").exists()
    assert partial_path(tmp_path / "out.mp4").exists()
    assert sink.close() == []


@pytest.mark.parametrize(
    ("codec", "preset"),
    [("libx264", "nope"), ("mjpeg", "veryfast")],  # mjpeg takes no limited-range yuv420p
)
def test_an_encoder_that_cannot_start_fails_at_construction(
    tmp_path: Path, codec: str, preset: str
) -> None:
    """Before any frame is processed: at the first frame, a run's other outputs (its JSONL)
    had nothing yet, and the run left only summary.json (issue #47)."""
    with pytest.raises(SinkError, match=f"cannot encode .*out.mp4 with {codec}"):
        VideoSink(tmp_path / "out.mp4", fps=25, codec=codec, preset=preset)
    assert list(tmp_path.iterdir()) == []


def test_a_frame_too_small_for_a_video_is_named_and_leaves_no_file(tmp_path: Path) -> None:
    sink = VideoSink(tmp_path / "out.mp4", fps=25)
    (result,) = _results(1)
    tiny = replace(result, frame=replace(result.frame, pixels=result.frame.pixels[:1, :1]))
    with pytest.raises(SinkError, match=r"its frames are 1×1 pixels, and a video needs at least"):
        sink.write(tiny)
    assert sink.close(complete=False) == []
    assert list(tmp_path.iterdir()) == []


def test_an_unknown_encoder_fails_at_construction(tmp_path: Path) -> None:
    with pytest.raises(SinkError, match="unknown encoder 'nope'"):
        VideoSink(tmp_path / "out.mp4", codec="nope")
    assert list(tmp_path.iterdir()) == []


def test_jsonl_lines_survive_sigkill(tmp_path: Path) -> None:
    # A child writes three lines and is killed before it closes the sink.
    script = (
        "import os, signal, sys; sys.path.insert(0, sys.argv[2]);"
        "from test_sinks import _results; from visionrt.sinks import JsonlSink;"
        "sink = JsonlSink(sys.argv[1]);"
        "[sink.write(r) for r in _results(3)];"
        "os.kill(os.getpid(), signal.SIGKILL)"
    )
    final = tmp_path / "out.jsonl"
    proc = subprocess.run(
        [sys.executable, "-c", script, str(final), str(Path(__file__).parent)],
        timeout=HANG_SECONDS,
    )
    assert proc.returncode == -signal.SIGKILL
    lines = partial_path(final).read_text().splitlines()
    assert [json.loads(line)["frame"] for line in lines] == [0, 1, 2]


# -- the telemetry file, written by a thread of its own ------------------------------------------
def test_telemetry_writes_fail_as_one_sink_error_not_a_thread_trace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    traces: list[object] = []
    monkeypatch.setattr(threading, "excepthook", traces.append)
    telemetry = Telemetry()
    telemetry.start()
    writer = TelemetryWriter(telemetry, "/dev/full", interval=0.01).start()
    time.sleep(0.05)
    with pytest.raises(SinkError, match="cannot write telemetry /dev/full: No space left"):
        writer.close()
    writer.close()  # reported once; twice is fine
    assert traces == []


@pytest.mark.parametrize("name", ["file/t.jsonl", "folder"])
def test_telemetry_path_problems_fail_before_the_run(tmp_path: Path, name: str) -> None:
    (tmp_path / "file").write_text("x")
    (tmp_path / "folder").mkdir()
    with pytest.raises(SinkError, match="cannot write telemetry"):
        TelemetryWriter(Telemetry(), tmp_path / name).start()


def test_telemetry_lines_carry_rates_latency_and_queues(tmp_path: Path) -> None:
    telemetry = Telemetry()
    telemetry.register_gauge("decoded", lambda: 2)
    telemetry.register_gauge("broken", lambda: 1 / 0)  # a gauge that fails reads as null
    telemetry.start()
    path = tmp_path / "t.jsonl"
    for _ in range(10):
        telemetry.frame_out(0.004)
    with TelemetryWriter(telemetry, path, interval=0.05):
        # A line of its own, then the last one at the end: none since.
        until(lambda: path.read_text().count("\n") >= 1, "wrote a line")
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines[0]["latency_ms"]["p50"] == pytest.approx(4.0)
    assert lines[0]["fps"] > 0
    assert lines[-1]["latency_ms"] == {"p50": 0.0, "p95": 0.0, "p99": 0.0}  # none since
    assert lines[-1]["queues"] == {"decoded": 2, "broken": None}
    assert [line["t"] for line in lines] == sorted(line["t"] for line in lines)


def test_overlay_shows_track_ids_distances_and_predicted_boxes() -> None:
    from visionrt.sinks.video import annotate

    image = np.zeros((200, 200, 3), np.uint8)
    boxes = Detections(
        np.array([[50, 80, 150, 180]], np.float32),
        np.array([0.9], np.float32),
        np.array([0], np.int32),
    )
    names = ("person",)

    def label_width(canvas: np.ndarray) -> int:  # the filled label sits above the box
        return int(np.count_nonzero(canvas[60:79].any(axis=2).any(axis=0)))

    def outline(canvas: np.ndarray) -> int:
        return int(np.count_nonzero(canvas[100:170].any(axis=2)))

    plain = annotate(image, boxes, names)
    ids, seen = np.array([7], np.int64), np.array([False])
    tracked = annotate(image, boxes, names, ids, seen, np.array([3.25], np.float32))
    assert label_width(tracked) > label_width(plain) + 20  # "#7 … 3.25" is longer
    no_distance = annotate(image, boxes, names, ids, seen, np.array([np.nan], np.float32))
    assert label_width(tracked) > label_width(no_distance)  # a NaN distance is left out
    predicted = annotate(image, boxes, names, ids, np.array([True]))
    assert outline(predicted) == 2 * 70 < outline(no_distance)  # 1 px sides, thin
    other = annotate(image, boxes, names, np.array([8], np.int64), seen)
    assert not np.array_equal(other[120, 50], no_distance[120, 50])  # colour follows the id


def test_joined_videos_play_each_parts_frames_in_turn_with_their_times(tmp_path: Path) -> None:
    """Three parts (a split file's ranges, encoded alike) as one MP4: every frame, the parts'
    pictures as they are (packets copied), times running on across the joins."""
    import av

    from visionrt.sinks.video import join_videos

    results = _results(25)
    parts = []
    for i, (start, stop) in enumerate([(0, 7), (7, 19), (19, 25)]):
        sink = VideoSink(tmp_path / f"part{i}.mp4", fps=25)
        for result in results[start:stop]:
            sink.write(result)
        parts += sink.close()

    def pictures(path: Path) -> list[tuple[float, bytes]]:
        with av.open(str(path)) as container:
            return [
                (round(float(f.time), 3), f.to_ndarray(format="bgr24").tobytes())
                for f in container.decode(video=0)
            ]

    joined = join_videos(parts, tmp_path / "joined.mp4")
    got = pictures(joined)
    assert [t for t, _ in got] == [round(i / 25, 3) for i in range(25)]
    assert [p for _, p in got] == [p for part in parts for _, p in pictures(part)]
    assert not partial_path(joined).exists()
    with pytest.raises(SinkError, match="cannot join 2 parts"):
        join_videos([parts[0], tmp_path / "gone.mp4"], tmp_path / "broken.mp4")
    assert not list(tmp_path.glob("broken*"))  # nothing that looks like an output


def test_labels_that_would_cover_each_other_are_stacked_and_distances_say_their_unit() -> None:
    """seed-depth.jpg's labels overlapped in a crowd, and its distances had no unit (#47)."""
    from visionrt.sinks.video import _PALETTE, annotate

    image = np.zeros((200, 200, 3), np.uint8)
    boxes = Detections(
        np.array([[50, 80, 150, 180], [50, 80, 150, 180]], np.float32),
        np.array([0.9, 0.8], np.float32),
        np.array([0, 0], np.int32),
    )
    ids, seen = np.array([7, 8], np.int64), np.array([False, False])
    canvas = annotate(image, boxes, ("person",), ids, seen)
    first, second = (np.array(_PALETTE[i % len(_PALETTE)], np.uint8) for i in (7, 8))
    for colour in (first, second):  # each label's fill still shows
        assert (canvas[:, 52:148] == colour).all(axis=2).sum() > 100

    def width(metric: bool) -> int:
        one = Detections(boxes.xyxy[:1], boxes.confidence[:1], boxes.class_id[:1])
        wide = np.zeros((200, 400, 3), np.uint8)  # room for the whole label
        drawn = annotate(wide, one, ("person",), ids[:1], seen[:1],
                         np.array([3.25], np.float32), metric=metric)  # fmt: skip
        return int(np.count_nonzero(drawn[60:79].any(axis=2).any(axis=0)))

    assert width(metric=False) > width(metric=True)  # " rel 3.25" against " 3.25 m"
