"""The live view of a real `visionrt serve` service (issue #20) in headless Chromium: one card per
camera with its previews advancing, a screenshot that shows them, and the token."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import cv2
import numpy as np
import pytest
from browser import dump_dom, find_chromium, live_view, screenshot
from conftest import write_video
from test_serve import Served

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        find_chromium() is None, reason="no chromium on PATH (apt-get install chromium)"
    ),
]

SQUARE_BGR = (40, 200, 240)  # write_video's moving square


def two_cameras(folder: Path, model: Path, token: str = "") -> Served:
    media = folder / "media"
    media.mkdir(parents=True)
    write_video(media / "a.mp4", frames=40)
    write_video(media / "b.mp4", frames=40, width=160, height=120)
    return Served(folder, model, [f"a={media / 'a.mp4'}", f"b={media / 'b.mp4'}"], token=token)


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> Iterator[Served]:
    served = two_cameras(tmp_path_factory.mktemp("plain"), tiny_model)
    yield served
    served.stop()


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> Iterator[Served]:
    served = two_cameras(tmp_path_factory.mktemp("guarded"), tiny_model, token="s3cret")
    yield served
    served.stop()


def assert_cards_advance(url: str) -> None:
    page = live_view(dump_dom(url, budget_ms=4000))
    assert page.status == "2 cameras", page
    assert sorted(card["data-name"] or "" for card in page.cards) == ["a", "b"]
    for card in page.cards:
        loaded = int(card["data-frames-loaded"] or 0)
        assert loaded >= 2, f"{card['data-name']}: {loaded} previews shown"
        first, last = int(card["data-first-frame"] or 0), int(card["data-last-frame"] or 0)
        assert last > first, f"{card['data-name']}: frames {first} → {last}"


def test_the_live_view_shows_each_camera_with_its_frames_advancing(plain: Served) -> None:
    assert_cards_advance(plain.url + "/")


def test_the_screenshot_shows_the_previews(plain: Served, tmp_path: Path) -> None:
    path = screenshot(plain.url + "/", tmp_path / "view.png", budget_ms=4000)
    picture = cv2.imread(str(path))
    assert picture is not None
    assert float(picture.std()) > 10, "blank screenshot"
    # Each card's preview shows its video's moving square (16×16 pixels of a 128- or 160-wide
    # video, drawn about twice as large on the card): two yellow blobs.
    square = (np.abs(picture.astype(int) - SQUARE_BGR).sum(axis=2) < 90).astype(np.uint8)
    count, _, stats, _ = cv2.connectedComponentsWithStats(square)
    blobs = [int(area) for area in stats[1:count, cv2.CC_STAT_AREA] if area >= 150]
    assert len(blobs) == 2, f"the videos' squares on screen: {blobs} pixels"


def test_the_live_view_asks_for_the_token(guarded: Served) -> None:
    assert_cards_advance(guarded.url + "/?token=s3cret")
    # The page itself is behind the token: without it the browser shows the 401's message.
    for url in (guarded.url + "/", guarded.url + "/?token=wrong"):
        dom = dump_dom(url, budget_ms=2000)
        assert "token required" in dom, dom[:500]
        assert live_view(dom).cards == []
