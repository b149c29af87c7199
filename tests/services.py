"""Real network services for tests, started on 127.0.0.1 at test time: a mosquitto broker that a
test can stop and start again, and a webhook receiver that fails or stalls on demand."""

from __future__ import annotations

import getpass
import json
import os
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from conftest import HANG_SECONDS

HOST = "127.0.0.1"


# Ray's processes listen on ports of their own range (its default worker ports, 10002-19999):
# a port handed over is taken above it.
ABOVE_RAY = 20000


def free_port() -> int:
    """A port nothing listens on now; also "a dead receiver". Taken below the range the OS hands
    out for `bind(0)` and outgoing connections where there is room, so that no process started
    meanwhile (a Ray node, a broker) takes it before the test binds it; else the OS picks it."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    start = ABOVE_RAY + os.getpid() % 1000 * 7  # test processes at once start apart
    for port in (*range(start, low), *range(ABOVE_RAY, min(start, low))):
        with socket.socket() as probe:
            try:
                probe.bind((HOST, port))
            except OSError:
                continue
            return port
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        return int(probe.getsockname()[1])


def wait_until(condition: Any, timeout: float = HANG_SECONDS, what: str = "condition") -> None:
    """Poll `condition()` until true; fail naming `what` after `timeout` seconds (only a guard
    against a hang: the wait ends as soon as it holds, so only a broken feature pays it)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.01)


def mosquitto_binary() -> str | None:
    # Debian installs it in /usr/sbin, which is not on every PATH.
    found = shutil.which("mosquitto")
    candidates = [found] if found else ["/usr/sbin/mosquitto", "/usr/local/sbin/mosquitto"]
    return next((path for path in candidates if path and os.access(path, os.X_OK)), None)


class Mosquitto:
    """A mosquitto broker on `host:port`; `stop()` and `start()` keep the port. Persistence is on
    so that a subscriber's session (clean_session=False) outlives a restart, like a real broker's
    would; the database lives in the test's folder."""

    def __init__(self, binary: str, folder: Path) -> None:
        self.binary, self.host, self.port = binary, HOST, free_port()
        folder.mkdir(parents=True, exist_ok=True)
        self.config, self.log = folder / "mosquitto.conf", folder / "mosquitto.log"
        self.config.write_text(
            f"listener {self.port} {HOST}\n"
            "allow_anonymous true\n"
            "persistence true\n"
            f"persistence_location {folder}/\n"
            # Run as root, mosquitto would switch to its own user and could not write the
            # database into the test's folder; as anyone else this line changes nothing.
            f"user {getpass.getuser()}\n"
        )
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self, timeout: float = HANG_SECONDS) -> None:
        with self.log.open("ab") as log:
            self._process = subprocess.Popen(
                [self.binary, "-c", str(self.config)], stdout=log, stderr=subprocess.STDOUT
            )
        deadline = time.monotonic() + timeout
        while True:
            if self._process.poll() is not None:
                raise RuntimeError(f"mosquitto exited: {self.log.read_text()[-2000:]}")
            try:
                with socket.create_connection((self.host, self.port), timeout=0.5):
                    return
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"mosquitto not listening on {self.port}") from None
                time.sleep(0.02)

    def stop(self) -> None:
        """SIGTERM, so it saves its database (the subscribers' sessions), then wait."""
        if self._process is None:
            return
        process, self._process = self._process, None
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


# Fixtures are named apart from their functions, so a test module imports `mosquitto_service`
# and its tests take `mosquitto` without shadowing the import.
@pytest.fixture(name="mosquitto")
def mosquitto_service(tmp_path: Path) -> Iterator[Mosquitto]:
    """A running broker (host, port, stop(), start()); skipped when mosquitto is missing."""
    binary = mosquitto_binary()
    if binary is None:
        pytest.skip("mosquitto is not installed (apt-get install mosquitto)")
    broker = Mosquitto(binary, tmp_path / "mosquitto")
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


class WebhookReceiver:
    """An HTTP server in a thread that records the JSON bodies it accepted, in order.

    The first `fail_first` requests get `fail_status`; the others `status`. While `gate` is
    cleared each request waits for it (a receiver that hangs); it is set at first."""

    def __init__(self) -> None:
        self.fail_first, self.fail_status, self.status = 0, 500, 200
        self.gate = threading.Event()
        self.gate.set()
        self.bodies: list[dict[str, Any]] = []
        self.content_types: list[str] = []
        self.requests = 0
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with receiver._lock:
                    receiver.requests += 1
                    failing = receiver.requests <= receiver.fail_first
                status = receiver.fail_status if failing else receiver.status
                receiver.gate.wait(30)
                if 200 <= status < 300:
                    with receiver._lock:
                        receiver.bodies.append(json.loads(body))
                        receiver.content_types.append(self.headers.get("Content-Type", ""))
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:  # quiet test output
                pass

        self._server = ThreadingHTTPServer((HOST, 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://{HOST}:{self._server.server_address[1]}/hook"
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()

    @property
    def ids(self) -> list[str]:
        with self._lock:
            return [body["id"] for body in self.bodies]

    def close(self) -> None:
        self.gate.set()
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture(name="webhook_receiver")
def webhook_receiver_service() -> Iterator[WebhookReceiver]:
    receiver = WebhookReceiver()
    try:
        yield receiver
    finally:
        receiver.close()
