"""Events to an HTTP endpoint: one JSON POST per event, retried with capped exponential backoff
while the receiver may recover (5xx, 408, 429, no connection, timeout), dropped otherwise."""

from __future__ import annotations

import http.client
import logging
import math
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from email.message import Message
from typing import TYPE_CHECKING, Any

from visionrt.errors import ConfigError

if TYPE_CHECKING:  # the publisher passes these in; importing it here would be a cycle
    from visionrt.sinks.events import DeliveryReport, EncodedEvent

log = logging.getLogger(__name__)

_RETRIED_4XX = frozenset({408, 429})


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """urllib would replay a redirected POST as a GET without the event; a hook that moved is a
    config to fix, so the 3xx is reported (rejected) as it is."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


class WebhookTransport:
    """POSTs each event as `application/json` to `url`, one at a time, in order.

    2xx is sent. 5xx, 408, 429, a refused or reset connection and a timeout (`timeout` seconds
    per request) are tried again after `backoff`, 2×, 4×… seconds, at most `max_backoff` (or a
    longer `Retry-After`, within `max_backoff`), up to `attempts` tries in all; then the event is
    dropped ("gave up after N attempts"). Any other status (4xx, 3xx) is dropped at once
    ("rejected: HTTP 404"). Closing interrupts the wait between tries. `headers` are sent with
    every request (an `Authorization` token); the query and user of `url` stay out of `name`."""

    def __init__(
        self,
        url: str,
        timeout: float = 5.0,
        attempts: int = 5,
        backoff: float = 0.5,
        max_backoff: float = 10.0,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        try:
            parts = urllib.parse.urlsplit(url) if isinstance(url, str) else None
            port = parts.port if parts is not None else None
        except ValueError:  # a port out of range or not a number
            parts = None
        if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError(f"url: expected an http:// or https:// URL, got {url!r}")
        if parts.username is not None:  # urllib would take "user:pass@host" for the host
            raise ConfigError("url: credentials go in headers (Authorization), not in the URL")
        _check(_number(timeout) and timeout > 0, "timeout", "seconds > 0", timeout)
        _check(_integer(attempts) and attempts >= 1, "attempts", "an integer ≥ 1", attempts)
        _check(_number(backoff) and backoff >= 0, "backoff", "seconds ≥ 0", backoff)
        _check(
            _number(max_backoff) and max_backoff >= backoff,
            "max_backoff",
            f"seconds ≥ backoff ({backoff})",
            max_backoff,
        )
        headers = headers or {}
        if not isinstance(headers, Mapping) or not all(
            isinstance(key, str) and isinstance(value, str) for key, value in headers.items()
        ):  # the values are not shown: they can be secrets
            raise ConfigError("headers: expected a mapping of strings to strings")
        self.url, self.timeout, self.attempts = url, float(timeout), attempts
        self.backoff, self.max_backoff = float(backoff), float(max_backoff)
        self.headers = {"Content-Type": "application/json", "User-Agent": "visionrt", **headers}
        netloc = parts.hostname + (f":{port}" if port else "")
        self.name = f"webhook {parts.scheme}://{netloc}{parts.path}"
        self._opener = urllib.request.build_opener(_NoRedirect)
        self._report: DeliveryReport | None = None
        self._errors_logged: set[str] = set()

    def open(self, report: DeliveryReport) -> None:
        self._report = report

    def send(self, event: EncodedEvent, stop: threading.Event) -> None:
        assert self._report is not None, "send before open"
        report = self._report
        for attempt in range(1, self.attempts + 1):
            if stop.is_set():  # closing: the publisher counts what is left
                return
            status, error, retry_after = self._post(event.payload)
            if status is not None and 200 <= status < 300:
                report.sent()
                return
            if status is not None and status < 500 and status not in _RETRIED_4XX:
                report.dropped(f"rejected: HTTP {status}")
                return
            if attempt == self.attempts:
                break
            delay = min(self.backoff * 2 ** (attempt - 1), self.max_backoff)
            if retry_after is not None:
                delay = min(max(delay, retry_after), self.max_backoff)
            report.retried()
            if stop.wait(delay):
                return
        if error not in self._errors_logged:  # the reason is stable; say once what caused it
            self._errors_logged.add(error)
            log.warning("%s: gave up on an event after %s", self.name, error)
        report.dropped(f"gave up after {self.attempts} attempt{'s' if self.attempts > 1 else ''}")

    def close(self) -> None:
        """Nothing to release: each request opens and closes its own connection."""

    def _post(self, payload: bytes) -> tuple[int | None, str, float | None]:
        """(status or None when no response came, what went wrong, Retry-After seconds)."""
        request = urllib.request.Request(
            self.url, data=payload, headers=self.headers, method="POST"
        )
        try:
            with self._opener.open(request, timeout=self.timeout) as response:
                response.read()  # a whole exchange, so the receiver does not see a reset
                return response.status, "", None
        except urllib.error.HTTPError as err:
            with err:
                return err.code, f"HTTP {err.code}", _retry_after(err.headers)
        except (urllib.error.URLError, http.client.HTTPException, OSError) as err:
            reason = getattr(err, "reason", err)  # URLError wraps the socket error
            return None, f"{type(reason).__name__}: {reason}", None


def _retry_after(headers: Message | None) -> float | None:
    # Only the seconds form; an HTTP date falls back to the backoff.
    value = headers.get("Retry-After", "") if headers is not None else ""
    try:
        seconds = float(value)
    except ValueError:
        return None
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check(ok: bool, key: str, wanted: str, value: Any) -> None:
    if not ok:
        raise ConfigError(f"{key}: expected {wanted}, got {value!r}")
