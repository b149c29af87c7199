"""What the service's HTTP API admits: requests for this service alone (its Host, and an Origin of
its own: DNS rebinding and cross-site requests are refused), the token and where it may travel,
a write's content type, and a body's size and nesting. Plain functions over the request's
method, path, headers and query, so each rule is tested without a server."""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

MAX_BODY = 64 * 1024  # a source request is a few hundred bytes; zones a few kB
MAX_DEPTH = 400  # JSON nesting: a zone is 3 deep; Python's parser recurses (RecursionError)
LOCAL_NAMES = ("127.0.0.1", "localhost", "::1")
WILDCARDS = ("0.0.0.0", "::", "")
JSON = "application/json"
WRITES = ("POST", "PUT", "PATCH", "DELETE")


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a request is not served: its HTTP status and one line."""

    status: int
    message: str


@dataclass(frozen=True, slots=True)
class Guard:
    """The service bound to `host`:`port`, asking for `token` ("" none).

    A request must name this service in its Host (127.0.0.1, localhost, ::1 or `host`, with
    `port`): a page of another site that rebinds its DNS name to 127.0.0.1 sends its own name,
    and is refused. A service on a wildcard address (reached by any of the machine's names, or
    through a proxy) has a token, which guards it instead. An Origin, where a browser sends
    one, must be the service's own. The token comes as `Authorization: Bearer TOKEN`, or as
    `?token=` on the page and its images alone (GET): never on a write, which must be
    `Content-Type: application/json` (a form of another site cannot send that without asking
    first, which is never answered); a DELETE carries no body and needs none."""

    host: str
    port: int
    token: str = ""

    def refuse(
        self, method: str, path: str, headers: Mapping[str, str], query: Mapping[str, str]
    ) -> Refusal | None:
        """None when the request may be served; otherwise why not. `headers` by lower-case
        name."""
        host = headers.get("host", "")
        if self.host not in WILDCARDS and not self._names_me(host):
            names = ", ".join(dict.fromkeys(("127.0.0.1", "localhost", self.host)))
            return Refusal(
                421, f"Host '{host}' is not this service: expected {names} with port {self.port}"
            )
        origin = headers.get("origin")
        if origin is not None and urlsplit(origin).netloc.lower() != host.lower():
            return Refusal(403, f"Origin '{origin}': requests from other sites are refused")
        if self.token and not self._authorized(method, path, headers, query):
            where = " or ?token=TOKEN" if _page(method, path) else ""
            return Refusal(401, f"token required: Authorization: Bearer TOKEN{where}")
        if method in WRITES and not _json_or_none(method, headers):
            given = headers.get("content-type", "none")
            return Refusal(415, f"{method} takes Content-Type: {JSON}, got {given}")
        return None

    def _names_me(self, host: str) -> bool:
        name, port = _split_host(host)
        return name in {*LOCAL_NAMES, self.host.strip("[]").lower()} and port == self.port

    def _authorized(
        self, method: str, path: str, headers: Mapping[str, str], query: Mapping[str, str]
    ) -> bool:
        header = headers.get("authorization", "")
        given = header[7:] if header.lower().startswith("bearer ") else ""
        if not given and _page(method, path):  # <img> and a typed URL send no header
            given = query.get("token", "")
        return hmac.compare_digest(given.encode(), self.token.encode())


def _split_host(host: str) -> tuple[str, int]:
    """A Host header's name and port: `name:port`, `[::1]:port`, or either without a port
    (HTTP's 80); port -1 when it is not a number."""
    if host.startswith("["):
        name, _, rest = host[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else rest
    else:
        name, _, port = host.partition(":")
    number = int(port) if port.isascii() and port.isdigit() else -1
    return name.lower(), 80 if port == "" else number


def _page(method: str, path: str) -> bool:
    """The live view and its images: where the token may come in the URL."""
    previews = path.startswith("/sources/") and path.endswith(("/preview.jpg", "/preview.mjpg"))
    return method in ("GET", "HEAD") and (path == "/" or previews)


def _json_or_none(method: str, headers: Mapping[str, str]) -> bool:
    kind = headers.get("content-type")
    if kind is None:
        return method == "DELETE"
    return kind.split(";")[0].strip().lower() == JSON


def json_depth(body: bytes, limit: int = MAX_DEPTH) -> int:
    """How deep `body`'s arrays and objects nest (brackets inside strings not counted); the
    count stops once past `limit`."""
    depth = deepest = 0
    in_string = escaped = False
    for byte in body:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:  # "
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in (0x5B, 0x7B):  # [ {
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > limit:
                    break
        elif byte in (0x5D, 0x7D):  # ] }
            depth -= 1
    return deepest
