"""Tiling (issue #9): the tile grid on worked examples, tile crops in the input buffer, mapping
of tile boxes to source pixels, merging across seams, and a real detector run on tiles."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

from visionrt.backends import BackendOptions
from visionrt.config import pipeline_options
from visionrt.errors import ConfigError
from visionrt.postprocess.tiles import cut_sides, merge_tiles, seen_better
from visionrt.preprocess import InputLayout, letterbox_into
from visionrt.preprocess.tile import (
    TileOptions,
    fill_tiles,
    plan_tiles,
    tile_count,
    tile_windows,
)
from visionrt.tasks.tiled import TiledDetectTask
from visionrt.types import Detections

# -- the grid ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source_hw", "tile", "overlap", "expected"),
    [
        # Two tiles side by side, no overlap: exact coverage.
        ((640, 1280), 640, 0.0, [(0, 0, 640, 640), (640, 0, 1280, 640)]),
        # 20 % of 640 = 128 px shared; 512 + 640 ends exactly on the edge.
        ((640, 1152), 640, 0.2, [(0, 0, 640, 640), (512, 0, 1152, 640)]),
        # 1200 wide: a third tile, moved back from 1024 to end on the right edge.
        ((640, 1200), 640, 0.2, [(0, 0, 640, 640), (512, 0, 1152, 640), (560, 0, 1200, 640)]),
        # Shorter than a tile: one row of windows as tall as the frame.
        ((480, 1200), 640, 0.2, [(0, 0, 640, 480), (512, 0, 1152, 480), (560, 0, 1200, 480)]),
        # Smaller than a tile both ways: the frame is the one window.
        ((300, 200), 640, 0.2, [(0, 0, 200, 300)]),
        # 3 × 3 at 50 % overlap, row-major; the last row and column end on the edges.
        (
            (1000, 1000),
            600,
            0.5,
            [
                (0, 0, 600, 600),
                (300, 0, 900, 600),
                (400, 0, 1000, 600),
                (0, 300, 600, 900),
                (300, 300, 900, 900),
                (400, 300, 1000, 900),
                (0, 400, 600, 1000),
                (300, 400, 900, 1000),
                (400, 400, 1000, 1000),
            ],
        ),
    ],
)
def test_tile_windows_worked_examples(source_hw, tile, overlap, expected) -> None:
    windows = tile_windows(source_hw, tile, overlap)
    assert windows.dtype == np.int32
    assert [tuple(int(v) for v in w) for w in windows] == expected


@pytest.mark.parametrize("source_hw", [(2160, 3840), (1080, 1920), (577, 769), (641, 5000)])
@pytest.mark.parametrize(("tile", "overlap"), [(640, 0.2), (512, 0.0), (320, 0.35)])
def test_tiles_cover_the_frame_with_the_asked_overlap(source_hw, tile, overlap) -> None:
    height, width = source_hw
    windows = tile_windows(source_hw, tile, overlap)
    seen = np.zeros(source_hw, np.int32)
    for x1, y1, x2, y2 in windows:
        assert 0 <= x1 < x2 <= width
        assert 0 <= y1 < y2 <= height
        assert (x2 - x1, y2 - y1) == (min(tile, width), min(tile, height))
        seen[y1:y2, x1:x2] += 1
    assert seen.min() >= 1  # every pixel is in some tile
    # Neighbours along a row share at least the asked overlap, so an object up to that size is
    # whole in some tile.
    xs = sorted({int(w[0]) for w in windows})
    assert all(b - a <= tile - round(tile * overlap) for a, b in itertools.pairwise(xs))
    assert xs[-1] + min(tile, width) == width  # the last column ends on the edge


def test_tile_count_adds_the_full_frame_row_only_when_it_differs() -> None:
    assert tile_count((2160, 3840), TileOptions(640)) == 8 * 4 + 1
    assert tile_count((2160, 3840), TileOptions(640, full_frame=False)) == 32
    assert tile_count((480, 640), TileOptions(640)) == 1  # one tile already is the full frame


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"tile": 16}, "--tile: expected a whole number of pixels >= 32 (0: off), got 16"),
        ({"tile": 640.0}, "--tile: expected a whole number of pixels >= 32 (0: off), got 640.0"),
        ({"overlap": 1.0}, "--tile-overlap: expected a fraction in [0, 1), got 1.0"),
        ({"overlap": -0.1}, "--tile-overlap: expected a fraction in [0, 1), got -0.1"),
        ({"merge_threshold": 0.0}, "--tile-merge: expected a number in (0, 1], got 0.0"),
    ],
)
def test_options_are_refused_with_one_line(options, message) -> None:
    with pytest.raises(ConfigError) as raised:
        TileOptions(**options)
    assert str(raised.value) == message


def test_plan_letterboxes_tiles_at_their_own_size_and_the_full_frame_down() -> None:
    grid = plan_tiles((2160, 3840), (640, 640), TileOptions(640))
    assert len(grid) == 33
    assert grid.full_frame
    assert all(box.scale == 1.0 and box.top == box.left == 0 for box in grid.letterboxes[:-1])
    whole = grid.letterboxes[-1]
    assert tuple(grid.windows[-1]) == (0, 0, 3840, 2160)
    assert whole.scale == pytest.approx(640 / 3840)
    assert whole.new_hw == (360, 640)


@pytest.mark.parametrize("layout", list(InputLayout))
def test_fill_tiles_letterboxes_each_crop_into_its_row(layout: InputLayout) -> None:
    rng = np.random.default_rng(3)
    image = rng.integers(0, 255, (96, 200, 3), np.uint8)
    grid = plan_tiles((96, 200), (64, 64), TileOptions(tile=64, overlap=0.25))
    shape = (len(grid), 64, 64, 3) if layout is InputLayout.NHWC_U8_BGR else (len(grid), 3, 64, 64)
    dtype = np.uint8 if layout is InputLayout.NHWC_U8_BGR else np.float32
    buffer = np.zeros(shape, dtype)
    fill_tiles(image, buffer, grid, layout)
    for row, (x1, y1, x2, y2) in enumerate(grid.windows):
        expected = np.zeros(shape[1:], dtype)
        letterbox_into(image[y1:y2, x1:x2], expected, grid.letterboxes[row], layout)
        np.testing.assert_array_equal(buffer[row], expected)
    if layout is InputLayout.NHWC_U8_BGR:  # a full-size tile is the crop itself, unscaled
        np.testing.assert_array_equal(buffer[1], image[0:64, 48:112])
    with pytest.raises(ConfigError, match="expected a 200x96 frame for this grid, got 100x96"):
        fill_tiles(image[:, :100], buffer, grid, layout)


# -- merging -----------------------------------------------------------------------------------


def _detections(rows: list[tuple[float, float, float, float, float, int]]) -> Detections:
    table = np.asarray(rows, np.float64).reshape(-1, 6)
    return Detections(
        table[:, :4].astype(np.float32),
        table[:, 4].astype(np.float32),
        table[:, 5].astype(np.int32),
    )


def test_merge_joins_the_two_parts_of_an_object_cut_by_a_seam() -> None:
    # Tile 0 ends at x=640, tile 1 starts at x=512: each sees part of a person from 400 to 800.
    found = _detections([(400, 100, 640, 300, 0.8, 0), (512, 100, 800, 300, 0.9, 0)])
    merged = merge_tiles(found, np.array([0, 1]), np.array([True, True]), 0.5)
    np.testing.assert_allclose(merged.xyxy, [[400, 100, 800, 300]])
    np.testing.assert_allclose(merged.confidence, [0.9])


def test_merge_takes_the_box_of_a_tile_that_saw_the_object_whole() -> None:
    # Tile 0 cut the person at x=640 and scored it higher; tile 1 saw all of it.
    found = _detections([(560, 100, 640, 300, 0.9, 0), (560, 98, 700, 301, 0.7, 0)])
    merged = merge_tiles(found, np.array([0, 1]), np.array([True, False]), 0.5)
    np.testing.assert_allclose(merged.xyxy, [[560, 98, 700, 301]])
    np.testing.assert_allclose(merged.confidence, [0.9])


def test_a_partial_view_is_spurious_only_where_another_tile_saw_past_the_cut() -> None:
    windows = np.array([[0, 0, 640, 640], [512, 0, 1152, 640]], np.int32)
    xyxy = np.array(
        [
            [600, 100, 640, 200],  # cut by tile 0's right edge, inside tile 1: tile 1 saw past
            [400, 100, 640, 200],  # cut too, but it starts left of tile 1
            [100, 100, 200, 200],  # whole
        ],
        np.float32,
    )
    sides = cut_sides(xyxy, windows[0], (640, 1152), 3.0)
    assert sides.tolist() == [[False, False, True, False]] * 2 + [[False] * 4]
    spurious = seen_better(xyxy, sides, np.zeros(3, np.intp), windows, 3.0)
    assert spurious.tolist() == [True, False, False]
    # Unconfirmed, the spurious box goes; matched by a box of the tile that saw past, it stays.
    found = _detections([(*box, 0.8, 0) for box in xyxy.tolist()])
    merged = merge_tiles(found, np.zeros(3, np.intp), sides.any(axis=1), 0.5, spurious=spurious)
    np.testing.assert_allclose(merged.xyxy[:, 0], [400, 100])
    confirmed = _detections([(*xyxy[0], 0.8, 0), (600, 90, 680, 210, 0.6, 0)])
    merged = merge_tiles(
        confirmed, np.array([0, 1]), np.array([True, False]), 0.5, spurious=np.array([True, False])
    )
    np.testing.assert_allclose(merged.xyxy, [[600, 90, 680, 210]])


def test_merge_keeps_the_better_box_of_an_object_two_tiles_saw_whole() -> None:
    found = _detections([(530, 400, 600, 500, 0.7, 0), (531, 402, 601, 499, 0.9, 0)])
    merged = merge_tiles(found, np.array([0, 1]), np.array([False, False]), 0.5)
    np.testing.assert_allclose(merged.xyxy, [[531, 402, 601, 499]])  # not grown: neither was cut


@pytest.mark.parametrize(
    ("tiles", "classes", "cut", "kept"),
    [
        ([0, 0], [0, 0], [True, True], 2),  # one tile: its own NMS already kept both
        ([0, 1], [0, 1], [True, True], 2),  # different classes
        ([0, 1], [0, 0], [False, False], 2),  # neither cut, IoU 0.3: two people side by side
        ([0, 1], [0, 0], [True, False], 1),  # one cut: the small box is inside the other
    ],
)
def test_merge_only_joins_boxes_of_different_tiles_and_one_class(tiles, classes, cut, kept):
    # A 100×100 box and a 30×100 box inside it: IoU 0.3, intersection over the smaller 1.0.
    found = _detections([(0, 0, 100, 100, 0.9, classes[0]), (70, 0, 100, 100, 0.8, classes[1])])
    merged = merge_tiles(found, np.array(tiles), np.array(cut), 0.5)
    assert len(merged) == kept


# -- the task, through ONNX Runtime ------------------------------------------------------------


def _row_detector(path: Path, tables: np.ndarray, size: int) -> Path:
    """An ONNX 'detector' with a dynamic batch whose row k outputs the fixed table `tables[k]`
    ([6, N]: cx, cy, w, h, class 0 score, class 1 score, input pixels): a stand-in whose
    per-tile answers are known. The input still flows into the graph (times 0)."""
    onnx = pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper, numpy_helper

    nodes = [
        helper.make_node("ReduceMean", ["images"], ["mean"], axes=[1, 2, 3], keepdims=1),
        helper.make_node("Mul", ["mean", "zero"], ["nothing"]),
        helper.make_node("Squeeze", ["nothing", "last"], ["column"]),  # [B, 1, 1]
        helper.make_node("Add", ["table", "column"], ["output0"]),
    ]
    graph = helper.make_graph(
        nodes,
        "rows",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, ["batch", 3, size, size])],
        [helper.make_tensor_value_info("output0", TensorProto.FLOAT, ["batch", 6, None])],
        [
            numpy_helper.from_array(tables.astype(np.float32), "table"),
            numpy_helper.from_array(np.zeros((1,), np.float32), "zero"),
            numpy_helper.from_array(np.array([3], np.int64), "last"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    for key, value in {"names": "{0: 'person', 1: 'car'}", "imgsz": f"[{size}, {size}]"}.items():
        entry = model.metadata_props.add()
        entry.key, entry.value = key, value
    onnx.save(model, str(path))
    return path


def _table(boxes: list[tuple[float, float, float, float, float]], anchors: int = 4) -> np.ndarray:
    """xyxy + class-0 score rows → one [6, anchors] head output in cx, cy, w, h."""
    table = np.zeros((anchors, 6), np.float32)
    for i, (x1, y1, x2, y2, score) in enumerate(boxes):
        table[i] = ((x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1, score, 0)
    return table.T


def test_tiles_run_as_one_batch_and_come_back_merged_in_source_pixels(tmp_path: Path) -> None:
    # A 1152×640 frame in two 640 tiles (x 0-640 and 512-1152), each answering in its own pixels:
    # a person cut by the seam (400-800 in source pixels), one seen whole by both tiles
    # (530-600), one only tile 1 sees (900-1000), and a partial view at tile 0's right edge
    # (600-640) that tile 1, seeing past that edge, does not confirm.
    tables = np.stack(
        [
            _table(
                [(400, 100, 640, 300, 0.8), (530, 400, 600, 500, 0.7), (600, 550, 640, 620, 0.9)]
            ),
            _table([(0, 100, 288, 300, 0.9), (18, 400, 88, 500, 0.6), (388, 50, 488, 90, 0.5)]),
        ]
    )
    model = _row_detector(tmp_path / "rows.onnx", tables, 640)
    tiling = TileOptions(tile=640, overlap=0.2, full_frame=False)
    task = TiledDetectTask(model, "onnxruntime", tiling=tiling, source_hw=(640, 1152))
    try:
        assert (task.rows, task.batch, task.detector.batch) == (2, 1, 2)
        buffer = task.new_buffer()
        assert buffer.shape == (2, 3, 640, 640)
        grid = task.prepare(np.zeros((640, 1152, 3), np.uint8), buffer, None)
        output = task.infer([buffer])
        assert output.shape == (1, 2, 6, 4)  # one entry per frame, holding its two rows
        found = task.decode(output[0], grid)
    finally:
        task.close()
    order = np.argsort(found.xyxy[:, 0])
    np.testing.assert_allclose(
        found.xyxy[order],
        [[400, 100, 800, 300], [530, 400, 600, 500], [900, 50, 1000, 90]],
        atol=1e-3,
    )
    np.testing.assert_allclose(found.confidence[order], [0.9, 0.7, 0.5], atol=1e-6)


def test_task_with_the_null_backend_batches_frames_and_refuses_larger_ones(
    tiny_model: Path, tmp_path: Path
) -> None:
    options = BackendOptions(batch=2, cache_dir=tmp_path)
    tiling = TileOptions(tile=64, overlap=0.25)
    task = TiledDetectTask(tiny_model, "null", options, tiling=tiling, source_hw=(64, 112))
    try:
        assert (task.rows, task.batch, task.detector.batch) == (3, 2, 6)  # 2 tiles + full frame
        assert task.describe()["tiling"]["rows_per_call"] == 6
        buffers = [task.new_buffer() for _ in range(2)]
        grids = [task.prepare(np.zeros((64, 112, 3), np.uint8), b, None) for b in buffers]
        output = task.infer(buffers)
        assert output.shape[:2] == (2, 3)
        assert len(task.decode(output[1], grids[1])) == 0  # the null backend's zeros
        # A smaller frame has fewer tiles and still fits the buffer.
        assert len(task.prepare(np.zeros((64, 64, 3), np.uint8), buffers[0], grids[0])) == 1
        with pytest.raises(ConfigError, match=r"a 200x64 frame needs 5 input rows .* hold 3"):
            task.prepare(np.zeros((64, 200, 3), np.uint8), buffers[0], None)
    finally:
        task.close()
    with pytest.raises(
        ConfigError, match=r"expected a source size \(height, width\), got \(0, 9\)"
    ):
        TiledDetectTask(tiny_model, "null", tiling=tiling, source_hw=(0, 9))


# -- the real detector -------------------------------------------------------------------------


def _iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    low, high = (
        np.maximum(a[:, None, :2], b[None, :, :2]),
        np.minimum(a[:, None, 2:], b[None, :, 2:]),
    )
    inter = np.prod(np.clip(high - low, 0, None), axis=2)
    area_a = np.prod(a[:, 2:] - a[:, :2], axis=1)[:, None]
    area_b = np.prod(b[:, 2:] - b[:, :2], axis=1)[None, :]
    return inter / (area_a + area_b - inter)


def test_demo_detector_on_tiles_finds_the_full_frame_people(
    demo_model: Path, demo_video: Path, tmp_path: Path
) -> None:
    import av

    from visionrt.tasks.detect import DetectTask

    with av.open(str(demo_video)) as container:
        image = next(container.decode(video=0)).to_ndarray(format="bgr24")
    # vtest.avi's 768×576 in 640 tiles: two tiles and the full frame, three rows in one call.
    options = BackendOptions(cache_dir=tmp_path)
    tiled = TiledDetectTask(demo_model, "onnxruntime", options, source_hw=(576, 768))
    plain = DetectTask(demo_model, "onnxruntime", options)
    try:
        buffer, row = tiled.new_buffer(), plain.new_buffer()
        grid, box = tiled.prepare(image, buffer, None), plain.prepare(image, row, None)
        found = tiled.decode(tiled.infer([buffer])[0], grid)
        reference = plain.decode(plain.infer([row])[0], box)
    finally:
        tiled.close()
        plain.close()
    assert len(reference) >= 3  # vtest.avi has pedestrians in every frame
    assert (found.xyxy[:, 2] <= 768).all()
    assert (found.xyxy[:, 3] <= 576).all()
    matched = _iou(reference.xyxy, found.xyxy).max(axis=1) >= 0.5
    assert matched.mean() >= 0.9, f"{matched.sum()} of {len(reference)} full-frame people found"
    # The tiles' overlap saw some people twice; the merge left one box each.
    same = _iou(found.xyxy, found.xyxy)
    np.fill_diagonal(same, 0)
    assert same.max() <= 0.5


def test_pipeline_runs_tiles_and_accounts_every_frame(tiny_model: Path) -> None:
    """`pipeline_options(tile=…)` puts the tiled detector in the pipeline: one backend call of K
    rows per frame, every frame out, and the tiling in the run summary."""
    from visionrt import Pipeline

    pipeline = Pipeline(
        ["synthetic:200x150:5"],
        tiny_model,
        "null",
        BackendOptions(input_size=(64, 64)),
        options=pipeline_options(warmup=0, tile=96, tile_overlap=0.25),
    )
    calls: list[int] = []
    infer = pipeline.task.backend.infer

    def counting(inputs):  # type: ignore[no-untyped-def]
        calls.append(next(iter(inputs.values())).shape[0])
        return infer(inputs)

    pipeline.task.backend.infer = counting  # type: ignore[method-assign]
    summary = pipeline.run()
    pipeline.close()
    rows = tile_count((150, 200), TileOptions(96, 0.25))
    assert calls == [rows] * 5
    assert (summary.frames_in, summary.frames_out) == (5, 5)
    assert summary.backend["tiling"]["rows_per_frame"] == rows


def test_pipeline_tile_options_are_checked_with_the_flag_names(tiny_model: Path) -> None:

    with pytest.raises(ConfigError, match="--tile-overlap: expected a fraction"):
        pipeline_options(tile=640, tile_overlap=1.5)
