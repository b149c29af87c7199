"""Frame ranges of a video file: a reader started part-way seeks to the keyframe before its first
frame and numbers every frame as a reader from the start would (or decodes from the start where
the file's timestamps cannot place its frames); a range ends where its end frame's timestamp
says; a cluster run splits a long file into ranges at keyframes and writes what one process
writes."""

from __future__ import annotations

import hashlib
import json
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import run_cli, write_video

from visionrt.config import load_config
from visionrt.distributed.local import ThreadExecutor
from visionrt.distributed.ranges import SourceRanges, cut_points, split_units
from visionrt.distributed.run import run_on_cluster, work_units, worker_settings
from visionrt.distributed.worker import run_group
from visionrt.errors import ConfigError
from visionrt.sources.base import SourceOptions
from visionrt.sources.frame_index import FrameIndex, index_frames
from visionrt.sources.video import VideoSource

OPENCV_DATA = Path("/usr/share/doc/opencv-doc/examples/data")


def write_h264(path: Path, frames: int, gop: int = 24, bframes: int = 3) -> Path:
    """An H.264 video with B-frames (presentation order differs from decode order)."""
    import av

    with av.open(str(path), mode="w") as container:
        stream = container.add_stream("libx264", rate=Fraction(25))
        stream.width, stream.height, stream.pix_fmt = 128, 96, "yuv420p"
        stream.options = {"bf": str(bframes), "g": str(gop), "preset": "veryfast"}
        rng = np.random.default_rng(0)
        for index in range(frames):
            image = np.full((96, 128, 3), 30, np.uint8)
            x = (index * 5) % 100
            image[20:50, x : x + 24] = rng.integers(0, 255, 3)
            frame = av.VideoFrame.from_ndarray(image, format="bgr24")
            container.mux(stream.encode(frame))
        container.mux(stream.encode(None))
    return path


def read(
    path: Path, start: int = 0, end: int = 0
) -> tuple[list[tuple[int, float, str]], VideoSource]:
    """Each frame's (number, timestamp, picture hash) from `start` to `end`, and the reader."""
    options = SourceOptions(mode="file", start_frame=start, end_frame=end)
    source = VideoSource(str(path), 0, options, "file")
    frames = [
        (f.index, round(f.timestamp, 6), hashlib.md5(f.image.tobytes()).hexdigest())
        for f in source.frames()
    ]
    source.close()
    return frames, source


@pytest.fixture(scope="module")
def videos(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("ranges")
    return {
        "mpeg4": write_video(folder / "gop12.mp4", frames=150),  # a keyframe every 12 frames
        "h264-bframes": write_h264(folder / "bframes.mkv", frames=150),
        "vtest.avi": OPENCV_DATA / "vtest.avi",  # msmpeg4, a keyframe every 250 frames
    }


@pytest.mark.parametrize("kind", ["mpeg4", "h264-bframes", "vtest.avi"])
def test_a_file_started_part_way_gives_the_frames_a_whole_read_gives(
    videos: dict[str, Path], kind: str
) -> None:
    """From frame `start` to `end`, each frame's number, timestamp and picture are those of a
    read from the first frame; the reader seeked (it decoded far fewer frames than `start`)."""
    path = videos[kind]
    whole, _ = read(path)
    count = len(whole)
    for start, end in [(count // 2 + 3, 0), (count // 3, count - 7), (0, count // 4)]:
        part, source = read(path, start, end)
        assert part == [f for f in whole if f[0] >= start and (not end or f[0] < end)]
        assert source.stats.events == []
        if start:
            gop = {"mpeg4": 12, "h264-bframes": 24, "vtest.avi": 250}[kind]
            assert source._connection_frames <= (count - start) + gop + 8  # seeked


def test_frames_the_decoder_gives_out_of_timestamp_order_are_decoded_from_the_first() -> None:
    """Megamind.avi (a packed-bitstream AVI: its decoder gives frames 1 2 3 5 4 6) cannot be
    placed by timestamps: it is decoded from the first frame, and says so."""
    path = OPENCV_DATA / "Megamind.avi"
    assert "out of timestamp order" in str(index_frames(str(path)))
    whole, _ = read(path)
    part, source = read(path, 100, 180)
    assert part == whole[100:180]
    assert any("decoded from the first" in event for event in source.stats.events)


def test_a_seek_that_misses_its_frame_decodes_from_the_first(
    videos: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An index that misplaces the first frame (the seek lands on another one): the reader
    starts again from the first frame, and every frame is still right."""
    import visionrt.sources.frame_index as frame_index

    path = videos["mpeg4"]
    index = index_frames(str(path))
    assert isinstance(index, FrameIndex)
    shifted = FrameIndex(tuple(p + 1 for p in index.pts), index.keys, index.complete)
    monkeypatch.setattr(frame_index, "index_frames", lambda *_args: shifted)
    whole, _ = read(path)
    part, source = read(path, 40, 90)
    assert part == whole[40:90]
    assert any("seek missed frame 40" in event for event in source.stats.events)


def test_an_end_frame_must_come_after_the_start_frame() -> None:
    with pytest.raises(ConfigError, match=r"source\.end_frame: expected 0"):
        SourceOptions(start_frame=10, end_frame=10)
    with pytest.raises(ConfigError, match=r"source\.end_frame"):
        SourceOptions(end_frame=-1)


def test_a_run_of_frames_start_to_end_writes_those_and_accounts_for_them(
    tmp_path: Path, tiny_model: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    video = write_video(tmp_path / "v.mp4", frames=40)
    out = tmp_path / "out"
    code, err = run_cli(
        ["run", str(video), "--model", str(tiny_model), "--backend", "onnxruntime", "--out",
         str(out), "--no-video", "--quiet", "--set", "source.start_frame=13",
         "--set", "source.end_frame=29"],
        capsys,
    )  # fmt: skip
    assert code == 0, err
    rows = [json.loads(line) for line in (out / "v.jsonl").read_text().splitlines()]
    assert [row["frame"] for row in rows] == list(range(13, 29))
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["frames_in"], summary["frames_out"]) == (16, 16)
    assert summary["sources"][0]["warnings"] == []  # ending at end_frame is not a loss


@pytest.mark.parametrize("kind", ["images", "synthetic"])
def test_image_folders_and_synthetic_sources_run_their_range_under_their_own_numbers(
    kind: str, tmp_path: Path
) -> None:
    # Issue #32: both ran every frame, exit 0, whatever the range said.
    import cv2

    from visionrt.sources import open_source

    folder = tmp_path / "shots"
    folder.mkdir()
    for i in range(10):
        cv2.imwrite(str(folder / f"{i:02d}.png"), np.full((24, 32, 3), i * 20, np.uint8))
    (folder / "00b.png").write_text("not a picture")  # passed over, not numbered, either way
    spec = str(folder) if kind == "images" else "synthetic:32x24:10"
    whole = [(f.index, f.timestamp, f.image.sum()) for f in open_source(spec).frames()]
    source = open_source(spec, options=SourceOptions(start_frame=3, end_frame=6))
    part = [(f.index, f.timestamp, f.image.sum()) for f in source.frames()]
    assert part == whole[3:6]
    assert source.report()["lost"] == 0


@pytest.mark.parametrize(
    ("spec", "options", "message"),
    [
        ("http://127.0.0.1:9/cam.mp4", {"start_frame": 3}, "is a live stream, with no frame"),
        ("http://127.0.0.1:9/cam.mp4", {"end_frame": 6}, "is a live stream, with no frame"),
        ("VIDEO", {"start_frame": 1000}, r"start_frame 1000: past the end of '.*v\.mp4' \(60"),
        ("VIDEO", {"start_frame": 60}, r"start_frame 60: past the end"),
        ("synthetic:32x24:10", {"start_frame": 10}, r"past the end of 'synthetic:32x24:10'"),
    ],
)
def test_a_range_that_cannot_apply_is_refused_at_open(
    spec: str, options: dict[str, int], message: str, tmp_path: Path
) -> None:
    # Issue #32: a live stream's start was ignored (its end honoured); a start past a clip's
    # end said "no decodable frame", exit 3. Refused before anything connects or loads.
    from visionrt.sources import open_source

    if spec == "VIDEO":
        spec = str(write_video(tmp_path / "v.mp4", frames=60))
    with pytest.raises(ConfigError, match=message):
        open_source(spec, options=SourceOptions(**options))


def test_a_start_past_the_end_of_a_file_of_unknown_length_is_said_when_reached(
    tmp_path: Path, tiny_model: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Matroska declares a duration, not a count: the start is found past the end by reading.
    video = write_video(tmp_path / "v.mkv", frames=20)
    code, err = run_cli(
        ["run", str(video), "--model", str(tiny_model), "--out", str(tmp_path / "out"),
         "--no-video", "--quiet", "--set", "source.start_frame=100"],
        capsys,
    )  # fmt: skip
    assert code == 2, err
    assert err.splitlines()[-1] == (
        f"visionrt: error: source.start_frame 100: past the end of '{video}' (about 20 frames)"
    )


def test_cuts_fall_on_keyframes_near_even_parts() -> None:
    index = FrameIndex(tuple(range(100)), tuple(range(0, 100, 12)), True)
    assert cut_points(index, 100, 4) == [0, 24, 48, 72]
    assert cut_points(index, 100, 1) == [0]
    sparse = FrameIndex(tuple(range(100)), (0, 60), True)
    assert cut_points(sparse, 100, 4) == [0, 60]  # no more keyframes to cut at


def test_long_files_are_split_into_ranges_of_their_share_of_the_workers(
    videos: dict[str, Path], tmp_path: Path
) -> None:
    short = write_video(tmp_path / "short.mp4", frames=30)
    sources = [f"long={videos['mpeg4']}", f"short={short}"]
    cfg = load_config(
        values={"sources": sources, "cluster": {"range_frames": 20}, "output": {"video": False}}
    )
    units, notes = split_units(work_units(cfg), [150, 30], 4, cfg)
    long = [u for u in units if u.name == "long"]
    # 180 frames over 4 workers: shares of 45 frames; the long file in 3, at keyframes.
    assert [(u.first_frame, u.start_frame, u.end_frame) for u in long] == [
        (0, 0, 48), (48, 48, 96), (96, 96, None)
    ]  # fmt: skip
    assert [u.unit_id for u in units] == [0, 1, 2, 3]
    assert notes == ["long: 3 frame ranges from frames [0, 48, 96]"]
    # What needs the frames before each one: not split.
    for values, why in [
        ({"pipeline": {"track": True}}, "tracks run through a file"),
        ({"pipeline": {"motion": "skip"}}, "motion gating compares each frame"),
        ({"cluster": {"range_frames": 0}}, "range_frames is 0"),
    ]:
        other = load_config(
            values={"sources": sources, "output": {"video": False}, "cluster": {"range_frames": 20}}
            | values
        )
        units, notes = split_units(work_units(other), [150, 30], 4, other)
        assert len(units) == 2
        assert why in notes[0]
    # One worker, or a file under twice its share: whole.
    assert len(split_units(work_units(cfg), [150, 30], 1, cfg)[0]) == 2


def test_held_ranges_come_out_in_order_once_the_ranges_before_are_done(tmp_path: Path) -> None:
    held = SourceRanges([7, 8, 9], tmp_path / "out")  # a folder not made yet
    assert not held.holds(7)
    assert held.holds(8)
    assert held.holds(9)
    held.hold(9, 20, '{"frame":20}')
    held.hold(8, 10, '{"frame":10}')
    assert held.held == 2
    assert list((tmp_path / "out").iterdir()) == []  # spooled in unnamed files
    assert list(held.finish(9)) == []  # the first range is not done: nothing due
    # The second range is written through from now on; the third waits for it.
    assert list(held.finish(7)) == [(10, '{"frame":10}')]
    assert not held.holds(8)
    assert held.holds(9)
    assert list(held.finish(8)) == [(20, '{"frame":20}')]
    assert held.held == 0


def cluster_run(
    sources: list[Path], model: Path, out: Path, workers: int, video: bool
) -> tuple[Any, Any, list[str]]:
    """`run_on_cluster` over `workers` thread workers, long files split into ranges of at
    least 30 frames: the summary, the report and the lines said about the splits."""
    values = {
        "sources": [str(source) for source in sources],
        "model": str(model),
        "backend": "onnxruntime",
        "output": {"dir": str(out), "video": video},
        "pipeline": {"warmup": 0},
        "cluster": {"range_frames": 30},
    }
    cfg = load_config(values=values)
    said: list[str] = []
    executor = ThreadExecutor(
        workers, lambda group, send: run_group(group, worker_settings(cfg), send)
    )
    summary, report = run_on_cluster(cfg, executor, say=said.append)
    executor.close()
    return summary, report, said


def test_a_cluster_run_of_a_split_file_writes_what_one_process_writes(
    tmp_path: Path, tiny_model: Path
) -> None:
    """A 150-frame file split into ranges on 4 thread workers, beside a short file: the JSONL
    is a plain run's, line for line, and every frame is accounted for."""
    from visionrt import Pipeline
    from visionrt.sinks import JsonlSink

    sources = [write_video(tmp_path / "long.mp4", 150), write_video(tmp_path / "short.mp4", 20)]
    summary, report, said = cluster_run(sources, tiny_model, tmp_path / "cluster", 4, False)
    assert said == ["long: 3 frame ranges from frames [0, 48, 96]"]
    assert report.sources["long"].units == 3
    assert summary.error == ""
    assert (summary.frames_in, summary.frames_out) == (170, 170)
    assert summary.accounted
    assert said[0] in summary.notes

    alone = Pipeline([str(source) for source in sources], tiny_model, "onnxruntime")
    plain = tmp_path / "plain.jsonl"
    alone.run([JsonlSink(plain, alone.names, [source.name for source in alone.sources])])
    alone.close()
    expected = [json.loads(line) for line in plain.read_text().splitlines()]
    got = [
        json.loads(line)
        for line in (tmp_path / "cluster" / "detections.jsonl").read_text().splitlines()
    ]
    for name in ("long", "short"):
        assert [r for r in got if r["source"] == name] == [
            r for r in expected if r["source"] == name
        ]


def test_a_split_files_videos_are_joined_into_the_runs_one_mp4(
    tmp_path: Path, tiny_model: Path
) -> None:
    """With video on, each range's worker writes its part (`long.part2.attempt1.mp4`); the
    driver joins them into `long.mp4`, every frame in order with its own time, and no part is
    left."""
    import av

    long = write_video(tmp_path / "long.mp4", frames=150)
    summary, _, said = cluster_run([long], tiny_model, tmp_path / "out", 3, True)
    assert said == ["long: 3 frame ranges from frames [0, 48, 96]"]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["long.jsonl", "long.mp4"]
    assert str(tmp_path / "out" / "long.mp4") in summary.outputs
    with av.open(str(tmp_path / "out" / "long.mp4")) as video:
        times = [round(float(frame.time), 3) for frame in video.decode(video=0)]
    assert times == [round(i / 25, 3) for i in range(150)]


def test_a_split_files_audit_is_its_ranges_weighted_by_frames_with_each_range_kept() -> None:
    """The live audit of a file run as two ranges: counts added, mAP weighted by the frames
    each range audited (as one audit over the file comes nearest to), each range's own kept."""
    from visionrt.distributed.summary import _merged_audit

    def audit(map50: float, frames: int, window: float) -> dict[str, Any]:
        fidelity = {"map50": map50, "map50_95": map50 / 2, "frames": frames,
                    "reference_boxes": 10 * frames, "candidate_boxes": 10 * frames}  # fmt: skip
        entry = {"sampled": frames, "audited": frames, "skipped": 0, "fidelity": fidelity,
                 "window": {"map50": window, "frames": frames}}  # fmt: skip
        return {"rate": 0.02, "sources": {"long": entry}, "events": [], "error": ""}

    merged = _merged_audit([audit(0.99, 30, 0.99), audit(0.93, 10, 0.93)])["sources"]["long"]
    assert (merged["sampled"], merged["audited"]) == (40, 40)
    assert merged["fidelity"]["map50"] == pytest.approx((0.99 * 30 + 0.93 * 10) / 40)
    assert merged["fidelity"]["frames"] == 40
    assert merged["fidelity"]["reference_boxes"] == 400
    assert merged["window"]["map50"] == 0.93  # the live window: the worse range's
    assert merged["ranges"] == [{"map50": 0.99, "frames": 30}, {"map50": 0.93, "frames": 10}]
    whole = _merged_audit([audit(0.97, 20, 0.97)])["sources"]["long"]
    assert "ranges" not in whole  # a file run whole reports as a plain run does
