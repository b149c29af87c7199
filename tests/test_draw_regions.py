"""The overlay of motion gating (`--set output.draw_regions=true`): moved boxes and detector
windows drawn thin, in their own colours, under the detections; off by default."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import numpy.typing as npt
import pytest

from visionrt.config import load_config
from visionrt.pipeline.outputs import make_sinks
from visionrt.sinks import video
from visionrt.sinks.video import MOTION_COLOR, REGION_COLOR, VideoSink, annotate
from visionrt.types import Detections, Frame, FrameResult

REGION = [20, 30, 120, 110]  # x1, y1, x2, y2
MOTION = [60, 50, 90, 80]
PERSON = [40, 20, 100, 140]  # a detection whose sides cross the region's top and bottom


def boxes(*rows: list[int]) -> npt.NDArray[np.int32]:
    return np.array(rows, np.int32).reshape(-1, 4)


def person() -> Detections:
    return Detections(
        np.array([PERSON], np.float32), np.array([0.9], np.float32), np.array([0], np.int32)
    )


def colored(canvas: npt.NDArray[np.uint8], color: tuple[int, int, int]) -> npt.NDArray[np.bool_]:
    return (canvas == np.array(color, np.uint8)).all(axis=2)


def outline(box: list[int], shape: tuple[int, int]) -> npt.NDArray[np.bool_]:
    """The one-pixel outline of an x1, y1, x2, y2 box (both ends included, as OpenCV draws)."""
    x1, y1, x2, y2 = box
    mask = np.zeros(shape, bool)
    mask[y1 : y2 + 1, [x1, x2]] = True
    mask[[y1, y2], x1 : x2 + 1] = True
    return mask


def test_motion_boxes_and_regions_are_outlined_in_their_own_colours() -> None:
    blank = np.zeros((160, 200, 3), np.uint8)
    canvas = annotate(
        blank, Detections.empty(), (), motion_boxes=boxes(MOTION), regions=boxes(REGION)
    )
    assert np.array_equal(colored(canvas, REGION_COLOR), outline(REGION, blank.shape[:2]))
    assert np.array_equal(colored(canvas, MOTION_COLOR), outline(MOTION, blank.shape[:2]))
    assert REGION_COLOR != MOTION_COLOR
    assert not ({REGION_COLOR, MOTION_COLOR} & set(video._PALETTE))  # not a detection's colour
    assert not blank.any()  # drawn on a copy


def test_detections_are_drawn_over_the_regions() -> None:
    blank = np.zeros((160, 200, 3), np.uint8)
    canvas = annotate(blank, person(), ("person",), regions=boxes(REGION))
    region, drawn = outline(REGION, blank.shape[:2]), colored(canvas, REGION_COLOR)
    assert not (drawn & ~region).any()
    hidden = region & ~drawn
    assert hidden.any()  # the boxes cross
    assert colored(canvas, video._PALETTE[0])[hidden].all()  # and there the detection shows


def test_no_boxes_draws_only_the_detections() -> None:
    blank = np.zeros((160, 200, 3), np.uint8)
    plain = annotate(blank, person(), ("person",))
    none = annotate(blank, person(), ("person",), motion_boxes=None, regions=boxes())
    assert np.array_equal(plain, none)


@pytest.mark.parametrize("draw", [True, False])
def test_the_video_sink_draws_them_only_when_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, draw: bool
) -> None:
    drawn: list[npt.NDArray[np.uint8]] = []

    def keep(*args, **kwargs):  # the canvas, before lossy encoding blurs one-pixel lines
        drawn.append(annotate(*args, **kwargs))
        return drawn[-1]

    monkeypatch.setattr(video, "annotate", keep)
    image = np.zeros((160, 200, 3), np.uint8)
    frame = Frame(source_id=0, index=0, pixels=image, timestamp=0.0, captured_at=0.0)
    result = FrameResult(
        frame,
        person(),
        {},
        ("person",),
        processed="regions: 1",
        motion_boxes=boxes(MOTION),
        regions=boxes(REGION),
    )
    sink = VideoSink(tmp_path / "out.mp4", 25.0, draw_regions=draw)
    sink.write(result)
    assert sink.close() == [tmp_path / "out.mp4"]
    region, motion = outline(REGION, image.shape[:2]), outline(MOTION, image.shape[:2])
    assert bool(colored(drawn[0], REGION_COLOR)[region].any()) == draw
    assert bool(colored(drawn[0], MOTION_COLOR)[motion].all()) == draw
    assert not colored(drawn[0], REGION_COLOR)[~region].any()


@pytest.mark.parametrize(
    ("override", "expected"), [([], False), (["output.draw_regions=true"], True)]
)
def test_the_key_reaches_the_video_sinks(
    tmp_path: Path, override: list[str], expected: bool
) -> None:
    config = load_config(overrides=[f"output.dir={tmp_path}", "output.jsonl=false", *override])
    pipeline = SimpleNamespace(names=["cam0", "cam1"], sources=[SimpleNamespace(fps=25.0)] * 2)
    sinks = make_sinks(config, pipeline)  # type: ignore[arg-type]
    assert [type(sink) for sink in sinks] == [VideoSink, VideoSink]
    assert [sink.draw_regions for sink in sinks] == [expected, expected]  # type: ignore[attr-defined]
