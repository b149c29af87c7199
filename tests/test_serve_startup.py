"""Issue #47: `visionrt serve` starts whatever cameras are down. A camera or stream that cannot
be reached at start-up is left out of the pipeline and reconnected as one that drops later: down
(its error says unreachable) while it retries with the source options' backoff, running once it
opens, ended when its attempts run out. summary.json keeps every camera, removed ones too.
Streams here are on 127.0.0.1 only: a port nothing listens on, and a local HTTP server."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import test_serve
import test_serve_cli
from conftest import write_video
from services import free_port, wait_until
from test_serve import WAIT, Served, call
from test_serve_cli import Cli

from visionrt.config import load_config
from visionrt.errors import ConfigError, SourceError
from visionrt.pipeline import Pipeline
from visionrt.serve.startup import Unreachable, start_reachable

media, serving = test_serve.media, test_serve.serving  # the fixtures, found by name
cli = test_serve_cli.cli


def closed_stream() -> str:
    return f"rtsp://127.0.0.1:{free_port()}/x"


# -- which sources are left out at start-up ------------------------------------------------------
class Starts:
    """A stand-in for starting the pipeline: its first call fails as a source that cannot be
    opened; each call's sources are kept."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, ...]] = []

    def __call__(self, cfg: Any) -> Pipeline:
        self.calls.append(cfg.sources)
        if len(self.calls) == 1:
            raise SourceError("cannot open stream")
        return Pipeline.__new__(Pipeline)  # never run


def test_an_unreachable_camera_is_left_out_and_kept(media: Path) -> None:
    cam = closed_stream()
    door = f"door={media / 'a.mp4'}"
    zones = {"lines": {"gate": [[0, 10], [50, 10]]}}
    cfg = load_config(
        values={
            "sources": [f"cam1={cam}", door],
            "analytics": {"cam1": zones},
            "pipeline": {"tracking": {"enabled": True}},
        }
    )
    starts = Starts()
    _, runs, down = start_reachable(cfg, starts)
    assert starts.calls == [(f"cam1={cam}", door), (door,)]
    assert runs.sources == (door,)
    assert runs.analytics == {}, "the pipeline is not told of a camera it does not run"
    assert [(d.name, d.uri, d.tasks, d.analytics) for d in down] == [
        ("cam1", cam, ("detect",), zones)
    ]
    assert down[0].error.startswith(f"cannot open stream '{cam}'"), down[0].error


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ({"sources": ["door=missing.mp4"]}, SourceError),  # no camera: the user's mistake
        ({"pipeline": {"tiling": {"tile": 640}}}, SourceError),  # nothing is added to it
        ({"depth": {"model": "d.onnx", "on": ["cam1"]}}, SourceError),  # depth for it alone
        ({"analytics": {"cam1": {"lines": {"gate": [[0, 0], [9, 9]]}}}}, ConfigError),  # track
    ],
    ids=["a missing file", "tiled", "depth on it alone", "its lines checked now"],
)
def test_what_cannot_start_without_the_camera_stops_the_start_as_before(
    media: Path, values: dict[str, Any], expected: type[Exception]
) -> None:
    sources = [f"cam1={closed_stream()}", f"door={media / 'a.mp4'}"]
    cfg = load_config(values={"sources": sources, **values})
    starts = Starts()
    with pytest.raises(expected):
        start_reachable(cfg, starts)
    assert len(starts.calls) == 1


# -- a camera reconnected by the running service -------------------------------------------------
class VideoServer:
    """An HTTP server for a video on 127.0.0.1:`port` once `start()` is called; each connection
    gets the whole file."""

    def __init__(self, data: bytes, port: int) -> None:
        self.data, self.port = data, port
        self.sock: socket.socket | None = None

    def start(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", self.port))
        threading.Thread(target=self._serve, args=(self.sock,), daemon=True).start()

    def _serve(self, sock: socket.socket) -> None:
        while True:
            try:
                conn, _ = sock.accept()
            except OSError:
                return
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        with conn:
            conn.recv(65536)
            head = "HTTP/1.1 200 OK\r\nContent-Type: video/x-matroska\r\n"
            conn.sendall(f"{head}Content-Length: {len(self.data)}\r\n\r\n".encode())
            conn.sendall(self.data)

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()


@pytest.fixture
def video_server(tmp_path: Path) -> Iterator[VideoServer]:
    # 8 s at 25 FPS: longer than FFmpeg's analyzeduration, so probing never waits for data.
    data = write_video(tmp_path / "served.mkv", frames=200).read_bytes()
    server = VideoServer(data, free_port())
    yield server
    server.close()


def source_events(served: Served, name: str) -> list[tuple[str, dict[str, Any]]]:
    events = served.get("/events?limit=1000").json()
    return [(e["action"], e["detail"]) for e in events if e["source"] == name]


def test_a_camera_unreachable_at_first_is_opened_once_it_answers(
    serving: Any, video_server: VideoServer
) -> None:
    served = serving()
    url = f"http://127.0.0.1:{video_server.port}/video.mkv"
    served.service.retry(Unreachable("cam", url, error=f"cannot open stream '{url}'"))
    row = served.row("cam")
    assert (row["state"], row["frames_out"]) == ("down", 0)
    assert row["error"].startswith("unreachable: "), row
    # Its first reconnect fails (nothing listens yet), and is counted.
    wait_until(lambda: served.row("cam")["reconnects"] >= 1, WAIT, "cam's first reconnect")
    assert served.row("cam")["state"] == "down"
    assert "Connection refused" in served.row("cam")["error"]
    assert served.post("/sources", {"name": "cam", "uri": url}).status == 409, "it is cam's"
    video_server.start()
    wait_until(lambda: served.frames_out("cam") > 0, WAIT, "cam's frames")
    wait_until(lambda: ("up", {}) in source_events(served, "cam"), WAIT, "cam up")
    actions = [action for action, _ in source_events(served, "cam")]
    assert actions[:2] == ["down", "up"], actions
    assert served.row("cam")["error"] == ""
    assert served.frames_out("a") > 0, "the service's own camera ran meanwhile"


def test_a_camera_removed_while_it_reconnects_is_never_opened(
    serving: Any, video_server: VideoServer
) -> None:
    served = serving()
    url = f"http://127.0.0.1:{video_server.port}/video.mkv"
    opened = len(served.pipeline.sources)
    served.service.retry(Unreachable("cam", url, error="cannot open stream"))
    wait_until(lambda: served.row("cam")["reconnects"] >= 1, WAIT, "cam's first reconnect")
    reconnecting = next(t for t in threading.enumerate() if t.name == "serve-reconnect-cam")
    removed = served.delete("/sources/cam")
    assert removed.status == 200, removed
    assert removed.json()["state"] == "removed"
    reconnecting.join(WAIT)
    assert not reconnecting.is_alive(), "its reconnecting went on"
    video_server.start()  # too late: nothing asks any more
    assert len(served.pipeline.sources) == opened
    assert served.row("cam") == {}


# -- the CLI --------------------------------------------------------------------------------------
def test_the_cli_starts_with_a_camera_that_cannot_be_reached(
    cli: Callable[[str], Cli], media: Path, tmp_path: Path
) -> None:
    """Before: exit 3 at start-up ("Invalid data found when processing input", or "Connection
    refused"), whereas docs/serve.md says a failing camera never stops the others."""
    cam = closed_stream()
    served = cli(
        f"sources: ['cam1={cam}', 'door={media / 'a.mp4'}']\n"
        "source: {reconnect_attempts: 2, reconnect_backoff: 0.01}\n"
    )
    assert any("cam1: unreachable" in line for line in served.lines), served.lines

    def of_cam1(action: str) -> list[dict[str, Any]]:
        return [e for e in served.get("/events") if (e["source"], e["action"]) == ("cam1", action)]

    wait_until(lambda: of_cam1("ended"), WAIT, "cam1 to give up")
    down = of_cam1("down")[0]["detail"]["error"]
    assert down.startswith(f"unreachable: cannot open stream '{cam}'"), down
    assert "gave up after 2 reconnects (unreachable: " in of_cam1("ended")[0]["detail"]["error"]
    rows = {row["name"]: row for row in served.get("/sources")}
    assert (rows["cam1"]["state"], rows["cam1"]["reconnects"]) == ("ended", 2)
    wait_until(lambda: {r["name"]: r for r in served.get("/sources")}["door"]["frames_out"] > 0,
               WAIT, "door's frames")  # fmt: skip
    removed = call(f"{served.url}/sources/cam1", "DELETE")  # one never opened is removed too
    assert removed.status == 200, removed
    assert [row["name"] for row in served.get("/sources")] == ["door"]
    assert served.stop() == 0, "".join(served.lines)
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    door = next(c for c in summary["service"]["cameras"] if c["name"] == "door")
    assert door["frames_out"] > 0
