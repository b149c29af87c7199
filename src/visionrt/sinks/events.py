"""Events out of the pipeline: the `visionrt.event/1` schema, a publisher whose `publish` never
blocks (a bounded queue, a worker and honest counters per transport), and the `events:` config."""

from __future__ import annotations

import inspect
import json
import logging
import math
import numbers
import re
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from visionrt.errors import ConfigError
from visionrt.sinks.mqtt import MqttTransport
from visionrt.sinks.webhook import WebhookTransport

__all__ = [
    "EVENT_ACTIONS",
    "EVENT_SCHEMA",
    "DeliveryReport",
    "EncodedEvent",
    "EventPublisher",
    "EventTransport",
    "encode_event",
    "event_problems",
    "make_event",
    "parse_event_targets",
]

log = logging.getLogger(__name__)

EVENT_SCHEMA = "visionrt.event/1"
EVENT_ACTIONS: dict[str, frozenset[str]] = {
    "zone": frozenset({"enter", "leave"}),
    "line": frozenset({"in", "out"}),
    "source": frozenset({"added", "removed", "down", "up", "ended"}),
    "slo": frozenset({"step down", "step up"}),
}
_KEYS: tuple[str, ...]
_KEYS = ("schema", "id", "time", "source", "kind", "action", "name", "frame", "timestamp")
_KEYS += ("track_id", "class_name", "detail")
_HEX_ID = re.compile(r"[0-9a-f]{8,64}")

OnDrop = Callable[[str, str], None]


def make_event(
    source: str,
    kind: str,
    action: str,
    *,
    name: str = "",
    frame: int | None = None,
    timestamp: float | None = None,
    track_id: int | None = None,
    class_name: str | None = None,
    detail: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A new event with a fresh `id` and the wall-clock `time`; raises ValueError naming what is
    not a `visionrt.event/1` event (a zone without a name, an action its kind does not have)."""
    event = {
        "schema": EVENT_SCHEMA,
        "id": uuid.uuid4().hex,
        "time": time.time(),
        "source": source,
        "kind": kind,
        "action": action,
        "name": name,
        "frame": frame,
        "timestamp": timestamp,
        "track_id": track_id,
        "class_name": class_name,
        "detail": dict(detail or {}),
    }
    _check(event)
    return event


def event_problems(event: Mapping[str, Any]) -> list[str]:
    """What keeps `event` from being a `visionrt.event/1` event, one "key: expected …, got …"
    line each; empty when it is one. The same rules as docs/events.schema.json."""
    if not isinstance(event, Mapping):
        return [f"expected a JSON object, got {type(event).__name__}"]
    problems = [f"{key}: missing" for key in _KEYS if key not in event]
    problems += [f"{key}: unexpected key (put it in detail)" for key in event if key not in _KEYS]

    def expect(key: str, ok: bool, wanted: str) -> None:
        if key in event and not ok:
            problems.append(f"{key}: expected {wanted}, got {event[key]!r}")

    get = event.get
    kind, name, action, frame = get("kind"), get("name"), get("action"), get("frame")
    event_id = get("id")
    expect("schema", get("schema") == EVENT_SCHEMA, repr(EVENT_SCHEMA))
    expect("id", isinstance(event_id, str) and bool(_HEX_ID.fullmatch(event_id)), "8–64 hex")
    expect("time", _real(get("time")), "unix seconds")
    expect("source", isinstance(get("source"), str) and get("source") != "", "a source name")
    actions = EVENT_ACTIONS.get(kind) if isinstance(kind, str) else None
    expect("kind", actions is not None, " | ".join(EVENT_ACTIONS))
    wanted = " | ".join(sorted(actions or ()))
    expect("action", actions is None or (isinstance(action, str) and action in actions), wanted)
    if kind in ("zone", "line"):
        expect("name", isinstance(name, str) and name != "", f"the {kind}'s name")
    else:
        expect("name", name == "", '"" (only zones and lines have names)')
    expect("frame", frame is None or (_integer(frame) and frame >= 0), "an int ≥ 0 or null")
    expect("timestamp", get("timestamp") is None or _real(get("timestamp")), "seconds or null")
    expect("track_id", get("track_id") is None or _integer(get("track_id")), "an int or null")
    expect("class_name", get("class_name") is None or isinstance(get("class_name"), str), "str")
    expect("detail", isinstance(get("detail"), Mapping), "an object")
    return problems


def _integer(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _real(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


def _check(event: Mapping[str, Any]) -> None:
    problems = event_problems(event)
    if problems:
        raise ValueError(f"not a {EVENT_SCHEMA} event: {'; '.join(problems)}")


@dataclass(frozen=True, slots=True)
class EncodedEvent:
    """An event as transports get it: serialized once, in the publishing thread, so a caller that
    reuses its dict cannot change what is sent; `source` and `kind` route it (MQTT topics)."""

    id: str
    source: str
    kind: str
    payload: bytes  # UTF-8 JSON


def _plain(value: Any) -> Any:
    # NumPy scalars and arrays (a track id straight from Detections) become JSON numbers/lists.
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON")


def encode_event(event: Mapping[str, Any]) -> EncodedEvent:
    """Check and serialize `event`; ValueError names what is wrong with it."""
    _check(event)
    try:
        text = json.dumps(event, separators=(",", ":"), allow_nan=False, default=_plain)
    except (TypeError, ValueError) as err:
        raise ValueError(f"event {event['id']} is not JSON: {err}") from err
    return EncodedEvent(event["id"], event["source"], event["kind"], text.encode())


class DeliveryReport(Protocol):
    """How a transport tells its outcome: each event given to `send` gets exactly one `sent` or
    `dropped`, then or later (an MQTT acknowledgement arrives on paho's thread)."""

    def sent(self) -> None: ...
    def dropped(self, reason: str) -> None: ...
    def retried(self) -> None: ...


class EventTransport(Protocol):
    """One destination. `open` starts it (never blocks on the network), `send` is called from
    the transport's own worker thread, one event at a time, and may block (retries) but returns
    soon after `stop` is set; `close` stops it. `name` keys the publisher's stats."""

    name: str

    def open(self, report: DeliveryReport) -> None: ...
    def send(self, event: EncodedEvent, stop: threading.Event) -> None: ...
    def close(self) -> None: ...


class _Lane:
    """One transport's queue, worker thread and counters under one lock, so every snapshot has
    published == sent + dropped + queued (queued: waiting, being sent, or awaiting an ack)."""

    def __init__(
        self, name: str, transport: EventTransport, capacity: int, on_drop: OnDrop | None
    ) -> None:
        self.name, self.transport, self.capacity, self._on_drop = name, transport, capacity, on_drop
        self._waiting: deque[EncodedEvent] = deque()
        self._cond = threading.Condition()
        self._counts = dict.fromkeys(("published", "sent", "dropped", "retried", "queued"), 0)
        self._accepting, self._final = True, False
        self._reasons_logged: set[str] = set()
        self.stop = threading.Event()
        self._thread = threading.Thread(target=self._work, name=f"events {name}", daemon=True)
        transport.open(self)
        self._thread.start()

    def offer(self, event: EncodedEvent) -> bool:
        with self._cond:
            self._counts["published"] += 1
            if self._accepting and len(self._waiting) < self.capacity:
                self._waiting.append(event)
                self._counts["queued"] += 1
                self._cond.notify_all()
                return True
            self._counts["dropped"] += 1
        self._report_drop("queue full" if self._accepting else "publisher closed")
        return False

    def sent(self) -> None:
        self._resolve("sent")

    def dropped(self, reason: str) -> None:
        if self._resolve("dropped"):
            self._report_drop(reason)

    def retried(self) -> None:
        with self._cond:
            if not self._final:
                self._counts["retried"] += 1

    def _resolve(self, outcome: str) -> bool:
        with self._cond:
            if self._final:  # already counted dropped ("closing") when the publisher closed
                return False
            self._counts[outcome] += 1
            self._counts["queued"] -= 1
            self._cond.notify_all()
            return True

    def _report_drop(self, reason: str) -> None:
        if reason not in self._reasons_logged:  # once per reason: a dead receiver drops many
            self._reasons_logged.add(reason)
            log.warning("events to %s dropped: %s (counted in stats)", self.name, reason)
        if self._on_drop is not None:
            try:
                self._on_drop(self.name, reason)
            except Exception:  # the caller's hook must not kill the worker or the pipeline
                log.exception("on_drop(%r, %r) failed", self.name, reason)

    def _work(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: bool(self._waiting) or self.stop.is_set())
                if self.stop.is_set():
                    return
                event = self._waiting.popleft()
            try:
                self.transport.send(event, self.stop)
            except Exception as err:  # a transport's bug costs one event, counted, not the lane
                log.exception("events to %s: sending %s failed", self.name, event.id)
                self.dropped(f"error: {type(err).__name__}")

    def stats(self) -> dict[str, int]:
        with self._cond:
            return dict(self._counts)

    def drain(self, deadline: float) -> None:
        with self._cond:
            self._accepting = False
            self._cond.wait_for(
                lambda: self._counts["queued"] == 0, timeout=max(0.0, deadline - time.monotonic())
            )

    def finish(self, deadline: float) -> None:
        self.stop.set()
        with self._cond:
            self._cond.notify_all()
        self._thread.join(timeout=max(0.0, deadline - time.monotonic()))
        try:
            self.transport.close()
        except Exception:
            log.exception("closing events to %s failed", self.name)
        with self._cond:
            self._final, self._accepting = True, False
            lost, self._counts["queued"] = self._counts["queued"], 0
            self._counts["dropped"] += lost
            self._waiting.clear()
        for _ in range(lost):
            self._report_drop("closing")


class EventPublisher:
    """Sends each published event to every transport; thread-safe.

    `publish` never waits on the network: it checks and serializes the event, then appends it to
    each transport's queue of `capacity` events (the one being sent not included). A full queue
    drops the new event, counts it and calls `on_drop(transport_name, reason)` from the
    publishing thread; drops found later (retries exhausted, a broker's queue full) call it from
    the transport's thread, so keep it quick. `stats()` gives per transport published, sent,
    dropped, retried and queued, with published == sent + dropped + queued."""

    def __init__(
        self,
        transports: Iterable[EventTransport],
        capacity: int = 1000,
        on_drop: OnDrop | None = None,
    ) -> None:
        if not _integer(capacity) or capacity < 1:
            raise ConfigError(f"capacity: expected an integer ≥ 1, got {capacity!r}")
        self._lanes: list[_Lane] = []
        self._lock = threading.Lock()
        self._closed = False
        try:
            for transport in transports:
                name, number = transport.name, 2
                while any(lane.name == name for lane in self._lanes):  # two hooks to one URL
                    name, number = f"{transport.name} #{number}", number + 1
                self._lanes.append(_Lane(name, transport, capacity, on_drop))
        except BaseException:  # a transport that cannot open: stop the threads already started
            self.close(timeout=0.0)
            raise

    def publish(self, event: Mapping[str, Any]) -> bool:
        """Queue `event` for every transport; False when at least one dropped it (counted).
        Raises ValueError for something that is not a `visionrt.event/1` event (a bug)."""
        encoded = encode_event(event)
        accepted = True
        for lane in self._lanes:
            accepted = lane.offer(encoded) and accepted
        return accepted

    def stats(self) -> dict[str, dict[str, int]]:
        return {lane.name: lane.stats() for lane in self._lanes}

    def close(self, timeout: float = 5.0) -> None:
        """Send what can be sent within `timeout` seconds, then stop; the rest is counted
        dropped ("closing"). Later `publish` calls are dropped ("publisher closed"). An HTTP
        request under way when time is up may still arrive after being counted dropped."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        deadline = time.monotonic() + timeout
        for lane in self._lanes:
            lane.drain(deadline)
        for lane in self._lanes:
            lane.finish(deadline)

    def __enter__(self) -> EventPublisher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def parse_event_targets(
    config: Mapping[str, Any] | None, where: str = "events"
) -> list[EventTransport]:
    """Transports from a config section `{"mqtt": {host, port, topic, …}, "webhooks": [{url, …}]}`
    (both optional); a ConfigError names the key, as in `events.webhooks[0].url: …`."""
    if config is None:
        return []
    if not isinstance(config, Mapping):
        raise ConfigError(f"{where}: expected a mapping with mqtt and/or webhooks, got {config!r}")
    for key in config:
        if key not in ("mqtt", "webhooks"):
            raise ConfigError(f"{where}.{key}: unknown key (expected mqtt, webhooks)")
    targets: list[EventTransport] = []
    if config.get("mqtt") is not None:
        targets.append(_build(MqttTransport, config["mqtt"], f"{where}.mqtt"))
    hooks = config.get("webhooks") or []
    if not isinstance(hooks, list):
        raise ConfigError(f"{where}.webhooks: expected a list of {{url: …}}, got {hooks!r}")
    for index, hook in enumerate(hooks):
        targets.append(_build(WebhookTransport, hook, f"{where}.webhooks[{index}]"))
    return targets


def _build(kind: type[Any], options: Any, where: str) -> Any:
    # The constructor's parameters are the keys: one list to keep in step, not two.
    if not isinstance(options, Mapping):
        raise ConfigError(f"{where}: expected a mapping, got {options!r}")
    parameters = inspect.signature(kind).parameters
    for key in options:
        if key not in parameters:
            raise ConfigError(f"{where}.{key}: unknown key (expected {', '.join(parameters)})")
    for key, parameter in parameters.items():
        if parameter.default is inspect.Parameter.empty and key not in options:
            raise ConfigError(f"{where}.{key}: missing")
    try:
        return kind(**options)
    except ConfigError as err:
        raise ConfigError(f"{where}.{err}") from err
