"""The fixed-shape device decode a CUDA graph holds (postprocess.device_table) against the exact
device decode (itself held to the host's): the same rows wherever the table says it is exact,
and the images it cannot hold are named, then decoded the exact way by the task."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from test_device_decode import OPTIONS, crowded, letterboxes  # noqa: E402

from visionrt import BackendOptions, Pipeline, SourceOptions  # noqa: E402
from visionrt.postprocess.device import decode_batch_device  # noqa: E402
from visionrt.postprocess.device_table import TableDecoder, geometry_rows, read_table  # noqa: E402
from visionrt.postprocess.yolo import HeadLayout, PostprocessOptions  # noqa: E402

pytestmark = pytest.mark.torch


def table_rows(
    output: np.ndarray, layout: HeadLayout, options: PostprocessOptions, top: int, passes: int
) -> tuple[list[np.ndarray | None], list[np.ndarray]]:
    boxes = letterboxes(len(output), 1)
    decoder = TableDecoder(layout, options, top=top, passes=passes)
    decoder.prepare(torch.device("cpu"))
    geometry = {"geometry": torch.from_numpy(geometry_rows(boxes))}
    table, raw = decoder([torch.from_numpy(output)], geometry)
    assert raw.shape[0] == len(output)
    exact = decode_batch_device(torch.from_numpy(output), layout, boxes, options)
    return read_table(table.numpy(), table.shape[1] - 1), exact


@pytest.mark.parametrize("layout", list(HeadLayout))
@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: f"conf{o.conf}-iou{o.iou}")
def test_the_table_holds_the_exact_rows(layout: HeadLayout, options: PostprocessOptions) -> None:
    anchors = 300 if layout is HeadLayout.END2END else 600
    output = crowded(layout, 3, anchors, seed=anchors + 1)
    rows, exact = table_rows(output, layout, options, top=1024, passes=40)
    for got, want in zip(rows, exact, strict=True):
        assert got is not None  # room for every candidate, passes enough to settle
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, atol=1e-4)


def test_an_image_whose_candidates_overflow_the_table_is_named() -> None:
    output = crowded(HeadLayout.ANCHOR_FREE, 2, 600, seed=3)
    rows, _ = table_rows(output, HeadLayout.ANCHOR_FREE, PostprocessOptions(conf=0.05), 8, 40)
    assert [r is None for r in rows] == [True, True]  # hundreds of candidates, room for 8


def test_an_image_whose_nms_has_not_settled_is_named() -> None:
    output = crowded(HeadLayout.ANCHOR_FREE, 2, 600, seed=3)
    options = PostprocessOptions(conf=0.05)
    rows, exact = table_rows(output, HeadLayout.ANCHOR_FREE, options, top=1024, passes=0)
    assert [r is None for r in rows] == [True, True]  # no pass: nothing is settled
    rows, _ = table_rows(output, HeadLayout.ANCHOR_FREE, options, top=1024, passes=1)
    assert [r is None for r in rows] == [True, False]  # the first image's chains are longer
    settled, _ = table_rows(output, HeadLayout.ANCHOR_FREE, options, top=1024, passes=40)
    assert all(r is not None for r in settled)
    assert [len(r) for r in settled] == [len(e) for e in exact]  # type: ignore[arg-type]


def test_a_table_with_no_candidates_is_exact_and_empty() -> None:
    output = crowded(HeadLayout.ANCHOR_FREE, 2, 100, seed=4)
    rows, _ = table_rows(output, HeadLayout.ANCHOR_FREE, PostprocessOptions(conf=1.0), 64, 4)
    assert [r.shape for r in rows] == [(0, 6), (0, 6)]  # type: ignore[union-attr]


@pytest.mark.slow
def test_images_the_table_cannot_hold_are_decoded_the_exact_way(
    demo_model: Path, demo_video: Path
) -> None:
    def run(top: int) -> tuple[list, int]:
        options = BackendOptions(batch=2, settings={"input": "frames"})
        pipeline = Pipeline(
            [str(demo_video)], demo_model, "torch", options,
            source_options=SourceOptions(max_frames=4), plan=False,
        )  # fmt: skip
        try:
            pipeline.task.device.table.top = top
            found = [r.detections for r in pipeline]
            return found, pipeline.task.device.exact_rows
        finally:
            pipeline.close()

    table, exact_rows = run(1024)
    assert exact_rows == 0
    fallback, exact_rows = run(2)  # the demo frames have a dozen candidates: none fits
    assert exact_rows == 4  # every frame (the warm-up's grey frames have no candidates)
    for got, want in zip(fallback, table, strict=True):
        np.testing.assert_allclose(got.xyxy, want.xyxy, atol=1e-4)
        np.testing.assert_array_equal(got.class_id, want.class_id)
