"""Tests of the live view: PreviewHub's rate cap, encoding, annotations and waiting; the MJPEG
parts; and the web page, driven by headless Chromium against fake endpoints."""

from __future__ import annotations

import re
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from importlib import resources
from pathlib import Path

import cv2
import numpy as np
import numpy.typing as npt
import pytest
from browser import dump_dom, find_chromium, live_view, screenshot, serve_in_thread
from conftest import HANG_SECONDS, until

from visionrt.errors import ConfigError
from visionrt.serve import preview as preview_module
from visionrt.serve.preview import BOUNDARY, Preview, PreviewHub, mjpeg_chunks
from visionrt.types import Detections, Frame, FrameResult

INDEX_HTML = resources.files("visionrt.serve").joinpath("static/index.html")
BOX_COLOR = np.array((56, 56, 255))  # BGR: annotate's colour for class 0 without tracks


class FakeClock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def make_result(
    name: str,
    index: int,
    image: npt.NDArray[np.uint8] | None = None,
    boxes: Sequence[tuple[float, float, float, float]] = (),
) -> FrameResult:
    if image is None:
        image = np.full((480, 640, 3), 100, np.uint8)
    count = len(boxes)
    detections = Detections(
        np.array(boxes, np.float32).reshape(count, 4),
        np.full((count,), 0.9, np.float32),
        np.zeros((count,), np.int32),
    )
    frame = Frame(0, index, image, index / 25, time.perf_counter(), name)
    return FrameResult(frame, detections, {}, class_names=("person",))


def decode(jpeg: bytes) -> npt.NDArray[np.uint8]:
    image = cv2.imdecode(np.frombuffer(jpeg, np.uint8), cv2.IMREAD_COLOR)
    assert image is not None, "preview is not a decodable JPEG"
    return image


def drained(hub: PreviewHub, names: tuple[str, ...], timeout: float = HANG_SECONDS) -> dict:
    """The hub's stats once every taken frame was encoded, replaced or failed."""
    deadline = time.monotonic() + timeout
    while True:
        stats = hub.stats()
        done = all(
            s["encoded"] + s["replaced"] + s["errors"] == s["offered"] - s["skipped"]
            for s in (stats[n] for n in names)
        )
        if done or time.monotonic() > deadline:
            return stats
        time.sleep(0.01)


class SteppingClock(FakeClock):
    """A clock that moves on by `step` seconds each time it is read: frames `step` apart."""

    def __init__(self, step: float) -> None:
        super().__init__()
        self.step = step

    def __call__(self) -> float:
        now = self.now
        self.now += self.step
        return now


def waiting(thread: threading.Thread) -> bool:
    """Whether `thread` is blocked in a `threading.Condition.wait` now (the hub's, here): from
    then on a notify reaches it."""
    frame = sys._current_frames().get(thread.ident or -1)
    while frame is not None:
        if frame.f_code is threading.Condition.wait.__code__:
            return True
        frame = frame.f_back
    return False


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def hub(clock: FakeClock) -> Iterator[PreviewHub]:
    with PreviewHub(rate=5.0, clock=clock) as live:
        yield live


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"rate": 0}, "rate"),
        ({"quality": 0}, "quality"),
        ({"quality": 101}, "quality"),
        ({"max_width": 0}, "max_width"),
    ],
)
def test_bad_options_are_config_errors(options: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        PreviewHub(**options)


def test_rate_cap_per_source(clock: FakeClock) -> None:
    names = ("cam0", "cam1")
    with PreviewHub(rate=4.0, clock=clock) as hub:
        # 128 frames per source over one second (steps of 1/128 s are exact in binary): one
        # frame is taken every 0.25 s, at 0, 0.25, 0.5 and 0.75.
        for step in range(128):
            clock.now = step / 128
            for name in names:
                hub.offer(make_result(name, step))
        stats = drained(hub, names)
    for name in names:
        assert stats[name]["offered"] == 128
        assert stats[name]["skipped"] == 124
        assert 1 <= stats[name]["encoded"] <= 4


def test_burst_gives_few_encodes(hub: PreviewHub, clock: FakeClock) -> None:
    for step in range(100):
        clock.now = step * 0.002  # 100 frames within 0.2 s at the default 5 per second
        hub.offer(make_result("cam0", step))
    stats = drained(hub, ("cam0",))["cam0"]
    assert stats["offered"] == 100
    assert stats["encoded"] <= 2
    assert stats["skipped"] >= 98


def test_an_offer_the_rate_cap_skips_copies_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """`offer` runs on the sink thread for every frame: one the rate cap skips costs two clock
    readings, no copy of its image; the hub's own thread draws and encodes. 512 frames of 1080p
    1/32 s apart at 4 previews a second: 64 taken, 64 images copied, none encoded by the caller."""
    copies: list[str] = []
    encoders: set[str] = set()

    class CountingNumpy:
        def __getattr__(self, name: str) -> object:
            return getattr(np, name)

        def array(self, *args: object, **kwargs: object) -> np.ndarray:
            copies.append(threading.current_thread().name)
            return np.array(*args, **kwargs)  # type: ignore[call-overload]

    encode = PreviewHub._encode

    def spied(self: PreviewHub, item: object) -> bytes:
        encoders.add(threading.current_thread().name)
        return encode(self, item)  # type: ignore[arg-type]

    monkeypatch.setattr(preview_module, "np", CountingNumpy())
    monkeypatch.setattr(PreviewHub, "_encode", spied)
    image = np.zeros((1080, 1920, 3), np.uint8)
    with PreviewHub(rate=4.0, clock=SteppingClock(1 / 32)) as hub:
        for index in range(512):
            hub.offer(make_result("cam0", index, image))
        stats = drained(hub, ("cam0",))["cam0"]
    assert (stats["offered"], stats["skipped"]) == (512, 448)
    assert stats["encoded"] + stats["replaced"] == 64
    me = threading.current_thread().name
    assert copies.count(me) == 64
    assert me not in encoders
    assert encoders == {"visionrt-preview"}


def test_preview_is_downsized_and_annotated(hub: PreviewHub) -> None:
    image = np.full((720, 1280, 3), 100, np.uint8)
    hub.offer(make_result("cam0", 7, image, [(200, 200, 600, 500)]))
    preview = hub.wait("cam0", 0, timeout=HANG_SECONDS)
    assert isinstance(preview, Preview)
    assert (preview.frame, preview.seq) == (7, 1)
    assert preview.timestamp == pytest.approx(7 / 25)
    picture = decode(preview.jpeg)
    assert picture.shape == (360, 640, 3)
    # The box lands at (100, 100)-(300, 250) in the half-size preview: its left edge, halfway
    # down, has the box colour (JPEG blurs it a little); far from it the frame is untouched.
    edge = picture[170:180, 99:102].reshape(-1, 3).astype(int)
    assert np.abs(edge - BOX_COLOR).sum(axis=1).min() < 90
    assert np.abs(picture[300:340, 450:600].astype(int) - 100).max() < 8


def test_small_frames_keep_their_size(hub: PreviewHub) -> None:
    hub.offer(make_result("cam0", 0, np.full((120, 160, 3), 100, np.uint8)))
    preview = hub.wait("cam0", 0, timeout=HANG_SECONDS)
    assert preview is not None
    assert decode(preview.jpeg).shape == (120, 160, 3)


def test_image_is_copied_before_offer_returns(hub: PreviewHub) -> None:
    image = np.full((480, 640, 3), 50, np.uint8)
    hub.offer(make_result("cam0", 0, image))
    image[:] = 255  # the pipeline reusing the buffer
    preview = hub.wait("cam0", 0, timeout=HANG_SECONDS)
    assert preview is not None
    assert abs(float(decode(preview.jpeg).mean()) - 50) < 3


def test_sources_have_their_own_previews_and_seqs(hub: PreviewHub, clock: FakeClock) -> None:
    for step in range(3):
        clock.now = step * 1.0
        hub.offer(make_result("cam0", 10 + step))
        hub.wait("cam0", step, timeout=HANG_SECONDS)
    hub.offer(make_result("cam1", 99))
    cam1 = hub.wait("cam1", 0, timeout=HANG_SECONDS)
    cam0 = hub.latest("cam0")
    assert cam0 is not None
    assert cam1 is not None
    assert (cam0.frame, cam0.seq) == (12, 3)
    assert (cam1.frame, cam1.seq) == (99, 1)
    assert hub.latest("nope") is None


def test_wait_wakes_on_a_new_preview(hub: PreviewHub, clock: FakeClock) -> None:
    got: list[Preview | None] = []
    waiter = threading.Thread(
        target=lambda: got.append(hub.wait("cam0", 0, timeout=HANG_SECONDS)), daemon=True
    )
    waiter.start()
    until(lambda: waiting(waiter), "waited")
    hub.offer(make_result("cam0", 5))
    waiter.join(HANG_SECONDS)
    assert len(got) == 1
    assert got[0] is not None
    assert got[0].frame == 5
    assert hub.wait("cam0", 1, timeout=0.05) is None  # nothing newer than seq 1: times out


@pytest.mark.parametrize("end", ["remove", "close"])
def test_waiters_return_none_when_the_source_ends(hub: PreviewHub, end: str) -> None:
    hub.offer(make_result("cam0", 0))
    assert hub.wait("cam0", 0, timeout=HANG_SECONDS) is not None
    got: list[Preview | None] = []
    # Its own timeout outlasts the guard's: only the source's end can let it return in time.
    waiter = threading.Thread(
        target=lambda: got.append(hub.wait("cam0", 1, timeout=2 * HANG_SECONDS)), daemon=True
    )
    waiter.start()
    until(lambda: waiting(waiter), "waited")
    if end == "remove":
        hub.remove("cam0")
    else:
        hub.close()
    waiter.join(HANG_SECONDS)
    assert not waiter.is_alive(), "the waiter waited out its timeout"
    assert got == [None]
    assert hub.latest("cam0") is None or end == "close"
    if end == "remove":
        assert "cam0" not in hub.stats()


def test_a_failed_encode_is_counted_and_the_thread_lives_on(
    hub: PreviewHub, clock: FakeClock
) -> None:
    hub.offer(make_result("cam0", 0, np.zeros((0, 0, 3), np.uint8)))
    assert drained(hub, ("cam0",))["cam0"]["errors"] == 1
    clock.now = 1.0
    hub.offer(make_result("cam0", 1))
    preview = hub.wait("cam0", 0, timeout=HANG_SECONDS)
    assert preview is not None
    assert preview.frame == 1


def parse_part(chunk: bytes) -> bytes:
    """The JPEG of one multipart part, after checking its framing."""
    head, _, rest = chunk.partition(b"\r\n\r\n")
    lines = head.decode("ascii").split("\r\n")
    assert lines[0] == f"--{BOUNDARY}"
    headers = dict(line.split(": ", 1) for line in lines[1:])
    assert headers["Content-Type"] == "image/jpeg"
    assert rest.endswith(b"\r\n")
    jpeg = rest[:-2]
    assert int(headers["Content-Length"]) == len(jpeg)
    return jpeg


def test_mjpeg_chunks_follow_previews_and_end_on_remove(hub: PreviewHub, clock: FakeClock) -> None:
    hub.offer(make_result("cam0", 0))
    hub.wait("cam0", 0, timeout=HANG_SECONDS)
    chunks = mjpeg_chunks(hub, "cam0", poll=0.05)
    assert decode(parse_part(next(chunks))).shape == (480, 640, 3)
    clock.now = 1.0
    hub.offer(make_result("cam0", 1))
    second = parse_part(next(chunks))
    latest = hub.latest("cam0")
    assert latest is not None
    assert (second, latest.seq) == (latest.jpeg, 2)
    threading.Timer(0.1, hub.remove, args=("cam0",)).start()
    assert list(chunks) == []


def test_mjpeg_chunks_end_on_stop_and_close(hub: PreviewHub) -> None:
    stop = threading.Event()
    stop.set()
    assert list(mjpeg_chunks(hub, "cam0", stop, poll=0.05)) == []
    threading.Timer(0.1, hub.close).start()
    assert list(mjpeg_chunks(hub, "cam0", poll=0.05)) == []


# -- the web page ---------------------------------------------------------------------------


def test_page_is_self_contained_and_small() -> None:
    page = INDEX_HTML.read_text(encoding="utf-8")
    assert len(page.splitlines()) < 250
    assert not re.search(r"(src|href)\s*=\s*[\"']?(https?:)?//", page), "external resource"
    assert "@import" not in page
    assert "url(http" not in page
    assert "innerHTML" not in page, "data must go in via textContent"


TOKEN = "T0k3n"
FAKE_SOURCES = ("cam0", "cam 1")  # a space: names must survive URL-encoding in the page


def fake_jpeg() -> bytes:
    """A frame no part of the page looks like: a magenta half and a gradient half."""
    image = np.zeros((360, 640, 3), np.uint8)
    image[:, :320] = (255, 0, 255)
    image[:, 320:] = np.linspace(0, 255, 320, dtype=np.uint8)[None, :, None]
    return cv2.imencode(".jpg", image)[1].tobytes()


def fake_app() -> object:
    """index.html and fake /sources, preview.jpg and /events, in the service's shapes; every
    call to preview.jpg serves the next frame index, as a live source would."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import HTMLResponse, JSONResponse, Response
    from starlette.routing import Route

    jpeg = fake_jpeg()
    calls = dict.fromkeys(FAKE_SOURCES, 0)

    def authorized(request: Request) -> bool:  # the page sends its URL's token as a header
        return request.headers.get("authorization") == f"Bearer {TOKEN}"

    async def index(request: Request) -> Response:
        return HTMLResponse(INDEX_HTML.read_text(encoding="utf-8"))

    async def sources(request: Request) -> Response:
        if not authorized(request):
            return JSONResponse({"error": "token required"}, status_code=401)
        rows = [
            {
                "name": name,
                "uri": f"rtsp://camera/{index}",
                "tasks": ["detect"],
                "state": "running",
                "fps": 9.8,
                "latency_ms": {"p50": 40.1, "p95": 61.0},
                "frames_in": 1000,
                "frames_out": 998,
                "drops": 2,
                "reconnects": index,
                "error": "",
            }
            for index, name in enumerate(FAKE_SOURCES)
        ]
        return JSONResponse(rows)

    async def preview(request: Request) -> Response:
        name = request.path_params["name"]
        if not authorized(request):
            return Response(status_code=401)
        if name not in calls:
            return Response(status_code=404)
        calls[name] += 1
        headers = {"X-Frame-Index": str(calls[name] * 3), "X-Preview-Seq": str(calls[name])}
        return Response(jpeg, media_type="image/jpeg", headers=headers)

    async def events(request: Request) -> Response:
        if not authorized(request):
            return JSONResponse({"error": "token required"}, status_code=401)
        row = {"time": 1.7e9, "source": "cam0", "kind": "zone", "action": "enter"}
        return JSONResponse([{**row, "name": "<b>door</b>", "track_id": 3, "class_name": "person"}])

    return Starlette(
        routes=[
            Route("/", index),
            Route("/sources", sources),
            Route("/sources/{name}/preview.jpg", preview),
            Route("/events", events),
        ]
    )


@pytest.fixture(scope="module")
def fake_server() -> Iterator[str]:
    with serve_in_thread(fake_app()) as url:
        yield url


needs_chromium = pytest.mark.skipif(
    find_chromium() is None, reason="no chromium on PATH (apt-get install chromium)"
)


@pytest.mark.browser
@needs_chromium
def test_live_view_shows_each_camera_and_its_frames(fake_server: str) -> None:
    dom = dump_dom(f"{fake_server}?token={TOKEN}", budget_ms=4000)
    page = live_view(dom)
    assert sorted(card["data-name"] or "" for card in page.cards) == sorted(FAKE_SOURCES)
    for card in page.cards:
        loaded = int(card["data-frames-loaded"] or 0)
        assert loaded >= 2, f"{card['data-name']}: {loaded} previews shown"
        assert int(card["data-last-frame"] or 0) > int(card["data-first-frame"] or 0)
    assert page.status == "2 cameras"
    for shown in ("9.8 fps", "p95 61 ms", "reconnects 1"):
        assert shown in dom
    assert "&lt;b&gt;door&lt;/b&gt;" in dom, "event names must be shown as text"
    assert "#3 person" in dom


@pytest.mark.browser
@needs_chromium
def test_live_view_without_token_says_so(fake_server: str) -> None:
    page = live_view(dump_dom(fake_server, budget_ms=2000))
    assert page.status == "token required"
    assert page.cards == []


@pytest.mark.browser
@needs_chromium
def test_live_view_screenshot_shows_the_previews(fake_server: str, tmp_path: Path) -> None:
    path = screenshot(f"{fake_server}?token={TOKEN}", tmp_path / "view.png", budget_ms=4000)
    picture = cv2.imread(str(path))
    assert picture is not None
    assert picture.shape[:2] == (800, 1280)
    assert float(picture.std()) > 20, "blank screenshot"
    magenta = np.abs(picture.astype(int) - (255, 0, 255)).sum(axis=2) < 60
    # Two cards of about 600x340 pixels each show a half-magenta preview.
    assert magenta.sum() > 2 * 10_000, f"only {magenta.sum()} preview pixels on screen"


@pytest.mark.browser
@needs_chromium
def test_live_view_without_a_server_says_disconnected() -> None:
    # From file:// every API fetch fails as a network error would.
    page = live_view(dump_dom(Path(str(INDEX_HTML)).resolve().as_uri(), budget_ms=2000))
    assert page.status == "disconnected, retrying"
