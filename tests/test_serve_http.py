"""Issue #32: what the service's HTTP API admits, against a real server on 127.0.0.1. Requests of
another site (DNS rebinding, a cross-site form) and writes that are not JSON are refused; a body
nested past its bound is a 400, a client gone mid-body one line in the log; every error, an
unknown route or method included, is JSON."""

from __future__ import annotations

import http.client
import logging
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import test_serve
from services import wait_until
from test_serve import WAIT, Reply, Served, call

from visionrt.serve.guard import MAX_DEPTH, Guard, json_depth

media, serving = test_serve.media, test_serve.serving  # the fixtures, found by name


class Records(logging.Handler):
    """Log records of the service's loggers (uvicorn's own does not reach the root logger)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def tracebacks(self) -> list[str]:
        return [r.getMessage() for r in self.records if r.exc_info]


@pytest.fixture
def logged() -> Iterator[Records]:
    records = Records()
    loggers = [logging.getLogger(name) for name in ("uvicorn.error", "visionrt")]
    for logger in loggers:
        logger.addHandler(records)
    yield records
    for logger in loggers:
        logger.removeHandler(records)


def names(served: Served) -> list[str]:
    return [row["name"] for row in served.get("/sources").json()]


# -- 10. cross-site requests and writes that are not JSON ------------------------------------
def test_the_issues_cross_site_write_is_refused(serving: Any) -> None:
    """The issue's request (text/plain, Origin and Host of another site) answered 201."""
    served = serving()
    port = served.http.port
    headers = {
        "Content-Type": "text/plain",
        "Origin": "http://evil.example",
        "Host": f"evil.example:{port}",
    }
    body = b'{"name": "c", "uri": "synthetic:64x48:5"}'
    reply = send(served, "POST", "/sources", body, headers)
    assert reply.status == 421, reply
    assert "evil.example" in reply.json()["error"]
    assert names(served) == ["a"]


@pytest.mark.parametrize(
    ("host", "status"),
    [
        ("evil.example:{port}", 421),  # a page of another site, its name rebound to 127.0.0.1
        ("127.0.0.1:{other}", 421),
        ("localhost", 421),  # port 80
        ("127.0.0.1:{port}", 200),
        ("localhost:{port}", 200),
        ("LOCALHOST:{port}", 200),
    ],
)
def test_the_host_must_name_this_service(serving: Any, host: str, status: int) -> None:
    served = serving()
    port = served.http.port
    given = host.format(port=port, other=port + 1)
    for path in ("/sources", "/", "/events", "/metrics"):
        reply = send(served, "GET", path, headers={"Host": given})
        assert reply.status == status, f"{path} with Host {given}: {reply}"
    reply = send(served, "DELETE", "/sources/a", headers={"Host": given})
    assert reply.status == status, reply
    if status == 421:
        assert names(served) == ["a"], "a refused DELETE removed a camera"
        assert "not this service" in reply.json()["error"]


def test_a_request_from_another_origin_is_refused(serving: Any, media: Path) -> None:
    served = serving()
    body = {"name": "c", "uri": str(media / "b.mp4")}
    for origin in ("http://evil.example", "null", f"http://localhost:{served.http.port + 1}"):
        reply = call(f"{served.url}/sources", "POST", body, {"Origin": origin})
        assert reply.status == 403, f"{origin}: {reply}"
        assert "other sites" in reply.json()["error"]
        assert call(f"{served.url}/sources/a", "DELETE", headers={"Origin": origin}).status == 403
    assert names(served) == ["a"]
    own = {"Origin": served.url}  # the live view's own page
    assert call(f"{served.url}/sources", "POST", body, own).status == 201
    assert names(served) == ["a", "c"]


@pytest.mark.parametrize(
    ("method", "path", "content_type"),
    [
        ("POST", "/sources", "text/plain"),  # a cross-site form or fetch needs no preflight
        ("POST", "/sources", "application/x-www-form-urlencoded"),
        ("POST", "/sources", "multipart/form-data; boundary=x"),
        ("POST", "/sources", None),
        ("POST", "/sources/a/restart", None),
        ("DELETE", "/sources/a", "text/plain"),
    ],
)
def test_a_write_must_be_json(
    serving: Any, media: Path, method: str, path: str, content_type: str | None
) -> None:
    served = serving()
    body = b'{"name": "c", "uri": "%s"}' % str(media / "b.mp4").encode()
    headers = {"Content-Type": content_type} if content_type else {}
    reply = send(served, method, path, body if method == "POST" else None, headers)
    assert reply.status == 415, reply
    assert "application/json" in reply.json()["error"]
    assert names(served) == ["a"]
    assert served.service.cameras["a"].source_id == 0, "a was restarted"


def test_json_writes_and_plain_deletes_are_taken(serving: Any, media: Path) -> None:
    served = serving()
    body = {"name": "c", "uri": str(media / "b.mp4")}
    kind = {"Content-Type": "application/json; charset=utf-8"}
    assert call(f"{served.url}/sources", "POST", body, kind).status == 201
    assert call(f"{served.url}/sources/c/restart", "POST", None, kind).status == 200
    assert send(served, "DELETE", "/sources/c").status == 200  # no body nor type: curl -X DELETE
    assert names(served) == ["a"]


def test_the_guard_reads_host_headers() -> None:
    guard = Guard("127.0.0.1", 8080)
    for host in ("127.0.0.1:8080", "localhost:8080", "[::1]:8080"):
        assert guard.refuse("GET", "/", {"host": host}, {}) is None, host
    for host in ("", "evil:8080", "127.0.0.1:80", "127.0.0.1:80x", "[::1", "::1:8080"):
        refusal = guard.refuse("GET", "/", {"host": host}, {})
        assert getattr(refusal, "status", None) == 421, host
    assert Guard("127.0.0.1", 80).refuse("GET", "/", {"host": "localhost"}, {}) is None
    # On a wildcard address the token guards (the machine's names are not known here).
    wildcard = Guard("0.0.0.0", 8080, "s3cret")
    assert wildcard.refuse("GET", "/", {"host": "cam-box.lan:8080"}, {"token": "s3cret"}) is None
    refusal = wildcard.refuse("GET", "/sources", {"host": "cam-box.lan"}, {"token": "s3cret"})
    assert getattr(refusal, "status", None) == 401, "?token= is for the page only"


# -- 11. bodies: nesting, a client that goes away --------------------------------------------
def test_deeply_nested_json_is_a_400(serving: Any, media: Path, logged: Records) -> None:
    """Before: 5,000 nested `[` in zones crashed the handler (500 plain text, RecursionError)."""
    served = serving(track=True)
    nested = b"[" * 5000 + b"]" * 5000
    body = b'{"name": "c", "uri": "%s", "zones": {"z": %s}}' % (
        str(media / "b.mp4").encode(),
        nested,
    )
    reply = served.post("/sources", body)
    assert reply.status == 400, reply
    assert f"nested over {MAX_DEPTH} levels" in reply.json()["error"]
    assert names(served) == ["a"]
    assert logged.tracebacks() == []


def test_json_depth_counts_brackets_outside_strings() -> None:
    assert json_depth(b'{"a": [[1, 2], [3]]}') == 3
    assert json_depth(b'{"a": "[[[[\\"[[["}') == 1
    assert json_depth(b"[]" * 1000) == 1
    assert json_depth(b"[" * 10_000, limit=400) == 401  # the count stops past the bound


def test_a_client_gone_mid_body_is_one_line(serving: Any, logged: Records) -> None:
    """Before: a ClientDisconnect traceback in the log."""
    served = serving()
    port = served.http.port
    with socket.create_connection(("127.0.0.1", port), timeout=WAIT) as client:
        client.sendall(
            b"POST /sources HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
            b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n"
            b'{"name": "c", ' % port
        )
    wait_until(
        lambda: any("went away" in r.getMessage() for r in logged.records) or logged.tracebacks(),
        WAIT,
        "the disconnect logged",
    )
    assert logged.tracebacks() == []
    lines = [r.getMessage() for r in logged.records]
    assert len(lines) == 1, lines
    assert "\n" not in lines[0]
    assert names(served) == ["a"]


def test_a_body_over_the_limit_is_refused_before_it_is_read(serving: Any) -> None:
    served = serving()
    port = served.http.port
    with socket.create_connection(("127.0.0.1", port), timeout=WAIT) as client:
        client.sendall(
            b"POST /sources HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
            b"Content-Type: application/json\r\nContent-Length: 1000000000\r\n\r\n{" % port
        )
        head = client.recv(4096)  # answered with no more of the gigabyte sent
    assert head.startswith(b"HTTP/1.1 413"), head[:200]


# -- 16. every error is JSON -----------------------------------------------------------------
@pytest.mark.parametrize(
    ("method", "path", "status", "message"),
    [
        ("GET", "/nope", 404, "no route /nope"),
        ("GET", "/sources/a/nope", 404, "no route /sources/a/nope"),
        ("DELETE", "/sources", 405, "DELETE /sources: expected GET, HEAD, POST"),
        ("POST", "/events", 405, "POST /events: expected GET, HEAD"),
        ("POST", "/", 405, "POST /: expected GET, HEAD"),
        ("GET", "/sources/nobody/preview.jpg", 404, "no source named 'nobody'"),
        ("GET", "/sources/nobody/preview.mjpg", 404, "no source named 'nobody'"),
    ],
)
def test_every_error_is_json(
    serving: Any, method: str, path: str, status: int, message: str
) -> None:
    """Before: unknown routes and methods answered plain text, and an unknown camera's preview
    'no preview yet'."""
    served = serving()
    reply = call(served.url + path, method, b"{}" if method == "POST" else None)
    assert reply.status == status, reply
    assert reply.headers["content-type"] == "application/json"
    assert message in reply.json()["error"]


def send(
    served: Served,
    method: str,
    path: str,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> Reply:
    """One request with exactly these headers (urllib would add a form's Content-Type)."""
    connection = http.client.HTTPConnection("127.0.0.1", served.http.port, timeout=WAIT)
    try:
        connection.request(method, path, body=body, headers=headers or {})
        response = connection.getresponse()
        head = {k.lower(): v for k, v in response.getheaders()}
        return Reply(response.status, head, response.read())
    finally:
        connection.close()
