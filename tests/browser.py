"""Headless Chromium for tests of the web view: find it, dump a page's DOM after its scripts ran
for a while, take a screenshot, read the camera cards from a DOM; and an ASGI app served on a
free local port for it to load."""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

from conftest import HANG_SECONDS

_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
TIMEOUT_S = HANG_SECONDS  # only a guard against a hang


def find_chromium() -> str | None:
    """The path of a Chromium (or Chrome) on PATH, None without one."""
    for name in _NAMES:
        path = shutil.which(name)
        if path is not None:
            return path
    return None


def _run(url: str, budget_ms: int, extra: list[str]) -> subprocess.CompletedProcess[str]:
    chromium = find_chromium()
    if chromium is None:
        raise FileNotFoundError(f"no Chromium on PATH (looked for {', '.join(_NAMES)})")
    with tempfile.TemporaryDirectory(prefix="visionrt-chromium-") as profile:
        args = [
            chromium,
            "--headless=new",
            # Tests run as root in containers, where the sandbox cannot start.
            "--no-sandbox",
            "--disable-gpu",
            # Containers often have a 64 MB /dev/shm, too small for the renderer.
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--no-default-browser-check",
            "--hide-scrollbars",
            f"--user-data-dir={profile}",
            # Virtual time runs timers fast while the page is idle and stands still while a fetch
            # is in flight, so a polling page gets `budget_ms` of page time before the dump.
            # Checked with Chromium 156: 4000 ms showed 16 previews per camera in about 2 s of
            # real time; `--timeout=4000` instead dumped at once, before the first fetch returned.
            f"--virtual-time-budget={budget_ms}",
            *extra,
            url,
        ]
        done = subprocess.run(args, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    if done.returncode != 0:
        raise RuntimeError(
            f"chromium exited with {done.returncode} for {url}: {done.stderr[-2000:]}"
        )
    return done


def dump_dom(url: str, budget_ms: int = 4000) -> str:
    """The serialized DOM of `url` after `budget_ms` milliseconds of (virtual) page time."""
    return _run(url, budget_ms, ["--dump-dom"]).stdout


def screenshot(
    url: str, path: Path | str, budget_ms: int = 4000, size: tuple[int, int] = (1280, 800)
) -> Path:
    """A PNG of `url` at `size` (width, height) after `budget_ms` of page time, written to
    `path`."""
    path = Path(path).resolve()
    width, height = size
    _run(url, budget_ms, [f"--screenshot={path}", f"--window-size={width},{height}"])
    if not path.is_file():
        raise RuntimeError(f"chromium wrote no screenshot to {path}")
    return path


@dataclass
class LiveView:
    """What a dumped live view shows: each `class="camera"` element's attributes (`data-name`,
    `data-frames-loaded`, `data-first-frame`, `data-last-frame`) and the status line's text."""

    cards: list[dict[str, str | None]] = field(default_factory=list)
    status: str = ""


class _LiveViewParser(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.view = LiveView()
        self._in_status = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if "camera" in (values.get("class") or "").split():
            self.view.cards.append(values)
        self._in_status = values.get("id") == "status"

    def handle_data(self, data: str) -> None:
        if self._in_status:
            self.view.status += data


def live_view(dom: str) -> LiveView:
    """The camera cards and status line of a DOM dumped from the live view page."""
    parser = _LiveViewParser()
    parser.feed(dom)
    parser.view.status = parser.view.status.strip()
    return parser.view


@contextlib.contextmanager
def serve_in_thread(app: Any, timeout: float = 10.0) -> Iterator[str]:
    """Serve an ASGI app with uvicorn on a free 127.0.0.1 port in a daemon thread; yields its
    base URL ("http://127.0.0.1:PORT/") and stops the server on exit."""
    import uvicorn

    # Bound here and handed over, so no other process can take the port in between.
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + timeout
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"uvicorn did not start on port {port} in {timeout} s")
            time.sleep(0.02)
        yield f"http://127.0.0.1:{port}/"
    finally:
        server.should_exit = True
        thread.join(timeout=timeout)
        sock.close()
