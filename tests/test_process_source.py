"""Sources decoded in a worker process: the same frames and accounting as a thread source,
leases on shared-memory slots, back-pressure and live drops, worker death and restart, stop(),
and no segment left in /dev/shm."""

from __future__ import annotations

import gc
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import cv2
import numpy as np
import psutil
import pytest
from conftest import HANG_SECONDS, finishes, until

from visionrt.errors import ConfigError, SourceError, SourceNotFoundError
from visionrt.frames import in_pinned_memory
from visionrt.sources import SourceOptions, open_source
from visionrt.sources.process import ProcessSource
from visionrt.types import Frame

SHM = Path("/dev/shm")
PROCESS = SourceOptions(workers="process")


def _segments() -> set[str]:
    return {p.name for p in SHM.iterdir() if p.name.startswith(f"vrt{os.getpid()}_")}


@pytest.fixture(autouse=True)
def _no_segment_left() -> Iterator[None]:
    if not SHM.is_dir():
        pytest.skip("no /dev/shm on this system")
    before = _segments()
    yield
    gc.collect()
    assert _segments() == before


def _ended(pid: int) -> bool:
    """The process has exited (a zombie until its parent reaps it, or gone)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _same(frames: list[Frame], expected: list[Frame]) -> None:
    assert [f.index for f in frames] == [f.index for f in expected]
    assert [f.timestamp for f in frames] == [f.timestamp for f in expected]
    assert [f.source_name for f in frames] == [f.source_name for f in expected]
    for frame, want in zip(frames, expected, strict=True):
        assert frame.image.dtype == np.uint8
        assert frame.image.flags["C_CONTIGUOUS"]
        np.testing.assert_array_equal(frame.image, want.image)


@pytest.mark.parametrize("spec", ["synthetic:96x64:40", "demo"])
def test_frames_and_report_equal_a_thread_source(spec: str, request: pytest.FixtureRequest) -> None:
    if spec == "demo":
        spec = str(request.getfixturevalue("demo_video"))
    options = SourceOptions(mode="file", max_frames=30)
    direct = open_source(spec, 0, options)
    expected = list(direct.frames())
    direct.close()
    started = time.perf_counter()
    source = open_source(spec, 0, SourceOptions(mode="file", max_frames=30, workers="process"))
    assert isinstance(source, ProcessSource)
    frames = []
    for frame in source.frames():
        assert started < frame.captured_at < time.perf_counter()  # one clock with this process
        assert not _segments()  # unlinked once the worker mapped it
        frames.append(frame)
    _same(frames, expected)
    assert len(frames) == 30
    assert source.report() == direct.report()
    assert (source.name, source.fps, source.frame_count) == (direct.name, direct.fps,
                                                            direct.frame_count)  # fmt: skip
    source.close()
    source.close()


def test_the_worker_loads_no_inference_runtime() -> None:
    source = ProcessSource("synthetic:64x48:1", 0, PROCESS)
    maps = Path(f"/proc/{source.pid}/maps")
    if not maps.exists():
        pytest.skip("no /proc here")
    libraries = maps.read_text()
    assert "libpython" in libraries or "numpy" in libraries
    for runtime in ("onnxruntime", "openvino", "libtorch", "tensorrt"):
        assert runtime not in libraries
    source.close()
    assert source.pid is None


def test_a_resolution_change_makes_a_new_ring(tmp_path: Path) -> None:
    for i in range(5):
        size = (24, 32) if i < 3 else (48, 64)
        cv2.imwrite(str(tmp_path / f"{i}.png"), np.full((*size, 3), i * 40, np.uint8))
    expected = list(open_source(str(tmp_path)).frames())
    source = open_source(str(tmp_path), 0, PROCESS)
    _same(list(source.frames()), expected)
    source.close()


# -- leases --------------------------------------------------------------------------------------


def test_holding_every_slot_waits_and_a_release_lets_it_go_on() -> None:
    source = ProcessSource("synthetic:64x48:12", 0, SourceOptions(mode="file"), slots=3)
    held: list[Frame] = []
    reader = threading.Thread(target=lambda: held.extend(source.frames()), daemon=True)
    reader.start()
    until(lambda: len(held) == 3, "held every slot")
    time.sleep(0.3)
    assert len(held) == 3  # back-pressure: the worker waits for a slot
    first = held.pop(0)
    del first
    until(lambda: len(held) == 3 and held[-1].index == 3, "took the slot let go")
    held.clear()  # every frame released: the rest flows
    reader.join(HANG_SECONDS)
    assert not reader.is_alive()
    assert [f.index for f in held] == list(range(4, 12))
    assert source.report()["frames"] == 12
    held.clear()
    source.close()


def test_a_reader_that_keeps_every_frame_gets_a_bigger_ring() -> None:
    expected = list(open_source("synthetic:64x48:7").frames())
    source = ProcessSource("synthetic:64x48:7", 0, SourceOptions(mode="file"), slots=2)
    _same(list(source.frames()), expected)  # 2 slots, then 4, then 8
    grown = [e for e in source.stats.events if "ring grown" in e]
    assert len(grown) == 2
    assert grown[0].endswith("the reader held all 2 ring slots for 0.5 s; ring grown to 4")
    source.close()


def test_a_kept_slice_keeps_its_slot() -> None:
    expected = list(open_source("synthetic:64x48:20").frames())
    source = ProcessSource("synthetic:64x48:20", 0, SourceOptions(mode="file"), slots=2)
    frames = source.frames()
    part = next(frames).image[5:30, 10:50][:, ::2]
    rest = [f.index for f in frames]  # each released at once: they share the other slot
    assert rest == list(range(1, 20))
    np.testing.assert_array_equal(part, expected[0].image[5:30, 10:50][:, ::2])
    source.close()  # a view is still alive: the segment stays mapped, not linked
    np.testing.assert_array_equal(part, expected[0].image[5:30, 10:50][:, ::2])
    del part


def test_a_live_source_drops_what_a_slow_reader_misses() -> None:
    """The slowest reader: it holds its first frame until the 30 FPS camera has sent all 45.
    The ring's other slot takes frame 1; the 43 after it find no free slot and are missed."""
    source = ProcessSource("synthetic:64x48:45", 0, SourceOptions(mode="live"), slots=2)
    frames = source.frames()
    first = next(frames)
    assert source.pid is not None
    until(lambda: _ended(source.pid), "sent its 45 frames")  # type: ignore[arg-type]
    indices = [first.index, *(frame.index for frame in frames)]
    del first
    report = source.report()
    assert indices == [0, 1]
    assert report["missed"] == 43
    assert report["frames"] + report["missed"] == 45  # every frame given or counted
    source.close()


# -- worker death, stop, errors ------------------------------------------------------------------


def test_a_killed_file_worker_is_restarted_and_resumes_after_the_last_frame() -> None:
    spec = "synthetic:64x48:60"
    expected = list(open_source(spec).frames())
    options = SourceOptions(mode="file", reconnect_backoff=0.01)
    source = ProcessSource(spec, 0, options, slots=4)
    frames = []
    for frame in source.frames():
        frames.append(frame.image.copy())
        if frame.index == 20:
            assert source.pid is not None
            os.kill(source.pid, signal.SIGKILL)
    assert len(frames) == 60  # every frame once, in order, pixel-equal
    for got, want in zip(frames, expected, strict=True):
        np.testing.assert_array_equal(got, want.image)
    report = source.report()
    assert report["restarts"] == 1
    assert report["frames"] == 60
    assert report["ended_early"] == ""
    assert len(report["warnings"]) == 1
    assert "worker process was killed by SIGKILL after frame" in report["warnings"][0]
    source.close()


def test_a_killed_live_worker_is_restarted_and_counting_goes_on() -> None:
    options = SourceOptions(mode="live", reconnect_backoff=0.01)
    source = ProcessSource("synthetic:64x48:1000", 0, options)
    indices: list[int] = []
    for frame in source.frames():
        indices.append(frame.index)
        if len(indices) == 3:
            os.kill(source.pid, signal.SIGKILL)  # type: ignore[arg-type]
        if len(indices) == 8:
            source.stop()
    assert len(indices) == 8  # stopped where asked, nothing read after
    assert indices == sorted(set(indices))
    report = source.report()
    assert report["restarts"] == 1
    assert report["ended_early"] == ""
    source.close()


def test_a_worker_that_keeps_dying_is_given_up() -> None:
    options = SourceOptions(mode="file", reconnect_attempts=0)
    source = ProcessSource("synthetic:64x48:50", 0, options, slots=2)
    got = 0
    for got, _ in enumerate(source.frames(), start=1):
        if got == 5:
            os.kill(source.pid, signal.SIGKILL)  # type: ignore[arg-type]
    report = source.report()
    assert 5 <= got < 50
    assert report["ended_early"].startswith("synthetic:64x48:50: gave up after 0 worker restarts")
    assert report["restarts"] == 0
    assert report["lost"] == 50 - got
    source.close()


def test_stop_from_another_thread_ends_promptly() -> None:
    """A camera of ~55 minutes, stopped from another thread after its third frame: nothing is
    read after stop() returned but the frame it came during (and the reader, blocked waiting
    for the next, notices)."""
    source = ProcessSource("synthetic:64x48:100000", 0, SourceOptions(mode="live"))
    pid = source.pid
    seen: list[int] = []
    stopped_at: list[int] = []

    def stop() -> None:
        source.stop()
        stopped_at.append(len(seen))

    stopper = threading.Thread(target=stop)

    def read() -> None:
        for frame in source.frames():
            seen.append(frame.index)
            if len(seen) == 3:
                stopper.start()

    finishes(read, "the read after stop()")
    stopper.join(HANG_SECONDS)
    assert len(seen) <= stopped_at[0] + 1
    report = source.report()
    assert (report["reconnects"], report["restarts"], report["ended_early"]) == (0, 0, "")
    source.close()
    with pytest.raises(ProcessLookupError):  # reaped, not left running
        os.kill(pid, 0)  # type: ignore[arg-type]


def test_open_errors_are_the_workers_own(tmp_path: Path) -> None:
    missing = str(tmp_path / "missing.mp4")
    with pytest.raises(SourceNotFoundError) as thread_error:
        open_source(missing)
    with pytest.raises(SourceNotFoundError) as process_error:
        open_source(missing, 0, PROCESS)
    assert str(process_error.value) == str(thread_error.value)
    assert "\n" not in str(process_error.value)
    with pytest.raises(ConfigError, match=r"^synthetic source 'synthetic:1x1': expected"):
        open_source("synthetic:1x1", 0, PROCESS)


def test_workers_option_is_validated() -> None:
    expected = r"^source\.workers: expected auto, thread or process, got 'x'$"
    with pytest.raises(ConfigError, match=expected):
        SourceOptions(workers="x")


def test_a_full_dev_shm_is_an_error_not_a_crash(monkeypatch: pytest.MonkeyPatch) -> None:
    if not hasattr(os, "posix_fallocate"):
        pytest.skip("no posix_fallocate here: a full /dev/shm shows as SIGBUS in the worker")

    def full(fd: int, offset: int, size: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "posix_fallocate", full)
    source = ProcessSource("synthetic:64x48:5", 0, PROCESS, slots=4)
    with pytest.raises(SourceError, match=r"^cannot reserve a 0\.0 MB shared-memory ring \(4 fr"):
        next(source.frames())
    assert source.pid is None  # the worker was ended
    source.close()


# -- pinned rings --------------------------------------------------------------------------------


class _Pinning:
    """Records what a device would register (`frames.Pinning`)."""

    def __init__(self, answer: bool | None = True) -> None:
        self.answer = answer  # None: registering raises
        self.registered: list[tuple[int, int]] = []
        self.unregistered: list[int] = []

    def register(self, address: int, size: int) -> bool:
        if self.answer is None:
            raise RuntimeError("no device")
        self.registered.append((address, size))
        return self.answer

    def unregister(self, address: int) -> None:
        self.unregistered.append(address)


def test_a_pinned_ring_is_registered_once_and_unregistered_when_unmapped() -> None:
    pinning = _Pinning()
    source = ProcessSource("synthetic:64x48:6", 0, SourceOptions(mode="file"), slots=8)
    source.pin_memory(pinning)
    frames = list(source.frames())
    assert [f.index for f in frames] == list(range(6))
    assert all(in_pinned_memory(f.pixels) for f in frames)
    ((address, size),) = pinning.registered
    assert size >= 8 * 64 * 48 * 3
    assert frames[0].pixels.ctypes.data - address in range(size)
    source.close()
    assert pinning.unregistered == []  # frames still hold slots: still mapped and registered
    del frames
    gc.collect()
    assert pinning.unregistered == [address]


@pytest.mark.parametrize("answer", [False, None])
def test_a_ring_that_cannot_be_registered_gives_frames_that_are_staged(answer: bool | None) -> None:
    pinning = _Pinning(answer)
    source = ProcessSource("synthetic:64x48:3", 0, SourceOptions(mode="file"), slots=4)
    source.pin_memory(pinning)
    frames = list(source.frames())
    assert len(frames) == 3
    assert not any(in_pinned_memory(f.pixels) for f in frames)
    source.close()
    del frames
    gc.collect()
    assert pinning.unregistered == []
