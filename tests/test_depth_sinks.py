"""The depth sinks: colourised video, 16-bit PNG and NPY maps per frame."""

from __future__ import annotations

import json
from pathlib import Path

import av
import cv2
import numpy as np
import pytest

from visionrt.errors import ConfigError, SinkError
from visionrt.sinks.depth import DepthMapSink, DepthVideoSink, colorize_depth, decode_png16
from visionrt.types import DepthMap, Detections, Frame, FrameResult

# -- sinks -----------------------------------------------------------------------------------


def _result(
    index: int, depth: DepthMap | None, source_id: int = 0, depth_from: int | None = None
) -> FrameResult:
    image = np.full((48, 64, 3), 40, np.uint8)
    frame = Frame(source_id, index, image, index / 25, 0.0, source_name="rgb")
    return FrameResult(frame, Detections.empty(), {}, depth=depth, depth_from=depth_from)


def _gradient(index: int = 0) -> DepthMap:
    values = np.tile(np.linspace(0.5, 4.0, 64, dtype=np.float32), (48, 1)) + index
    values[0, 0] = np.nan
    return DepthMap(values)


def test_colorized_depth_is_bright_where_near_and_black_where_unknown() -> None:
    picture = colorize_depth(_gradient())
    assert picture.shape == (48, 64, 3)
    assert picture.dtype == np.uint8
    assert picture[0, 0].tolist() == [0, 0, 0]
    assert picture[5, 63].sum() > picture[5, 1].sum()  # larger inverse depth: nearer, brighter
    metric = colorize_depth(DepthMap(_gradient().values, metric=True))
    assert metric[5, 1].sum() > metric[5, 63].sum()  # metres: smaller is nearer


def test_png_maps_round_trip_in_16_bits(tmp_path: Path) -> None:
    sink = DepthMapSink(tmp_path / "rgb.depth", "png", source_id=0)
    sink.write(_result(0, None))  # no depth: skipped
    for index in range(1, 3):
        sink.write(_result(index, _gradient(index)))
    sink.write(_result(3, _gradient(), source_id=1))  # another source: skipped
    assert sink.close() == [tmp_path / "rgb.depth"]
    folder = tmp_path / "rgb.depth"
    lines = [json.loads(x) for x in (folder / "frames.jsonl").read_text().splitlines()]
    assert [line["file"] for line in lines] == ["000001.png", "000002.png"]
    for line in lines:
        levels = cv2.imread(str(folder / line["file"]), cv2.IMREAD_UNCHANGED)
        assert levels.dtype == np.uint16
        assert levels.shape == (48, 64)
        values = decode_png16(levels, line["min"], line["max"])
        want = _gradient(line["frame"]).values
        assert np.isnan(values[0, 0])
        step = (line["max"] - line["min"]) / 65534
        np.testing.assert_allclose(values[1:], want[1:], atol=step)
        assert line["units"] == "relative inverse depth"


def test_npy_maps_keep_the_values_exactly(tmp_path: Path) -> None:
    sink = DepthMapSink(tmp_path / "maps", "npy")
    sink.write(_result(7, _gradient()))
    sink.close()
    values = np.load(tmp_path / "maps" / "rgb-000007.npy")
    np.testing.assert_array_equal(values, _gradient().values)


def test_a_map_given_to_later_frames_is_written_once_on_its_own_frame(tmp_path: Path) -> None:
    """Depth on 1 frame in N (or a frame motion gating reused): the frames between hold frame
    0's map; the folder has one file per map made, and the video a picture per frame."""
    maps = DepthMapSink(tmp_path / "rgb.depth", "npy")
    video = DepthVideoSink(tmp_path / "rgb.depth.mp4", fps=25.0)
    made = _gradient()
    for index in range(4):
        result = _result(index, made, depth_from=None if index == 0 else 0)
        maps.write(result)
        video.write(result)
    maps.write(_result(4, _gradient(4)))
    video.write(_result(4, _gradient(4)))
    maps.close()
    video.close()
    lines = [json.loads(x) for x in (tmp_path / "rgb.depth" / "frames.jsonl").open()]
    assert [line["frame"] for line in lines] == [0, 4]
    assert sorted(p.name for p in (tmp_path / "rgb.depth").glob("*.npy")) == [
        "rgb-000000.npy", "rgb-000004.npy",
    ]  # fmt: skip
    with av.open(str(tmp_path / "rgb.depth.mp4")) as decoded:
        assert sum(1 for _ in decoded.decode(video=0)) == 5


def test_map_folder_stays_partial_after_an_incomplete_run(tmp_path: Path) -> None:
    sink = DepthMapSink(tmp_path / "rgb.depth", "png")
    sink.write(_result(0, _gradient()))
    assert sink.close(complete=False) == [tmp_path / "rgb.partial.depth"]
    assert not (tmp_path / "rgb.depth").exists()


def test_map_sink_without_depth_leaves_nothing(tmp_path: Path) -> None:
    sink = DepthMapSink(tmp_path / "rgb.depth", "npy")
    sink.write(_result(0, None))
    assert sink.close() == []
    assert list(tmp_path.iterdir()) == []


def test_map_sink_refuses_a_folder_with_files_and_writes_after_close(tmp_path: Path) -> None:
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "x").write_text("x")
    with pytest.raises(SinkError, match="not an empty folder"):
        DepthMapSink(tmp_path / "taken", "png")
    with pytest.raises(ConfigError, match="png or npy"):
        DepthMapSink(tmp_path / "maps", "tiff")
    sink = DepthMapSink(tmp_path / "maps", "png")
    sink.close()
    with pytest.raises(SinkError, match="after close"):
        sink.write(_result(0, _gradient()))


def test_depth_video_has_a_frame_per_depth_map(tmp_path: Path) -> None:
    import av

    path = tmp_path / "rgb.depth.mp4"
    sink = DepthVideoSink(path, fps=25, source_id=0)
    for index in range(6):
        sink.write(_result(index, _gradient(index) if index != 2 else None))
    assert sink.close() == [path]
    with av.open(str(path)) as container:
        frames = [f.to_ndarray(format="bgr24") for f in container.decode(video=0)]
    assert len(frames) == 5
    assert frames[0].shape == (48, 64, 3)
