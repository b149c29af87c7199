"""The source contract, over every kind usable here; `open_source` dispatch; damaged files;
streams that stop or give up."""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path

import cv2
import numpy as np
import pytest
from conftest import write_video

from visionrt.errors import ConfigError, SourceError, SourceNotFoundError
from visionrt.sources import Source, SourceOptions, open_source
from visionrt.sources.images import ImageSource
from visionrt.sources.synthetic import SyntheticSource
from visionrt.sources.video import VideoSource

REPORT_KEYS = {"name", "live", "frames", "declared", "lost", "corrupt", "reconnects",
               "gap_seconds", "ended_early", "warnings"}  # fmt: skip


def _make(kind: str, folder: Path, options: SourceOptions) -> Source:
    if kind == "video":
        return open_source(str(write_video(folder / "v.mp4", frames=30)), 0, options)
    if kind in ("folder", "image"):
        for i in range(12 if kind == "folder" else 1):
            cv2.imwrite(str(folder / f"f{i:02d}.png"), np.full((48, 64, 3), i * 20, np.uint8))
        return open_source(str(folder if kind == "folder" else folder / "f00.png"), 0, options)
    if kind == "synthetic":
        return open_source("synthetic:64x48:30", 0, options)
    video = write_video(folder / "s.mp4", frames=30)
    return VideoSource(str(video), 0, options, kind="stream")  # a file read as a stream


KINDS = ["video", "folder", "image", "synthetic", "stream"]


@pytest.mark.parametrize("kind", KINDS)
def test_source_contract(kind: str, tmp_path: Path) -> None:
    source = _make(kind, tmp_path, SourceOptions(mode="file"))
    frames = list(source.frames())
    source.close()
    source.close()  # twice is fine
    assert [f.index for f in frames] == list(range(len(frames)))
    assert len(frames) >= 1
    for frame in frames:
        assert frame.image.dtype == np.uint8
        assert frame.image.ndim == 3
        assert frame.image.shape[2] == 3
        assert frame.image.flags["C_CONTIGUOUS"]
    stamps = [f.timestamp for f in frames]
    assert stamps == sorted(stamps)
    report = source.report()
    assert set(report) == REPORT_KEYS
    assert report["frames"] == len(frames)
    assert report["lost"] == 0
    assert report["warnings"] == []


@pytest.mark.parametrize("kind", ["video", "folder", "synthetic", "stream"])
def test_max_frames_is_honoured(kind: str, tmp_path: Path) -> None:
    source = _make(kind, tmp_path, SourceOptions(mode="file", max_frames=5))
    assert len(list(source.frames())) == 5
    assert source.report()["lost"] == 0  # limited, not lost
    source.close()


@pytest.mark.parametrize("kind", ["video", "synthetic", "stream"])
def test_stop_from_another_thread_ends_promptly(kind: str, tmp_path: Path) -> None:
    source = _make(kind, tmp_path, SourceOptions(mode="live"))
    started = time.perf_counter()
    for seen, _ in enumerate(source.frames(), start=1):
        if seen == 2:
            threading.Thread(target=source.stop).start()
            time.sleep(0.05)
    assert time.perf_counter() - started < 3
    assert source.report()["reconnects"] == 0  # a clean stop is not a disconnect
    assert source.report()["warnings"] == []
    source.close()


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


@pytest.mark.parametrize("where", ["missing.mp4", "empty-folder"])
def test_nothing_there_is_not_found(where: str, tmp_path: Path) -> None:
    (tmp_path / "empty-folder").mkdir()
    with pytest.raises(SourceNotFoundError):
        open_source(str(tmp_path / where))


@pytest.mark.parametrize("spec", ["synthetic:0x0:3", "synthetic:100000x100000:1",
                                  "synthetic:64x48:-1", "synthetic:64:3"])  # fmt: skip
def test_bad_synthetic_specs(spec: str) -> None:
    with pytest.raises(ConfigError, match="synthetic source"):
        open_source(spec)


def test_truncated_file_reports_what_was_lost(tmp_path: Path) -> None:
    video = write_video(tmp_path / "cut.mkv", frames=60, width=160, height=120)
    video.write_bytes(video.read_bytes()[: video.stat().st_size * 3 // 10])
    source = open_source(str(video))
    frames = list(source.frames())
    report = source.report()
    assert 0 < len(frames) < 60
    assert report["declared"] == 60
    assert report["lost"] == 60 - len(frames)
    assert report["warnings"] == [
        f"{video}: {len(frames)} of 60 declared frames decoded, {60 - len(frames)} lost"
        " (truncated or corrupt file?)"
    ]


def test_nothing_decodable_is_an_error(tmp_path: Path) -> None:
    folder = tmp_path / "broken"
    folder.mkdir()
    for i in range(3):
        (folder / f"{i}.png").write_bytes(b"not a png")
    source = open_source(str(folder))
    with pytest.raises(SourceError, match=r"no decodable frame \(0 of 3 declared\)"):
        list(source.frames())


def test_a_stream_that_gives_up_says_why(tmp_path: Path, small_video: Path) -> None:
    stream = Path(shutil.copy(small_video, tmp_path / "stream.mp4"))
    options = SourceOptions(mode="live", reconnect_attempts=2, reconnect_backoff=0.01)
    source = VideoSource(str(stream), 0, options, kind="stream")
    stream.unlink()
    assert len(list(source.frames())) == 40
    report = source.report()
    assert report["reconnects"] == 2
    assert "gave up after 2 reconnects (cannot open stream" in report["ended_early"]
