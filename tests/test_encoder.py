"""A video's encoding on its own thread (sinks.encoder): what is put comes back when decoded, in
order; an error there reaches the sink thread as one SinkError, even one waiting to hand over a
picture; the file then keeps its .partial name."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from visionrt.errors import SinkError
from visionrt.sinks import VideoSink
from visionrt.sinks import encoder as encoder_module
from visionrt.sinks.encoder import AHEAD, Encoder
from visionrt.types import Detections, Frame, FrameResult


def _pictures(count: int) -> list[np.ndarray]:
    """Smooth 96×128 pictures, each a different shade (a lossy codec keeps them apart)."""
    rows, cols = np.mgrid[0:96, 0:128]
    return [
        np.stack([(rows + 8 * k) % 256, (cols + 4 * k) % 256, (rows + cols) // 2], -1).astype(
            np.uint8
        )
        for k in range(count)
    ]


def _result(index: int, picture: np.ndarray) -> FrameResult:
    frame = Frame(source_id=0, index=index, pixels=picture, timestamp=index / 10, captured_at=0.0)
    return FrameResult(frame, Detections.empty(), {}, ("person",))


def test_the_video_decodes_back_to_what_was_written(tmp_path: Path) -> None:
    import av

    pictures = _pictures(12)
    sink = VideoSink(tmp_path / "out.mp4", fps=10)
    for index, picture in enumerate(pictures):
        sink.write(_result(index, picture))
    assert sink.close() == [tmp_path / "out.mp4"]
    with av.open(str(tmp_path / "out.mp4")) as video:
        decoded = [f.to_ndarray(format="bgr24") for f in video.decode(video=0)]
    assert len(decoded) == len(pictures)
    for got, sent in zip(decoded, pictures, strict=True):  # in order, and the colours kept
        difference = got.astype(int) - sent.astype(int)
        assert np.abs(difference).mean() < 4, np.abs(difference).mean()
        assert abs(difference.mean()) < 2  # no shift of level (a range or matrix mix-up)


class _FailingStream:
    """A PyAV stream stand-in whose encoder fails (a full disk) once `fail` is set; `entered`
    is set when it holds a picture."""

    def __init__(self) -> None:
        self.entered, self.fail = threading.Event(), threading.Event()

    def encode(self, frame: Any) -> list[Any]:
        self.entered.set()
        self.fail.wait()
        raise OSError("No space left on device")


class _Container:
    def mux(self, packets: Any) -> None:
        pass


def test_an_encoding_error_reaches_a_waiting_hand_over_and_the_finish() -> None:
    stream = _FailingStream()
    encoder = Encoder(_Container(), stream, "out.partial.mp4")
    picture = _pictures(1)[0]
    encoder.put(picture)
    assert stream.entered.wait(10)  # the encoder holds the first picture
    for _ in range(AHEAD):
        encoder.put(picture)  # the queue is full now
    raised: list[BaseException] = []

    def hand_over() -> None:
        try:
            encoder.put(picture)  # waits: no room
        except BaseException as err:
            raised.append(err)

    waiting = threading.Thread(target=hand_over)
    waiting.start()
    stream.fail.set()
    waiting.join(10)
    assert not waiting.is_alive()
    assert len(raised) == 1
    assert isinstance(raised[0], SinkError)
    assert "No space left on device" in str(raised[0])
    with pytest.raises(SinkError, match=r"out\.partial\.mp4: No space left"):
        encoder.finish()


def test_a_failed_encoding_leaves_the_file_partial(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    class FullDisk:
        """The real stream, whose third picture finds the disk full."""

        def __init__(self, stream: Any) -> None:
            self.stream, self.calls = stream, 0

        def encode(self, frame: Any) -> Any:
            self.calls += 1
            if self.calls == 3:
                raise OSError("No space left on device")
            return self.stream.encode(frame)

    real = encoder_module.Encoder

    def failing(container: Any, stream: Any, name: str) -> Encoder:
        return real(container, FullDisk(stream), name)

    monkeypatch.setattr("visionrt.sinks.video.Encoder", failing)
    sink = VideoSink(tmp_path / "out.mp4", fps=10)
    for index, picture in enumerate(_pictures(3)):
        sink.write(_result(index, picture))  # handed over; the third fails on its thread
    with pytest.raises(SinkError, match="No space left"):
        sink.close()
    assert not (tmp_path / "out.mp4").exists()  # nothing looks complete
