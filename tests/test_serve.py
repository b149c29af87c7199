"""`visionrt serve` (issue #20) end to end: the HTTP API over a running service built in-process
(add, remove, restart, bad requests that change nothing, the token), other cameras not held up
while one comes and goes, zone and line events to the API and a real MQTT broker, a file that
ends, the previews, and the CLI stopped by SIGTERM."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest
from conftest import HANG_SECONDS, write_video
from services import (  # noqa: F401 (fixtures, found by pytest by name)
    Mosquitto,
    free_port,
    mosquitto_service,
    wait_until,
)

from visionrt import Pipeline
from visionrt.config import pipeline_options
from visionrt.errors import ConfigError
from visionrt.serve.app import HttpServer, check_bind, make_app
from visionrt.serve.outputs import ServiceSinks
from visionrt.serve.preview import PreviewHub
from visionrt.serve.service import Service
from visionrt.sinks import SourceFiles
from visionrt.sinks.base import partial_path
from visionrt.sinks.events import EventPublisher, EventTransport
from visionrt.sources import SourceOptions
from visionrt.telemetry import RunSummary
from visionrt.telemetry.metrics import MetricsServer

WAIT = HANG_SECONDS  # only a guard: a wait ends as soon as its condition holds
# Requests go straight to the local server, whatever proxy the environment names.
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class Reply:
    """One HTTP answer: status, headers (lower-case names) and body."""

    def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.status, self.headers, self.body = status, headers, body

    def json(self) -> Any:
        return json.loads(self.body)

    def __repr__(self) -> str:
        return f"Reply({self.status}, {self.body[:300]!r})"


def call(
    url: str,
    method: str = "GET",
    body: bytes | dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
) -> Reply:
    data = json.dumps(body).encode() if isinstance(body, dict) else body
    headers = dict(headers or {})
    if method == "POST":  # as docs/serve.md asks of a client
        headers.setdefault("Content-Type", "application/json")
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with OPENER.open(request, timeout=WAIT) as response:
            head = {k.lower(): v for k, v in response.headers.items()}
            return Reply(response.status, head, response.read())
    except urllib.error.HTTPError as err:
        head = {k.lower(): v for k, v in err.headers.items()}
        return Reply(err.code, head, err.read())


class Served:
    """A service over `sources` (NAME=PATH) run in this process with the tiny detector, its API
    on a free local port (`url`), files written to `out` (`video`: an MP4 per camera too), video
    files opened from `media`."""

    def __init__(
        self,
        folder: Path,
        model: Path,
        sources: Sequence[str],
        *,
        token: str = "",
        transports: Sequence[EventTransport] = (),
        loop: bool = True,
        track: bool = False,
        video: bool = False,
    ) -> None:
        self.out, self.media, self.token = folder / "out", folder / "media", token
        self.out.mkdir(exist_ok=True)
        self.media.mkdir(exist_ok=True)
        self.pipeline = Pipeline(
            list(sources),
            model,
            "onnxruntime",
            source_options=SourceOptions(realtime=True, loop=loop),
            options=pipeline_options(warmup=0, track=track),
            plan=False,
            service=True,
        )
        self.publisher = EventPublisher(transports)
        self.preview = PreviewHub(rate=10)
        sinks = ServiceSinks(self.out, True, SourceFiles(video=video, coco=True, csv=True))
        self.service = Service(
            self.pipeline, sinks, self.preview, self.publisher, files=[str(self.media)]
        )
        self.metrics = MetricsServer(0)
        self.pipeline.telemetry.add_listener(self.metrics)
        self.http = HttpServer(make_app(self.service, token, self.metrics), "127.0.0.1", 0)
        self.url = self.http.url
        self.summary: RunSummary | None = None
        self._thread = threading.Thread(target=self._run, name="test-service", daemon=True)
        self._stopped = False
        self.http.start()
        self._thread.start()
        wait_until(lambda: self.http.server.started, WAIT, "the HTTP server to listen")
        wait_until(self._accepting, WAIT, "the service to run")

    def _accepting(self) -> bool:
        graph = self.pipeline.graph
        # Its readers started too: a test may join one (a file that ends) at once.
        return (
            graph is not None
            and graph.source_side.started.is_set()
            and graph.source_side.accepting()
        )

    def _run(self) -> None:
        self.summary = self.service.run()

    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def get(self, path: str) -> Reply:
        return call(self.url + path, headers=self.auth())

    def post(self, path: str, body: bytes | dict[str, Any] | None = None) -> Reply:
        return call(self.url + path, "POST", body, self.auth())

    def delete(self, path: str) -> Reply:
        return call(self.url + path, "DELETE", headers=self.auth())

    def row(self, name: str) -> dict[str, Any]:
        """GET /sources' row of camera `name` ({}: not listed)."""
        return next((r for r in self.get("/sources").json() if r["name"] == name), {})

    def frames_out(self, name: str) -> int:
        return int(self.row(name).get("frames_out", 0))

    def jsonl(self) -> list[dict[str, Any]]:
        """detections.jsonl's lines: while the service runs, its `.partial` file."""
        path = self.out / "detections.jsonl"
        path = path if path.exists() else partial_path(path)
        if not path.exists():
            return []
        lines = path.read_text().splitlines()
        return [json.loads(line) for line in lines if line.endswith("}")]

    def lines_of(self, source_id: int) -> int:
        """JSONL lines of source `source_id` so far."""
        return sum(line["source_id"] == source_id for line in self.jsonl())

    def stop(self) -> RunSummary:
        """Stop the service, wait for it, close everything; the run's summary."""
        if not self._stopped:
            self._stopped = True
            self.service.stop()
            self._thread.join(WAIT)
            assert not self._thread.is_alive(), "the service did not stop"
            self.http.close()
            self.publisher.close()
            self.preview.close()
            self.pipeline.close()
        assert self.summary is not None, "service.run() raised"
        return self.summary


@pytest.fixture
def media(tmp_path: Path) -> Path:
    """Videos the API may open: a.mp4 and b.mp4 (25 FPS, 128×96, 40 frames)."""
    folder = tmp_path / "media"
    folder.mkdir()
    write_video(folder / "a.mp4", frames=40)
    shutil.copy(folder / "a.mp4", folder / "b.mp4")
    return folder


@pytest.fixture
def serving(tmp_path: Path, tiny_model: Path, media: Path) -> Iterator[Any]:
    """A factory of services over the media folder's videos; all stopped at the end."""
    made: list[Served] = []

    def make(sources: Sequence[str] = (), **options: Any) -> Served:
        sources = sources or [f"a={media / 'a.mp4'}"]
        made.append(Served(tmp_path, tiny_model, sources, **options))
        return made[-1]

    yield make
    for served in made:
        served.stop()


def names(served: Served) -> list[tuple[str, str, tuple[str, ...]]]:
    return [(r["name"], r["uri"], tuple(r["tasks"])) for r in served.get("/sources").json()]


# -- 1. the API's contract ------------------------------------------------------------------------
def test_sources_are_listed_added_restarted_and_removed(serving: Any, media: Path) -> None:
    served = serving()
    rows = served.get("/sources").json()
    assert [r["name"] for r in rows] == ["a"]
    assert {"state", "fps", "frames_in", "frames_out", "drops", "outputs"} <= set(rows[0])
    wait_until(lambda: served.row("a")["state"] == "running", WAIT, "a running")
    wait_until(lambda: served.row("a")["fps"] > 0, WAIT, "a's FPS")

    added = served.post("/sources", {"name": "b", "uri": str(media / "b.mp4"), "tasks": ["detect"]})
    assert added.status == 201, added
    assert added.json()["name"] == "b"
    assert [Path(p).name for p in added.json()["outputs"]] == ["b.coco.json", "b.csv"]
    assert [r["name"] for r in served.get("/sources").json()] == ["a", "b"]
    wait_until(lambda: served.frames_out("b") > 5, WAIT, "b's frames out")
    first_id = served.service.cameras["b"].source_id

    restarted = served.post("/sources/b/restart")
    assert restarted.status == 200, restarted
    assert restarted.json()["name"] == "b"
    second_id = served.service.cameras["b"].source_id
    assert second_id != first_id, "a restart opens the camera again"
    wait_until(lambda: served.lines_of(second_id) > 0, WAIT, "frames of the restarted b")

    removed = served.delete("/sources/b")
    assert removed.status == 200, removed
    assert removed.json()["state"] == "removed"
    assert served.delete("/sources/b").status == 404
    assert [r["name"] for r in served.get("/sources").json()] == ["a"]

    summary = served.stop()
    assert [row["name"] for row in summary.sources] == ["a", "b"]  # one row per camera
    b_row = summary.sources[1]
    assert b_row["instances"] == 2
    lines = served.jsonl()
    assert b_row["frames_out"] == sum(line["source"] == "b" for line in lines)
    of_b = [line for line in lines if line["source"] == "b"]
    assert {line["source_id"] for line in of_b} == {first_id, second_id}
    assert any(line["source"] == "a" for line in lines)
    assert (served.out / "b.csv").is_file()
    assert (served.out / "b-2.csv").is_file(), "a re-added camera keeps its earlier files"


def test_bad_requests_are_refused_and_change_nothing(
    serving: Any, media: Path, tmp_path: Path
) -> None:
    served = serving(track=True)  # zones are allowed: only the bad polygon is wrong below
    outside = tmp_path / "outside.mp4"
    shutil.copy(media / "a.mp4", outside)
    video = str(media / "b.mp4")
    cases: list[tuple[str, bytes | dict[str, Any], int, str]] = [
        ("unknown key", {"name": "c", "uri": video, "colour": "red"}, 400, "unknown key 'colour'"),
        ("bad JSON", b'{"name": "c", ', 400, "expected JSON"),
        ("not an object", b"[1, 2]", 400, "JSON object"),
        ("name with a space", {"name": "c d", "uri": video}, 400, "name:"),
        ("name running", {"name": "a", "uri": video}, 409, "'a' is running"),
        ("depth only", {"name": "c", "uri": video, "tasks": ["depth"]}, 400, "tasks:"),
        # serve has no --depth: its depth model comes from the config (issue #47).
        ("no depth model", {"name": "c", "uri": video, "tasks": ["detect", "depth"]}, 400,
         "start it with one: --set depth.model=MODEL"),
        ("outside files", {"name": "c", "uri": str(outside)}, 400, "serve.files"),
        ("escaping ..", {"name": "c", "uri": f"{media}/../outside.mp4"}, 400, "serve.files"),
        ("missing file", {"name": "c", "uri": str(media / "missing.mp4")}, 422, "missing.mp4"),
        ("closed port", {"name": "c", "uri": f"rtsp://127.0.0.1:{free_port()}/live"}, 422,
         "rtsp://127.0.0.1"),
        ("bad polygon", {"name": "c", "uri": video, "zones": {"door": [[0, 0], [9, 9]]}}, 400,
         "at least 3"),
        ("over 64 KB", {"name": "c", "uri": video, "lines": {"x" * 70_000: []}}, 413, "bytes"),
    ]  # fmt: skip
    before = names(served)
    opened = len(served.pipeline.sources)
    for label, body, status, message in cases:
        reply = served.post("/sources", body)
        assert reply.status == status, f"{label}: {reply}"
        assert message in reply.json()["error"], f"{label}: {reply}"
        assert names(served) == before, f"{label} changed the sources"
    assert len(served.pipeline.sources) == opened, "a refused request opened a source"
    assert set(served.service.cameras) == {"a"}
    served.stop()
    assert sorted(p.name for p in served.out.iterdir()) == [
        "a.coco.json",
        "a.csv",
        "detections.jsonl",
    ]


# -- 2. the token -------------------------------------------------------------------------------
def test_every_route_asks_for_the_token(serving: Any, media: Path) -> None:
    served = serving(token="s3cret")
    url = served.url
    wait_until(
        lambda: call(f"{url}/sources/a/preview.jpg?token=s3cret").status == 200,
        WAIT,
        "a's first preview",
    )
    page = ["/", "/sources/a/preview.jpg"]  # the page and its images: ?token= too
    reads = [*page, "/sources", "/events", "/metrics"]
    bearer = {"Authorization": "Bearer s3cret"}
    for path in reads:
        assert call(url + path).status == 401, path
        assert call(url + path + "?token=wrong").status == 401, path
        wrong = {"Authorization": "Bearer wrong"}
        assert call(url + path, headers=wrong).status == 401, path
        assert call(url + path + "?token=s3cret").status == (200 if path in page else 401), path
        assert call(url + path, headers=bearer).status == 200, path
    unauthorized = call(url + "/sources")
    assert unauthorized.headers["www-authenticate"] == "Bearer"
    assert "token required" in unauthorized.json()["error"]
    metrics = call(f"{url}/metrics", headers=bearer).body.decode()
    assert "visionrt_frames_out_total" in metrics

    body = {"name": "b", "uri": str(media / "b.mp4")}
    assert call(f"{url}/sources", "POST", body).status == 401
    assert call(f"{url}/sources?token=wrong", "POST", body).status == 401
    assert call(f"{url}/sources?token=s3cret", "POST", body).status == 401, "never on a write"
    assert set(served.service.cameras) == {"a"}, "an unauthorized POST added a camera"
    assert call(f"{url}/sources", "POST", body, headers=bearer).status == 201
    assert call(f"{url}/sources/b", "DELETE").status == 401
    assert call(f"{url}/sources/b?token=s3cret", "DELETE").status == 401
    assert set(served.service.cameras) == {"a", "b"}, "an unauthorized DELETE removed a camera"
    assert call(f"{url}/sources/b", "DELETE", headers=bearer).status == 200


def test_listening_beyond_this_machine_needs_a_token(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="token"):
        check_bind("0.0.0.0", "")
    check_bind("0.0.0.0", "s3cret")
    check_bind("127.0.0.1", "")
    # A model that does not exist: the token is asked for before any model is loaded.
    env = {k: v for k, v in os.environ.items() if k != "VISIONRT_TOKEN"}
    done = subprocess.run(
        [sys.executable, "-m", "visionrt.cli.main", "serve", "--host", "0.0.0.0",
         "--set", f"model={tmp_path / 'no-such-model.onnx'}", "--out", str(tmp_path / "out")],
        capture_output=True, text=True, timeout=HANG_SECONDS, env=env, check=False,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "token" in lines[0]
    assert "0.0.0.0" in lines[0]
    assert not (tmp_path / "out").exists(), "nothing is written before the check"


# -- 3. the other cameras run on ------------------------------------------------------------------
def test_adding_and_removing_a_camera_does_not_hold_up_the_others(
    serving: Any, media: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A camera that takes long to open (an RTSP server far away) is opened while a's frames
    keep coming out; then b comes and goes a few times. Whether a live camera drops a frame
    depends on the machine's load (a loaded one drops some with no camera added), so the
    drops are not asked to be 0 but each to be counted, and a's frames to come out in order."""
    served = serving()
    wait_until(lambda: served.frames_out("a") > 10, WAIT, "a's frames")
    opening, release = _slow_open(monkeypatch)
    replies: list[Reply] = []
    body = {"name": "b", "uri": str(media / "b.mp4")}
    posting = threading.Thread(target=lambda: replies.append(served.post("/sources", body)))
    posting.start()
    try:
        assert opening.wait(WAIT), "the POST did not open b"
        before = served.frames_out("a")
        wait_until(lambda: served.frames_out("a") > before + 10, WAIT, "a's frames during b's open")
        assert posting.is_alive(), "b was opened already"
    finally:
        release.set()
        posting.join(WAIT)
    assert replies[0].status == 201, replies[0]
    for round_ in range(3):  # (released: opens no longer wait)
        if round_:
            reply = served.post("/sources", body)
            assert reply.status == 201, f"round {round_}: {reply}"
        source_id = served.service.cameras["b"].source_id
        wait_until(lambda: served.lines_of(source_id) > 5, WAIT, "b's frames")  # noqa: B023
        assert served.delete("/sources/b").status == 200
    settled = served.frames_out("a")
    wait_until(lambda: served.frames_out("a") > settled + 10, WAIT, "a's frames after")
    summary = served.stop()
    row = next(s for s in summary.sources if s["name"] == "a")
    drops = sum(row["dropped"].values())
    assert row["frames_in"] == row["frames_out"] + drops
    indices = [line["frame"] for line in served.jsonl() if line["source"] == "a"]
    assert len(indices) == row["frames_out"]
    assert indices == sorted(set(indices)), "a's frames out of order"
    assert indices[-1] < row["frames_in"]  # so each frame missing is a counted drop
    assert summary.accounted


def _slow_open(monkeypatch: pytest.MonkeyPatch) -> tuple[threading.Event, threading.Event]:
    """Opening a source waits (an RTSP server far away) until `release` is set; `opening` is
    set once an open began."""
    from visionrt.pipeline import roster

    opening, release = threading.Event(), threading.Event()
    real_open = roster.open_source

    def slow_open(spec: str, source_id: int, options: SourceOptions) -> Any:
        opening.set()
        release.wait(WAIT)
        return real_open(spec, source_id, options)

    monkeypatch.setattr(roster, "open_source", slow_open)
    return opening, release


def test_a_remove_does_not_wait_for_a_camera_still_opening(
    serving: Any, media: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    served = serving()
    assert served.post("/sources", {"name": "c", "uri": str(media / "b.mp4")}).status == 201
    opening, release = _slow_open(monkeypatch)
    replies: list[Reply] = []
    body = {"name": "b", "uri": str(media / "b.mp4")}
    posting = threading.Thread(target=lambda: replies.append(served.post("/sources", body)))
    posting.start()
    try:
        assert opening.wait(WAIT), "the POST did not open b"
        assert served.post("/sources", body).status == 409, "b's name is claimed while it opens"
        assert served.delete("/sources/c").status == 200
        assert posting.is_alive(), "the remove waited for b's open"
    finally:
        release.set()
        posting.join(WAIT)
    assert replies[0].status == 201, replies[0]
    assert [r["name"] for r in served.get("/sources").json()] == ["a", "b"]


# -- 4. zones and lines to the API and to MQTT ----------------------------------------------------
# The tiny detector's box is fixed in input pixels, so on 640-wide images of growing height it
# stands lower in each (letterbox): feet at y = H/2 + 50, 290 → 370 and back (see
# test_analytics_metrics.py). "in" is downwards across `mid` (right of a→b, y down).
HEIGHTS = (480, 520, 560, 600, 640, 600, 560, 520, 480)
ANALYTICS = {
    "zones": {"bottom": [[0, 340], [640, 340], [640, 640], [0, 640]]},
    "lines": {"mid": [[0, 320], [640, 320]]},
}


class Subscriber:
    """A paho subscriber to `topic/#` that records each message's (topic, event)."""

    def __init__(self, broker: Mosquitto, topic: str) -> None:
        import paho.mqtt.client as mqtt

        self.messages: list[tuple[str, dict[str, Any]]] = []
        self._lock = threading.Lock()
        subscribed = threading.Event()
        self.client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=uuid.uuid4().hex)
        self.client.on_connect = lambda client, *_: client.subscribe(f"{topic}/#", qos=1)
        self.client.on_subscribe = lambda *_: subscribed.set()
        self.client.on_message = self._on_message
        self.client.connect(broker.host, broker.port)
        self.client.loop_start()
        assert subscribed.wait(WAIT), "the subscription was not acknowledged"

    def _on_message(self, client: Any, userdata: Any, message: Any) -> None:
        with self._lock:
            self.messages.append((message.topic, json.loads(message.payload)))

    def received(self) -> dict[str, tuple[str, dict[str, Any]]]:
        """By event id (an at-least-once redelivery counted once)."""
        with self._lock:
            return {event["id"]: (topic, event) for topic, event in self.messages}

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


@pytest.mark.mqtt
def test_line_zone_and_source_events_reach_the_api_and_mqtt(
    serving: Any, media: Path, mosquitto: Mosquitto
) -> None:
    pytest.importorskip("paho.mqtt.client", reason="needs paho-mqtt (the serve extra)")
    from visionrt.sinks.mqtt import MqttTransport

    walk = media / "walk"
    walk.mkdir()
    for i, height in enumerate(HEIGHTS):
        image = np.full((height, 640, 3), 60 + i * 10, np.uint8)
        cv2.imwrite(str(walk / f"img{i}.png"), image)
    topic = f"test-{uuid.uuid4().hex[:8]}/events"
    subscriber = Subscriber(mosquitto, topic)
    try:
        served = serving(transports=[MqttTransport(mosquitto.host, mosquitto.port, topic)],
                         track=True)  # fmt: skip
        reply = served.post("/sources", {"name": "walk", "uri": str(walk), **ANALYTICS})
        assert reply.status == 201, reply

        def of_walk(kind: str) -> list[dict[str, Any]]:
            events = served.get("/events?limit=1000").json()
            return [e for e in events if e["source"] == "walk" and e["kind"] == kind]

        wait_until(lambda: len(of_walk("line")) == 2, WAIT, "two line events")
        lines = of_walk("line")
        assert [(e["name"], e["action"]) for e in lines] == [("mid", "in"), ("mid", "out")]
        assert all(isinstance(e["track_id"], int) for e in lines)
        assert lines[0]["track_id"] == lines[1]["track_id"], "one person crossed twice"
        assert lines[0]["frame"] < lines[1]["frame"]
        wait_until(lambda: len(of_walk("zone")) == 2, WAIT, "zone enter and leave")
        zones = of_walk("zone")
        entered = [("bottom", "enter"), ("bottom", "leave")]
        assert [(e["name"], e["action"]) for e in zones] == entered
        # Nine images, then the folder is over.
        wait_until(lambda: served.row("walk")["state"] == "ended", WAIT, "walk ended")
        assert served.delete("/sources/walk").status == 200
        actions = [e["action"] for e in of_walk("source")]
        assert actions == ["added", "ended", "removed"]
        served.stop()
        stats = served.publisher.stats()
        (lane,) = stats
        assert lane.startswith("mqtt://")
        sent = stats[lane]["sent"]
        assert sent == stats[lane]["published"] == len(served.service.events(1000))
        wait_until(lambda: len(subscriber.received()) == sent, WAIT, f"{sent} events over MQTT")
        received = subscriber.received()
        assert set(received) == {e["id"] for e in served.service.events(1000)}
        line_topics = {t for t, e in received.values() if e["kind"] == "line"}
        assert line_topics == {f"{topic}/walk/line"}
        by_id = {e["id"]: e for e in served.service.events(1000)}
        assert all(event == by_id[event_id] for event_id, (_, event) in received.items())
    finally:
        subscriber.close()


# -- 5. a file that ends ------------------------------------------------------------------------
def test_a_file_that_ends_is_reported_ended(serving: Any, media: Path) -> None:
    served = serving(loop=False)
    wait_until(lambda: served.row("a")["state"] == "ended", WAIT, "a ended")
    events = served.get("/events").json()
    assert [(e["source"], e["kind"], e["action"]) for e in events] == [("a", "source", "ended")]
    summary = served.stop()
    row = next(s for s in summary.sources if s["name"] == "a")
    assert row["frames_in"] == 40
    assert row["frames_in"] == row["frames_out"] + sum(row["dropped"].values())
    assert summary.accounted
    assert summary.error == ""


# -- 6. previews ----------------------------------------------------------------------------------
def test_previews_are_jpegs_that_advance_and_streams_end_with_their_camera(
    serving: Any,
) -> None:
    served = serving()
    wait_until(lambda: served.get("/sources/a/preview.jpg").status == 200, WAIT, "a preview")
    first = served.get("/sources/a/preview.jpg")
    assert first.headers["content-type"] == "image/jpeg"
    image = cv2.imdecode(np.frombuffer(first.body, np.uint8), cv2.IMREAD_COLOR)
    assert image is not None
    assert image.shape == (96, 128, 3)
    index = int(first.headers["x-frame-index"])
    wait_until(
        lambda: int(served.get("/sources/a/preview.jpg").headers["x-frame-index"]) > index,
        WAIT,
        "a newer preview",
    )
    assert served.get("/sources/nobody/preview.jpg").status == 404
    assert served.get("/sources/nobody/preview.mjpg").status == 404

    request = urllib.request.Request(served.url + "/sources/a/preview.mjpg")
    with OPENER.open(request, timeout=WAIT) as stream:
        assert stream.headers["content-type"].startswith("multipart/x-mixed-replace")
        received = b""
        while received.count(b"--frame\r\n") < 2:
            chunk = stream.read1(4096)
            assert chunk, "the stream ended while its camera runs"
            received += chunk
        part = received.split(b"--frame\r\n")[1]
        jpeg = part.split(b"\r\n\r\n", 1)[1]
        assert jpeg.startswith(b"\xff\xd8")
        assert served.delete("/sources/a").status == 200
        while stream.read1(4096):  # ends (EOF) instead of timing out
            pass
    assert served.get("/sources/a/preview.jpg").status == 404


# -- 7. the CLI, stopped by SIGTERM ---------------------------------------------------------------
def test_the_cli_serves_until_sigterm_and_accounts_for_every_frame(
    tmp_path: Path, tiny_model: Path, media: Path
) -> None:
    out = tmp_path / "out"
    config = tmp_path / "serve.yaml"
    config.write_text(
        f"model: {tiny_model}\nbackend: onnxruntime\nsources: ['cam={media / 'a.mp4'}']\n"
        f"serve:\n  files: ['{media}']\noutput:\n  coco: true\n  csv: true\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "visionrt.cli.main", "serve", "--config", str(config),
         "--port", "0", "--no-plan", "--out", str(out), "--quiet"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        start_new_session=True,  # the signal goes to visionrt alone, as `kill PID` sends it
    )  # fmt: skip
    errors: list[str] = []
    found = threading.Event()
    url: list[str] = []

    def read() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            errors.append(line)
            match = re.search(r"at (http://127\.0\.0\.1:\d+)/", line)
            if match and not url:
                url.append(match.group(1))
                found.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        wait_until(lambda: found.is_set() or proc.poll() is not None, 120, "the URL on stderr")
        assert url, "".join(errors)
        base = url[0]
        reply = call(f"{base}/sources", "POST", {"name": "cam2", "uri": str(media / "b.mp4")})
        assert reply.status == 201, reply

        def frames(name: str) -> int:
            rows = call(f"{base}/sources").json()
            return next((r["frames_out"] for r in rows if r["name"] == name), 0)

        wait_until(lambda: frames("cam2") > 5 and frames("cam") > 5, WAIT, "both cameras' frames")
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=HANG_SECONDS)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    reader.join(10)
    assert code == 0, "".join(errors)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["accounted"] is True
    assert summary["interrupted"] is True
    assert [c["name"] for c in summary["service"]["cameras"]] == ["cam", "cam2"]
    assert summary["frames_in"] == summary["frames_out"] + sum(summary["dropped"].values())
    assert not list(out.rglob("*.partial")), sorted(p.name for p in out.iterdir())
    assert {"cam.coco.json", "cam2.coco.json", "cam.csv", "cam2.csv", "detections.jsonl"} <= {
        p.name for p in out.iterdir()
    }


def test_a_removed_cameras_own_files_are_finalized_while_the_service_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A service that runs for weeks keeps no file open per camera it ever had: once a removed
    camera's reader has ended (and RETIRE_AFTER has passed), its COCO and CSV files get their
    final names at the next settle (the service's watcher calls it); later frames of it go to
    the JSONL only."""
    from test_preview import make_result

    from visionrt.serve import outputs

    monkeypatch.setattr(outputs, "RETIRE_AFTER", 0.0)
    sinks = ServiceSinks(tmp_path, True, SourceFiles(video=False, coco=True, csv=True))
    sinks.open_source(0, "a")
    sinks.open_source(1, "b")
    for index in range(3):
        sinks.write(_with_source(make_result("a", index, boxes=[(1, 1, 9, 9)]), 0))
        sinks.write(_with_source(make_result("b", index, boxes=[(1, 1, 9, 9)]), 1))
    reader = threading.Thread(target=lambda: None)
    reader.start()
    reader.join()
    sinks.retire_source(1, reader)
    sinks.write(_with_source(make_result("a", 3), 0))
    assert {p.name for p in sinks.settle()} == {"b.csv", "b.coco.json"}  # b's reader ended
    sinks.write(_with_source(make_result("a", 4), 0))
    assert (tmp_path / "b.csv").is_file()
    assert (tmp_path / "b.coco.json").is_file()
    assert not partial_path(tmp_path / "b.csv").exists()
    assert len(json.loads((tmp_path / "b.coco.json").read_text())) == 3
    sinks.write(_with_source(make_result("b", 3, boxes=[(1, 1, 9, 9)]), 1))  # late: JSONL only
    assert partial_path(tmp_path / "a.csv").exists(), "a's files stay open"
    paths = sinks.close()
    assert {p.name for p in paths} >= {"b.csv", "b.coco.json", "a.csv", "detections.jsonl"}
    lines = (tmp_path / "detections.jsonl").read_text().splitlines()
    assert len(lines) == 9
    assert len((tmp_path / "b.csv").read_text().splitlines()) == 1 + 3  # header, 3 boxes


def _with_source(result: Any, source_id: int) -> Any:
    import dataclasses

    frame = dataclasses.replace(result.frame, source_id=source_id)
    return dataclasses.replace(result, frame=frame)


def test_a_camera_gets_its_annotated_mp4_when_asked(tmp_path: Path) -> None:
    import av
    from test_preview import make_result

    sinks = ServiceSinks(tmp_path, False, SourceFiles(video=True))
    assert [p.name for p in sinks.open_source(0, "a", fps=10.0)] == ["a.mp4"]
    for index in range(3):
        sinks.write(_with_source(make_result("a", index, boxes=[(10, 10, 90, 90)]), 0))
    assert [p.name for p in sinks.close()] == ["a.mp4"]
    with av.open(str(tmp_path / "a.mp4")) as video:
        stream = video.streams.video[0]
        assert sum(1 for _ in video.decode(stream)) == 3
        assert stream.average_rate == 10


def test_latency_ladder_steps_are_events_about_every_source(serving: Any) -> None:
    from visionrt.pipeline.degrade import Change

    served = serving()
    assert served.service.pipeline.hooks.on_degrade is not None  # the Service listens to the ladder
    served.service.pipeline.hooks.on_degrade(
        Change(12.0, 0, 1, "detect every 2", "p95 180 ms > 150")
    )
    served.service.pipeline.hooks.on_degrade(Change(40.0, 1, 0, "full", "p95 60 ms < 150"))
    slo = [e for e in served.get("/events").json() if e["kind"] == "slo"]
    assert [(e["source"], e["action"], e["detail"]["rung"]) for e in slo] == [
        ("*", "step down", "detect every 2"),
        ("*", "step up", "full"),
    ]
