"""The source contract, over every kind usable here; `open_source` dispatch; damaged files;
streams that stop, stall or give up."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest
from conftest import HANG_SECONDS, finishes, until, write_video

from visionrt.errors import ConfigError, SourceError, SourceNotFoundError
from visionrt.sources import Source, SourceOptions, open_source
from visionrt.sources import video as video_module
from visionrt.sources.images import ImageSource
from visionrt.sources.synthetic import SyntheticSource
from visionrt.sources.video import VideoSource
from visionrt.types import Frame

REPORT_KEYS = {"name", "live", "frames", "declared", "lost", "corrupt", "missed", "reconnects",
               "restarts", "gap_seconds", "ended_early", "warnings"}  # fmt: skip
FRAMES = 30


def _make(kind: str, folder: Path, options: SourceOptions) -> Source:
    """A source of FRAMES frames (one for `image`) of the given kind."""
    if kind == "video":
        return open_source(str(write_video(folder / "v.mp4", frames=FRAMES)), 0, options)
    if kind in ("folder", "image"):
        for i in range(FRAMES if kind == "folder" else 1):
            cv2.imwrite(str(folder / f"f{i:02d}.png"), np.full((48, 64, 3), i * 8, np.uint8))
        return open_source(str(folder if kind == "folder" else folder / "f00.png"), 0, options)
    if kind == "synthetic":
        return open_source(f"synthetic:64x48:{FRAMES}", 0, options)
    video = write_video(folder / "s.mp4", frames=FRAMES)
    return VideoSource(str(video), 0, options, kind="stream")  # a file read as a stream


KINDS = ["video", "folder", "image", "synthetic", "stream"]


@pytest.mark.parametrize("kind", KINDS)
def test_source_contract(kind: str, tmp_path: Path) -> None:
    source = _make(kind, tmp_path, SourceOptions(mode="file"))
    frames = list(source.frames())
    source.close()
    source.close()  # twice is fine
    assert len(frames) == (1 if kind == "image" else FRAMES)
    assert [f.index for f in frames] == list(range(len(frames)))
    for frame in frames:
        assert isinstance(frame, Frame)
        assert frame.image.dtype == np.uint8
        assert frame.image.ndim == 3
        assert frame.image.shape[2] == 3
        assert frame.image.flags["C_CONTIGUOUS"]
    stamps = [f.timestamp for f in frames]
    assert stamps == sorted(stamps)
    report = source.report()
    assert set(report) == REPORT_KEYS
    assert report["frames"] == len(frames)
    assert (report["lost"], report["corrupt"], report["reconnects"]) == (0, 0, 0)
    assert report["ended_early"] == ""
    assert report["warnings"] == []


def test_video_frames_are_bgr(tmp_path: Path) -> None:
    frame = next(_make("video", tmp_path, SourceOptions()).frames())
    # conftest's square is BGR (40, 200, 240) on grey 30; lossy, so roughly.
    assert np.allclose(frame.image[18, 8], (40, 200, 240), atol=30)
    assert np.allclose(frame.image[60, 60], (30, 30, 30), atol=10)


@pytest.mark.parametrize("kind", ["video", "folder", "synthetic", "stream"])
def test_max_frames_is_honoured(kind: str, tmp_path: Path) -> None:
    source = _make(kind, tmp_path, SourceOptions(mode="file", max_frames=5))
    assert [f.index for f in source.frames()] == [0, 1, 2, 3, 4]
    report = source.report()
    assert (report["frames"], report["lost"], report["warnings"]) == (5, 0, [])  # limited, not lost
    source.close()


def test_a_video_started_later_numbers_its_frames_as_from_the_start(tmp_path: Path) -> None:
    """`start_frame` (a cluster's retry resuming): frames 7 on, numbered and decoded as a run
    from frame 0 sees them; with max_frames the end is where it was."""
    whole = list(_make("video", tmp_path, SourceOptions()).frames())
    later = _make("video", tmp_path, SourceOptions(start_frame=7, max_frames=20))
    frames = list(later.frames())
    assert [f.index for f in frames] == list(range(7, 20))
    for frame in frames:
        assert np.array_equal(frame.image, whole[frame.index].image)
    assert later.report()["frames"] == 20
    with pytest.raises(ConfigError, match="start_frame: expected >= 0"):
        SourceOptions(start_frame=-1)


@pytest.mark.parametrize("kind", ["video", "folder", "synthetic", "stream"])
def test_stop_from_another_thread_ends_promptly(kind: str, tmp_path: Path) -> None:
    source = _make(kind, tmp_path, SourceOptions(mode="live"))
    seen = 0
    for seen, _ in enumerate(source.frames(), start=1):
        if seen == 2:
            stopper = threading.Thread(target=source.stop)
            stopper.start()
            stopper.join()
    assert seen <= 3  # of 30: no frame read after the one in hand
    report = source.report()
    assert report["reconnects"] == 0  # a clean stop is not a disconnect
    assert (report["ended_early"], report["warnings"]) == ("", [])
    source.close()


# -- which reader serves a string -------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "cls", "kind"),
    [
        ("synthetic:64x48:3", SyntheticSource, None),
        ("0", VideoSource, "camera"),
        ("/dev/video2", VideoSource, "camera"),
        ("rtsp://127.0.0.1:1/x", VideoSource, "stream"),
        ("http://127.0.0.1:1/x.mjpg", VideoSource, "stream"),
        ("FOLDER", ImageSource, None),
        ("FOLDER/*.png", ImageSource, None),
        ("FOLDER/a.png", ImageSource, None),
        ("VIDEO", VideoSource, "file"),
    ],
)
def test_open_source_dispatch(
    spec: str, cls: type, kind: str | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(VideoSource, "_open", lambda self: None)  # no device or server here
    cv2.imwrite(str(tmp_path / "a.png"), np.zeros((8, 8, 3), np.uint8))
    (tmp_path / "v.mp4").write_bytes(b"")
    spec = spec.replace("FOLDER", str(tmp_path)).replace("VIDEO", str(tmp_path / "v.mp4"))
    source = open_source(spec)
    assert type(source) is cls
    if kind:
        assert source.kind == kind  # type: ignore[attr-defined]
        assert source.live == (kind != "file")
    if spec == "/dev/video2" or spec == "0":
        assert source.name == ("/dev/video0" if spec == "0" else spec)


@pytest.mark.parametrize("where", ["missing.mp4", "empty-folder", "empty-folder/*.png"])
def test_nothing_there_is_not_found(where: str, tmp_path: Path) -> None:
    (tmp_path / "empty-folder").mkdir()
    (tmp_path / "empty-folder" / "notes.txt").write_text("not an image")
    with pytest.raises(SourceNotFoundError, match=r"empty-folder|missing\.mp4"):
        open_source(str(tmp_path / where))


@pytest.mark.parametrize(
    "spec",
    ["synthetic:0x0:3", "synthetic:100000x100000:1", "synthetic:64x16385:1",
     "synthetic:64x48:-1", "synthetic:-64x48:1", "synthetic:64:3", "synthetic:64x48"],
)  # fmt: skip
def test_bad_synthetic_specs(spec: str) -> None:
    with pytest.raises(ConfigError, match=f"synthetic source '{spec}'"):
        open_source(spec)


def test_synthetic_edge_sizes() -> None:
    assert list(open_source("synthetic:1x1:0").frames()) == []
    (frame,) = open_source("synthetic:3x2:1").frames()
    assert frame.image.shape == (2, 3, 3)


# -- damaged files ------------------------------------------------------------------------------


def _scramble(path: Path, start: int, end: int, seed: int = 1) -> None:
    """Random bytes over [start, end) of the file, as a bad disk or transfer leaves it."""
    data = bytearray(path.read_bytes())
    data[start:end] = np.random.default_rng(seed).integers(0, 256, end - start, np.uint8).tobytes()
    path.write_bytes(bytes(data))


def test_truncated_file_reports_what_was_lost(tmp_path: Path) -> None:
    video = write_video(tmp_path / "cut.mkv", frames=60, width=160, height=120)
    video.write_bytes(video.read_bytes()[: video.stat().st_size * 3 // 10])
    source = open_source(str(video))
    frames = list(source.frames())
    report = source.report()
    assert 0 < len(frames) < 60
    assert [f.index for f in frames] == list(range(len(frames)))
    assert report["declared"] == 60  # Matroska declares a duration; 60 is what it implies
    assert report["lost"] == 60 - len(frames)
    assert report["ended_early"] == ""
    assert report["warnings"] == [
        f"{video}: {len(frames)} of about 60 declared frames decoded, {60 - len(frames)} lost"
        " (truncated or corrupt file?)"
    ]


def test_truncated_mp4_without_its_index_fails_at_open(tmp_path: Path) -> None:
    video = write_video(tmp_path / "cut.mp4", frames=30)
    video.write_bytes(video.read_bytes()[:2000])  # the moov index is written last
    with pytest.raises(SourceError, match=r"cut.mp4.*truncated or corrupt file\?\)$"):
        open_source(str(video))


@pytest.mark.parametrize("codec", ["mpeg4", "h264"])
def test_garbage_in_the_middle_is_counted(codec: str, tmp_path: Path) -> None:
    video = write_video(tmp_path / f"{codec}.mp4", frames=60, codec=codec)
    size = video.stat().st_size
    _scramble(video, size // 3, size // 3 + size // 4)
    source = open_source(str(video))
    frames = list(source.frames())
    report = source.report()
    assert 0 < len(frames) < 60
    assert report["corrupt"] > 0  # packets the decoder rejected, skipped and counted
    assert report["lost"] == 60 - len(frames)
    assert report["ended_early"] == ""  # a file is read to its end, however many are bad
    assert report["warnings"] == [
        f"{video}: {len(frames)} of 60 declared frames decoded, {60 - len(frames)} lost"
        " (truncated or corrupt file?)"
    ]


def test_garbage_in_an_avi_is_counted_as_lost(tmp_path: Path) -> None:
    # FFmpeg's AVI demuxer drops damaged chunks without an error: only the count against the
    # declared frames shows them.
    video = write_video(tmp_path / "damaged.avi", frames=60, width=160, height=120)
    size = video.stat().st_size
    _scramble(video, size // 3, size // 3 + size // 5)
    source = open_source(str(video))
    frames = list(source.frames())
    assert 0 < len(frames) < 60
    assert source.report()["lost"] == 60 - len(frames)


def test_a_video_with_nothing_decodable_is_an_error(tmp_path: Path) -> None:
    video = write_video(tmp_path / "junk.mp4", frames=20)
    data = video.read_bytes()
    _scramble(video, data.index(b"mdat") + 4, data.index(b"moov") - 4)  # index intact
    source = open_source(str(video))
    with pytest.raises(SourceError, match=r"junk.mp4': no decodable frame \(0 of 20 declared\)"):
        list(source.frames())
    report = source.report()
    assert (report["frames"], report["lost"]) == (0, 20)
    assert report["corrupt"] > 0


@pytest.mark.parametrize("single", [False, True])
def test_images_with_nothing_decodable_are_an_error(single: bool, tmp_path: Path) -> None:
    for i in range(3):
        (tmp_path / f"{i}.png").write_bytes(b"not a png")
    source = open_source(str(tmp_path / "0.png" if single else tmp_path))
    declared = 1 if single else 3
    with pytest.raises(SourceError, match=rf"no decodable frame \(0 of {declared} declared\)"):
        list(source.frames())


def test_unreadable_images_are_skipped_and_counted(tmp_path: Path) -> None:
    for i in range(6):
        cv2.imwrite(str(tmp_path / f"{i}.png"), np.full((8, 8, 3), i, np.uint8))
    (tmp_path / "2.png").write_bytes(b"broken")
    (tmp_path / "4.png").write_bytes(b"")
    source = open_source(str(tmp_path))
    frames = list(source.frames())
    assert [f.index for f in frames] == [0, 1, 2, 3]
    assert [int(f.image[0, 0, 0]) for f in frames] == [0, 1, 3, 5]
    report = source.report()
    assert (report["declared"], report["corrupt"], report["lost"]) == (6, 2, 2)
    assert report["warnings"] == [f"{tmp_path}: 4 of 6 declared frames decoded, 2 lost"
                                  " (unreadable images)"]  # fmt: skip


# -- live streams: stop, stall, give up --------------------------------------------------------


def _endless(tmp_path: Path) -> Path:
    """40 frames of raw H.264, which declares neither a frame count nor a duration (as a camera's
    stream): its end is a disconnect, where a video that declares its end ends there."""
    return write_video(tmp_path / "stream.h264", frames=40, codec="libx264")


def test_a_stream_that_gives_up_says_why(tmp_path: Path) -> None:
    # A stream that declares no end, then removed: its end is a disconnect, and every
    # reconnect fails until the source gives up.
    stream = _endless(tmp_path)
    options = SourceOptions(mode="live", reconnect_attempts=2, reconnect_backoff=0.01)
    source = VideoSource(str(stream), 0, options, kind="stream")
    stream.unlink()
    assert len(list(source.frames())) == 40
    report = source.report()
    assert report["reconnects"] == 2
    assert report["ended_early"].startswith(f"{stream}: gave up after 2 reconnects (cannot open")
    assert "end of stream" not in report["ended_early"]


def test_stop_during_reconnect_backoff_is_not_a_reconnect(tmp_path: Path) -> None:
    stream = _endless(tmp_path)
    # A backoff longer than the guard: only stop() can end it in time.
    options = SourceOptions(mode="live", reconnect_backoff=2 * HANG_SECONDS)
    source = VideoSource(str(stream), 0, options, kind="stream")
    stream.unlink()
    frames = source.frames()
    assert len([next(frames) for _ in range(40)]) == 40

    def stop_in_the_backoff() -> None:
        until(lambda: any(e.startswith("reconnect 1 after") for e in source.stats.events),
              "began its backoff")  # fmt: skip
        source.stop()

    threading.Thread(target=stop_in_the_backoff, daemon=True).start()
    assert finishes(lambda: next(frames, None), "the backoff") is None
    assert source.report()["reconnects"] == 0
    assert source.report()["ended_early"] == ""


SERVED = 200  # frames, 8 s at 25 FPS


class _StallingServer:
    """An HTTP server for a video: each connection follows the next script step, `half` (send
    most of the file, then hang), `cut` (send half of it, then close: a short read), `full`
    (send it all, then close) or `hang` (send nothing)."""

    def __init__(self, data: bytes, script: list[str]) -> None:
        self.data, self.script, self.accepted = data, script, 0
        self.release = threading.Event()
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/video.mkv"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        for step in self.script:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            threading.Thread(target=self._answer, args=(conn, step), daemon=True).start()

    def _answer(self, conn: socket.socket, step: str) -> None:
        with conn:
            conn.recv(65536)
            if step != "hang":
                head = "HTTP/1.1 200 OK\r\nContent-Type: video/x-matroska\r\n"
                conn.sendall(f"{head}Content-Length: {len(self.data)}\r\n\r\n".encode())
                sent = {"full": len(self.data), "cut": len(self.data) // 2}
                conn.sendall(self.data[: sent.get(step, len(self.data) * 9 // 10)])
            if step not in ("full", "cut"):
                self.release.wait()  # hangs until the test ends

    def close(self) -> None:
        self.release.set()
        self.sock.close()


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[type[_StallingServer]]:
    # Longer than FFmpeg's analyzeduration (5 s), so probing at open never waits for data.
    data = write_video(tmp_path / "served.mkv", frames=SERVED).read_bytes()
    servers: list[_StallingServer] = []

    def start(script: list[str]) -> _StallingServer:
        servers.append(_StallingServer(data, script))
        return servers[-1]

    yield start  # type: ignore[misc]
    for server in servers:
        server.close()


def _read_in_thread(source: Source) -> tuple[list[Frame], threading.Thread]:
    """The source read on a thread of its own into a list; the thread holds the list as
    `frames` (for `polls`)."""
    frames: list[Frame] = []
    reader = threading.Thread(target=lambda: frames.extend(source.frames()), daemon=True)
    reader.frames = frames  # type: ignore[attr-defined]
    reader.start()
    return frames, reader


@pytest.fixture
def polls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Each time FFmpeg's interrupt callback reads the clock (about every 100 ms while a read or
    an open waits for the network, once per attempt while data flows), the frames delivered so
    far by the reader of `_read_in_thread`: many polls at one count mean it is blocked."""
    seen: list[int] = []
    import av.container.core

    from visionrt.sources.stop_clock import STOP_CLOCK, install_stop_clock

    install_stop_clock()
    stop_clock = STOP_CLOCK.module
    if getattr(av.container.core, "time", None) is not stop_clock:
        pytest.skip("this PyAV reads no clock that stop() can end")
    monotonic = stop_clock.monotonic

    def counted() -> float:
        reader = getattr(threading.current_thread(), "frames", None)
        if reader is not None:
            seen.append(len(reader))
        return monotonic()

    monkeypatch.setattr(stop_clock, "monotonic", counted)
    return seen


def _blocked(polls: list[int], frames: list[Frame]) -> bool:
    """The reader polled the interrupt callback 10 times since its last frame: it is waiting
    for data that does not come (a read of data that flows yields frames between polls)."""
    return polls[-10:].count(len(frames)) == 10


def test_stop_ends_a_read_blocked_in_a_stalled_stream(
    serve: type[_StallingServer], polls: list[int]
) -> None:
    server = serve(["half"])
    # A read timeout longer than the guard: only stop() can end the read in time.
    options = SourceOptions(read_timeout=2 * HANG_SECONDS)
    source = VideoSource(server.url, 0, options, kind="stream")
    frames, reader = _read_in_thread(source)
    until(lambda: len(frames) > 5 and _blocked(polls, frames), "blocked in a read")
    assert reader.is_alive()
    source.stop()
    reader.join(HANG_SECONDS)
    assert not reader.is_alive(), "stop() left the reader blocked until the read timeout"
    report = source.report()
    assert (report["reconnects"], report["ended_early"]) == (0, "")
    source.close()


def test_stop_ends_a_reconnect_blocked_in_open(
    serve: type[_StallingServer], polls: list[int]
) -> None:
    server = serve(["cut", "hang"])
    options = SourceOptions(read_timeout=2 * HANG_SECONDS, reconnect_backoff=0.01)
    source = VideoSource(server.url, 0, options, kind="stream")
    frames, reader = _read_in_thread(source)
    until(lambda: server.accepted == 2 and _blocked(polls, frames), "blocked reconnecting")
    source.stop()
    reader.join(HANG_SECONDS)
    assert not reader.is_alive(), "stop() left the reconnect blocked until the open timeout"
    assert 0 < len(frames) < SERVED
    assert source.report()["reconnects"] == 0  # interrupted by stop(), not a failed attempt
    source.close()


def test_a_stalled_stream_times_out_and_reconnects(serve: type[_StallingServer]) -> None:
    server = serve(["half", "full"])
    options = SourceOptions(read_timeout=0.5, reconnect_backoff=0.01, reconnect_attempts=1)
    source = VideoSource(server.url, 0, options, kind="stream")
    frames = list(source.frames())
    report = source.report()
    assert SERVED < len(frames) < 2 * SERVED  # most of the first connection, all of the second
    assert [f.index for f in frames] == list(range(len(frames)))
    # After the stall; the second connection delivers the whole video, which then ends.
    assert report["reconnects"] == 1
    assert report["gap_seconds"] > options.read_timeout  # the stall itself is part of the gap
    assert report["ended_early"] == ""


class MediaClock:
    """The video module's `time` for a paced file: `perf_counter()` reads a clock that only
    `sleep()` moves, so a frame's capture time is when the pacing let it go, however long the
    decoding took."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def perf_counter(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += max(0.0, seconds)

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


@pytest.fixture
def media_clock(monkeypatch: pytest.MonkeyPatch) -> MediaClock:
    clock = MediaClock()
    monkeypatch.setattr(video_module, "time", clock)
    return clock


def test_realtime_paces_a_file_like_a_camera(tmp_path: Path, media_clock: MediaClock) -> None:
    video = write_video(tmp_path / "paced.mp4", frames=20, fps=25)
    source = open_source(str(video), 0, SourceOptions(realtime=True))
    assert source.live
    assert source.paced
    started = media_clock.now
    frames = list(source.frames())
    source.close()
    assert [f.index for f in frames] == list(range(20))
    # Media time, each frame delivered when a 25 FPS camera would deliver it.
    assert [round(f.timestamp, 3) for f in frames] == [round(i / 25, 3) for i in range(20)]
    assert [f.captured_at - started for f in frames] == pytest.approx([i / 25 for i in range(20)])
    assert sum(media_clock.slept) == pytest.approx(19 / 25)
    assert source.report()["lost"] == 0
    assert not source.report()["ended_early"]


def first_frames(source: Source, count: int) -> list[Frame]:
    """A source's first `count` frames, then it is stopped and closed (a looped file)."""
    frames = []
    for frame in source.frames():
        frames.append(frame)
        if len(frames) == count:
            source.stop()
    source.close()
    return frames


def test_a_looped_paced_file_starts_again_with_its_times_running_on(tmp_path: Path) -> None:
    video = write_video(tmp_path / "loop.mp4", frames=8, fps=100)
    source = open_source(str(video), 0, SourceOptions(realtime=True, loop=True))
    frames = first_frames(source, 20)
    assert [f.index for f in frames] == list(range(20))  # on past the file's 8 frames
    # Media time continues a frame after the last one: 0.00 … 0.07, 0.08 … 0.15, 0.16 …
    assert [round(f.timestamp, 3) for f in frames] == [round(i / 100, 3) for i in range(20)]
    # The same pictures again: the second round's first frame is the file's first.
    np.testing.assert_array_equal(frames[8].image, frames[0].image)
    assert not source.report()["ended_early"]


def test_a_paced_file_starts_at_its_start_frame_paced_from_there(
    tmp_path: Path, media_clock: MediaClock
) -> None:
    """A camera's stand-in resumed mid-file (a cluster's retry): the frames from there, at
    their media times, the first one at once rather than after the frames passed over."""
    video = write_video(tmp_path / "paced.mp4", frames=160, fps=25)
    whole = open_source(str(video), 0, SourceOptions())
    expected = [f.image for f in whole.frames()][150:]
    whole.close()
    source = open_source(str(video), 0, SourceOptions(realtime=True, start_frame=150))
    started = media_clock.now
    frames = list(source.frames())
    source.close()
    assert [f.index for f in frames] == list(range(150, 160))
    assert [round(f.timestamp, 3) for f in frames] == [round(i / 25, 3) for i in range(150, 160)]
    # 6 s of media passed over: the first frame comes at once, not 6 s later; then paced.
    assert frames[0].captured_at == started
    paced = [f.captured_at - started for f in frames]
    assert paced == pytest.approx([i / 25 for i in range(10)])
    for got, image in zip(frames, expected, strict=True):
        np.testing.assert_array_equal(got.image, image)


def test_a_looped_paced_file_started_past_its_end_goes_on_in_a_later_round(
    tmp_path: Path,
) -> None:
    video = write_video(tmp_path / "loop.mp4", frames=8, fps=100)
    looped = SourceOptions(realtime=True, loop=True, start_frame=19)
    frames = first_frames(open_source(str(video), 0, looped), 3)
    assert [f.index for f in frames] == [19, 20, 21]
    assert [round(f.timestamp, 3) for f in frames] == [0.19, 0.2, 0.21]
    # A stand-in resumed an hour on: whole rounds are counted, not decoded.
    source = open_source(str(video), 0, SourceOptions(realtime=True, loop=True, start_frame=80003))
    decode, decoded = source._decode, []

    def counted() -> Iterator[Any]:
        for frame in decode():
            decoded.append(frame)
            yield frame

    source._decode = counted  # type: ignore[method-assign]
    first = next(source.frames())
    source.close()
    assert (first.index, round(first.timestamp, 2), len(decoded)) == (80003, 800.03, 4)
    # A header without a frame count: the rounds are decoded, not divided by zero.
    source = open_source(str(video), 0, SourceOptions(realtime=True, loop=True, start_frame=19))
    source.frame_count = 0
    assert [f.index for f in first_frames(source, 2)] == [19, 20]


def test_auto_workers_put_each_of_several_cameras_in_a_process() -> None:
    from visionrt.sources.registry import worker_options

    specs = ["/dev/video0", "rtsp://cam/1", "clip.mp4", "synthetic:8x8:1"]
    chosen = [o.workers for o in worker_options(specs, SourceOptions())]
    assert chosen == ["process", "process", "thread", "thread"]
    # One camera alone stays in a thread; an explicit choice is kept for every source.
    assert [o.workers for o in worker_options(["0", "a.mp4"], SourceOptions())] == [
        "thread",
        "thread",
    ]
    forced = worker_options(specs, SourceOptions(workers="thread"))
    assert all(o.decode_threads >= 1 for o in forced)  # several sources share the cores
    assert {o.workers for o in forced} == {"thread"}


def test_several_sources_share_the_cores_for_decoding(monkeypatch: pytest.MonkeyPatch) -> None:
    from visionrt.sources import registry

    monkeypatch.setattr(registry, "usable_cores", lambda: 16)
    threads = [o.decode_threads for o in registry.worker_options(["a.mp4"] * 4, SourceOptions())]
    assert threads == [4, 4, 4, 4]
    many = registry.worker_options(["a.mp4"] * 64, SourceOptions())
    assert {o.decode_threads for o in many} == {1}
    assert registry.worker_options(["a.mp4"], SourceOptions())[0].decode_threads == 0  # FFmpeg's
    given = registry.worker_options(["a.mp4"] * 4, SourceOptions(decode_threads=3))
    assert {o.decode_threads for o in given} == {3}


def _rotated_video(path: Path, rotation: int, frames: int = 6, hflip: bool = False) -> Path:
    """A 128×96 (w×h) clip stored as a phone stores a portrait one: landscape pixels and a
    display matrix of `rotation` degrees counter-clockwise (`ffmpeg -metadata:s:v rotate=90`
    writes -90), a white block at the stored top-left corner."""
    from fractions import Fraction

    import av

    with av.open(str(path), mode="w") as container:
        stream = container.add_stream("mpeg4", rate=Fraction(25))
        stream.width, stream.height, stream.pix_fmt = 128, 96, "yuv420p"
        stream.set_display_rotation(rotation, hflip=hflip)
        for _ in range(frames):
            image = np.zeros((96, 128, 3), np.uint8)
            image[:16, :32] = 255
            container.mux(stream.encode(av.VideoFrame.from_ndarray(image, format="bgr24")))
        container.mux(stream.encode(None))
    return path


@pytest.mark.parametrize(
    ("rotation", "size", "corner"),
    [
        (-90, (128, 96), "top right"),  # a quarter turn clockwise, as players show it
        (90, (128, 96), "bottom left"),
        (180, (96, 128), "bottom right"),
        (0, (96, 128), "top left"),
    ],
)
@pytest.mark.parametrize(("workers", "pixels"), [("thread", "bgr"), ("thread", "i420"),
                                                 ("process", "bgr")])  # fmt: skip
def test_a_rotated_video_is_read_upright(
    tmp_path: Path, rotation: int, size: tuple[int, int], corner: str, workers: str, pixels: str
) -> None:
    """Issue #47: a phone's portrait video (display matrix -90°) was processed and written
    lying on its side. Its frames, and its size known before any is read, are upright, in a
    worker process too; a rotated frame comes as BGR whatever pixels were asked for."""
    video = _rotated_video(tmp_path / "phone.mp4", rotation)
    options = SourceOptions(mode="file", workers=workers, pixels=pixels)
    source = open_source(str(video), 0, options)
    try:
        assert source.size == size  # type: ignore[attr-defined]
        frames = list(source.frames())
    finally:
        source.close()
    assert len(frames) == 6
    image = frames[0].image
    assert image.shape == (*size, 3)
    height, width = size
    corners = {
        "top left": image[:8, :8],
        "top right": image[:8, width - 8 :],
        "bottom left": image[height - 8 :, :8],
        "bottom right": image[height - 8 :, width - 8 :],
    }
    bright = {name for name, patch in corners.items() if patch.mean() > 200}
    assert bright == {corner}


def test_a_mirroring_display_matrix_is_left_as_stored_and_said(tmp_path: Path) -> None:
    """PyAV reads a mirroring matrix as a rotation alone (a horizontal flip as 180°): turned,
    the picture would be upside down. It is read as stored, and the source's events say so."""
    video = _rotated_video(tmp_path / "selfie.mp4", 0, hflip=True)
    source = open_source(str(video), 0, SourceOptions(mode="file", workers="thread"))
    try:
        assert source.size == (96, 128)  # type: ignore[attr-defined]
        frames = list(source.frames())
    finally:
        source.close()
    assert frames[0].image[:8, :8].mean() > 200  # the block where it was stored
    assert source.stats.events == [
        f"{video}: its display matrix mirrors the picture: not applied, frames as stored"
    ]
