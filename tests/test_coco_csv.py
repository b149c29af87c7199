"""COCO results JSON and CSV per source (issue #20): `visionrt run --coco --csv` writes both per
source and they say what the JSONL says, row for row; the sinks' `.partial` contract (a failed
sink keeps the name, an incomplete COCO file still parses); the output names are checked."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import run_cli, write_tiny_detector

from visionrt import Pipeline, PipelineOptions
from visionrt.config import OutputOptions, RunConfig
from visionrt.errors import ConfigError, SinkError
from visionrt.pipeline.outputs import check_output_names
from visionrt.sinks import CocoSink, CsvSink, partial_path
from visionrt.sinks.table import COLUMNS
from visionrt.types import Detections, Frame, FrameResult, TrackedDetections

NAMES = ("person", "car")


@pytest.fixture(scope="module")
def two_box_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A person (32, 32) 20×10 and a car (10, 40) 8×8, in 64×64 input pixels, on every frame."""
    return write_tiny_detector(
        tmp_path_factory.mktemp("models") / "two.onnx",
        [(32, 32, 20, 10, 0.9, 0.0), (10, 40, 8, 8, 0.0, 0.7)],
    )


def _result(
    index: int,
    boxes: list[list[float]],
    source_id: int = 0,
    tracks: list[int] | None = None,
    distance: list[float] | None = None,
) -> FrameResult:
    detections = Detections(
        np.asarray(boxes, np.float32).reshape(-1, 4),
        np.linspace(0.9, 0.5, len(boxes), dtype=np.float32),
        (np.arange(len(boxes)) % 2).astype(np.int32),
    )
    tracked = None
    if tracks is not None:
        ids = np.asarray(tracks, np.int64)
        tracked = TrackedDetections(detections, ids, np.zeros(len(ids), np.bool_))
    frame = Frame(source_id, index, np.zeros((48, 64, 3), np.uint8), index / 25, 0.0)
    far = None if distance is None else np.asarray(distance, np.float32)
    return FrameResult(frame, detections, {}, NAMES, distance=far, tracks=tracked)


def _read_csv(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with path.open(encoding="utf-8", newline="") as file:
        reader = csv.DictReader(file)
        return list(reader.fieldnames or []), list(reader)


def test_run_writes_coco_and_csv_per_source_as_the_jsonl_says(
    two_box_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    code, err = run_cli(
        ["run", "a=synthetic:64x48:5", "b=synthetic:80x48:3", "-m", str(two_box_model),
         "--no-plan", "--no-video", "--track", "--coco", "--csv", "-o", str(out), "-q"],
        capsys,
    )  # fmt: skip
    assert code == 0, err
    written = sorted(p.name for p in out.iterdir() if not p.name.startswith("."))
    assert written == sorted(
        ["a.coco.json", "b.coco.json", "a.csv", "b.csv", "detections.jsonl", "summary.json"]
    )
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert {str(out / name) for name in ("a.coco.json", "b.csv")} <= set(summary["outputs"])
    lines = [json.loads(line) for line in (out / "detections.jsonl").read_text().splitlines()]
    for source, frames in (("a", 5), ("b", 3)):
        mine = [line for line in lines if line["source"] == source]
        assert len(mine) == frames
        expected = [(line, det) for line in mine for det in line["detections"]]
        assert len(expected) == 2 * frames  # both boxes on every frame

        coco = json.loads((out / f"{source}.coco.json").read_text(encoding="utf-8"))
        assert len(coco) == len(expected)  # one entry per detection
        for entry, (line, det) in zip(coco, expected, strict=True):
            x1, y1, x2, y2 = det["xyxy"]
            assert set(entry) == {"image_id", "category_id", "bbox", "score"}
            assert entry["image_id"] == line["frame"]
            assert entry["category_id"] == det["class_id"]
            assert entry["bbox"] == pytest.approx([x1, y1, x2 - x1, y2 - y1], abs=1e-6)
            assert entry["score"] == det["confidence"]

        header, rows = _read_csv(out / f"{source}.csv")
        assert header == list(COLUMNS)
        assert len(rows) == len(expected)  # one row per detection
        for row, (line, det) in zip(rows, expected, strict=True):
            assert int(row["frame"]) == line["frame"]
            assert float(row["timestamp"]) == line["timestamp"]
            assert (int(row["class_id"]), row["class_name"]) == (det["class_id"], det["class_name"])
            assert float(row["confidence"]) == det["confidence"]
            assert [float(row[k]) for k in ("x1", "y1", "x2", "y2")] == det["xyxy"]
            assert int(row["track_id"]) == det["track_id"]
            assert row["distance"] == ""  # no depth model


def test_rows_say_track_and_distance_only_where_there_are_some(tmp_path: Path) -> None:
    boxes = [[10.004, 20.5, 40.126, 60.0], [0.5, 1.25, 100.5, 51.25]]
    coco, table = CocoSink(tmp_path / "c.json"), CsvSink(tmp_path / "t.csv")
    for sink in (coco, table):
        sink.write(_result(0, boxes))
        sink.write(_result(1, boxes, tracks=[3, 7], distance=[2.345678, math.nan]))
        sink.write(_result(2, []))  # no detections: nothing, and no empty entry
        assert sink.close() == [sink.path]
    _, rows = _read_csv(tmp_path / "t.csv")
    assert [(r["frame"], r["track_id"], r["distance"]) for r in rows] == [
        ("0", "", ""), ("0", "", ""), ("1", "3", "2.3457"), ("1", "7", ""),
    ]  # fmt: skip
    assert [rows[0][k] for k in ("timestamp", "class_name", "x1", "x2")] == [
        "0.0", "person", "10.0", "40.13",
    ]  # fmt: skip
    entries = json.loads((tmp_path / "c.json").read_text(encoding="utf-8"))
    assert [e["image_id"] for e in entries] == [0, 0, 1, 1]
    assert entries[0] == {
        "image_id": 0, "category_id": 0, "bbox": [10.0, 20.5, 30.13, 39.5], "score": 0.9,
    }  # fmt: skip
    assert entries[1]["category_id"] == 1


def test_frames_without_detections_leave_an_empty_list_and_a_header(tmp_path: Path) -> None:
    coco, table = CocoSink(tmp_path / "c.json"), CsvSink(tmp_path / "t.csv")
    for sink in (coco, table):
        sink.write(_result(0, []))
        sink.close()
    assert json.loads((tmp_path / "c.json").read_text(encoding="utf-8")) == []
    assert _read_csv(tmp_path / "t.csv") == (list(COLUMNS), [])
    # No result at all: no file, as for the other sinks.
    for sink in (CocoSink(tmp_path / "none.json"), CsvSink(tmp_path / "none.csv")):
        assert sink.close() == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.json", "t.csv"]


@pytest.mark.parametrize("kind", ["coco", "csv"])
def test_an_incomplete_file_keeps_its_partial_name_and_what_was_written(
    kind: str, tmp_path: Path
) -> None:
    path = tmp_path / ("out.coco.json" if kind == "coco" else "out.csv")
    sink = CocoSink(path) if kind == "coco" else CsvSink(path)
    for index in range(3):
        sink.write(_result(index, [[1, 2, 3, 4]]))
    # Flushed per frame: a killed process leaves these rows (the COCO list then lacks its "]").
    text = partial_path(path).read_text(encoding="utf-8")
    assert text.count("\n") == (3 if kind == "coco" else 4)
    assert sink.close(complete=False) == [partial_path(path)]
    assert sink.close(complete=True) == []  # the first close decided
    assert not path.exists()
    if kind == "coco":  # closed in order, the partial list is whole JSON
        assert len(json.loads(partial_path(path).read_text(encoding="utf-8"))) == 3
    else:
        assert len(_read_csv(partial_path(path))[1]) == 3
    with pytest.raises(SinkError, match="write after close"):
        sink.write(_result(3, []))


@pytest.mark.parametrize("failing", ["coco", "csv"])
def test_a_sink_that_fails_in_a_run_keeps_its_partial_name(
    failing: str, two_box_model: Path, tmp_path: Path
) -> None:
    """A sink without a source_id given two sources fails; the run ends, the other sink (for
    source 0) is finalized with what it got, the failed one keeps its `.partial` name. The
    other sink goes first: which camera's frame leads is not fixed, and a sink after the
    failing one would never see source 0 when source 1 leads."""
    if failing == "coco":
        broken: Any = CocoSink(tmp_path / "all.coco.json")
        other: Any = CsvSink(tmp_path / "a.csv", source_id=0)
    else:
        broken, other = CsvSink(tmp_path / "all.csv"), CocoSink(tmp_path / "a.json", source_id=0)
    pipeline = Pipeline(
        ["a=synthetic:64x48:6", "b=synthetic:64x48:6"],
        two_box_model,
        "onnxruntime",
        options=PipelineOptions(warmup=0),
    )
    try:
        with pytest.raises(SinkError, match="holds one source, got source"):
            pipeline.run([other, broken])
    finally:
        pipeline.close()
    assert not broken.path.exists()
    assert partial_path(broken.path).exists()
    assert other.path.exists()
    assert not partial_path(other.path).exists()
    if failing == "coco":
        assert isinstance(json.loads(partial_path(broken.path).read_text()), list)


def test_write_errors_name_the_file(tmp_path: Path) -> None:
    for path in (tmp_path / "out.coco.json", tmp_path / "out.csv"):
        sink = CocoSink(path) if path.suffix == ".json" else CsvSink(path)
        partial_path(path).symlink_to("/dev/full")  # every write: ENOSPC
        with pytest.raises(SinkError, match=rf"cannot write .*{partial_path(path).name}: No space"):
            sink.write(_result(0, [[1, 2, 3, 4]]))
        with pytest.raises(SinkError, match=rf"cannot finalize .*{path.name}: No space"):
            sink.close(complete=True)
        assert not path.exists()


def test_output_names_are_checked_with_their_partial_names() -> None:
    """`a` writes a.csv under the name a.partial.csv until it is done: a source named
    `a.partial` would write there (a.coco.json's is a.coco.partial.json: no clash)."""
    sources = ("a=x.mp4", "/videos/a.partial.mp4")  # named after its file
    check_output_names(RunConfig(sources=sources, output=OutputOptions(video=False, coco=True)))
    config = RunConfig(sources=sources, output=OutputOptions(video=False, csv=True))
    with pytest.raises(ConfigError, match=r"'a' and 'a.partial' would both write a.partial.csv"):
        check_output_names(config)


def test_pycocotools_loads_the_results(tmp_path: Path) -> None:
    coco_module = pytest.importorskip(
        "pycocotools.coco", reason="pycocotools (visionrt[coco], `make test` installs it)"
    )
    sink = CocoSink(tmp_path / "r.json")
    for index in range(2):
        sink.write(_result(index, [[1, 2, 30, 40], [5, 5, 9, 9]]))
    sink.close()
    truth = coco_module.COCO()
    truth.dataset = {
        "images": [{"id": 0}, {"id": 1}],
        "categories": [{"id": 0, "name": "person"}, {"id": 1, "name": "car"}],
        "annotations": [],
    }
    truth.createIndex()
    results = truth.loadRes(str(tmp_path / "r.json"))
    assert len(results.getAnnIds()) == 4


def test_a_result_rebuilt_from_its_jsonl_line_writes_the_same_tables(tmp_path: Path) -> None:
    """What a cluster's driver does: MOT, COCO and CSV written from `FrameResult.from_json` of
    the JSONL lines are the files written from the results themselves (boxes with fractions
    of a pixel, tracks, a distance without depth, a frame with no boxes)."""
    from visionrt.sinks import SourceFiles, named_after

    results = [
        _result(0, [[10.004, 20.126, 30.555, 41.0049], [1.5, 2.25, 3.125, 4.0625]], 1, [3, 7],
                [2.5, math.nan]),
        _result(1, [], 1, [], []),
        _result(2, [[0.333, 0.666, 9.999, 12.345]], 1, [3], [1.23456]),
    ]  # fmt: skip
    folders = {"direct": results, "rebuilt": [
        FrameResult.from_json(r.to_json(), tracked=True) for r in results]}  # fmt: skip
    for folder, rows in folders.items():
        tables = SourceFiles(video=False, mot=True, coco=True, csv=True)
        sinks = [
            sink
            for i, name in enumerate(["x", "cam"])
            for sink in tables.sinks(named_after(tmp_path / folder, name), i, 0.0)
        ]
        for result in rows:
            for sink in sinks:
                sink.write(result)
        for sink in sinks:
            sink.close()
    written = sorted(p.name for p in (tmp_path / "direct").iterdir())
    assert written == ["cam.coco.json", "cam.csv", "cam.mot.txt"]
    for name in written:
        direct = (tmp_path / "direct" / name).read_text()
        assert (tmp_path / "rebuilt" / name).read_text() == direct, name
    mot = (tmp_path / "direct" / "cam.mot.txt").read_text().splitlines()
    # The JSONL's corners (10.0, 20.13)-(30.56, 41.0): the width is theirs, 20.56, not 20.55.
    assert mot[0] == "1,3,10.00,20.13,20.56,20.87,0.9000,-1,-1,-1"
