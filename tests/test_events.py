"""Events to MQTT (a real mosquitto) and webhooks (a local receiver): delivery, a broker that goes
away, retries and drops counted, a publish that never waits, the config section, the schema."""

from __future__ import annotations

import collections
import importlib.util
import json
import re
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import HANG_SECONDS, finishes
from services import (  # noqa: F401 (fixtures, found by pytest by name)
    Mosquitto,
    WebhookReceiver,
    free_port,
    mosquitto_service,
    wait_until,
    webhook_receiver_service,
)

from visionrt.errors import BackendUnavailable, ConfigError
from visionrt.sinks.events import (
    EVENT_ACTIONS,
    EncodedEvent,
    EventPublisher,
    encode_event,
    event_problems,
    make_event,
    parse_event_targets,
)
from visionrt.sinks.mqtt import MqttTransport
from visionrt.sinks.webhook import WebhookTransport

DOCS = Path(__file__).resolve().parents[1] / "docs"
needs_paho = pytest.mark.skipif(
    importlib.util.find_spec("paho") is None, reason="needs paho-mqtt (the serve extra)"
)


def zone_event(index: int, source: str = "cam-1") -> dict[str, Any]:
    return make_event(
        source, "zone", "enter" if index % 2 else "leave", name="door", frame=index,
        timestamp=index / 25, track_id=index, class_name="person", detail={"index": index},
    )  # fmt: skip


def balanced(stats: dict[str, int]) -> bool:
    return stats["published"] == stats["sent"] + stats["dropped"] + stats["queued"]


class Drops:
    """An `on_drop` that records (transport, reason) pairs; thread-safe."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []
        self._lock = threading.Lock()

    def __call__(self, transport: str, reason: str) -> None:
        with self._lock:
            self.seen.append((transport, reason))

    def reasons(self) -> collections.Counter[str]:
        with self._lock:
            return collections.Counter(reason for _, reason in self.seen)


# -- MQTT through a real broker ------------------------------------------------------------------
class Subscriber:
    """A paho subscriber to `topic/#` (QoS 1) that records (topic, event) per message. With a
    fixed client id and clean_session=False the broker keeps its session across a restart."""

    def __init__(self, broker: Mosquitto, topic: str) -> None:
        import paho.mqtt.client as mqtt

        self.messages: list[tuple[str, dict[str, Any]]] = []
        self._lock = threading.Lock()
        subscribed = threading.Event()
        self.client = mqtt.Client(
            mqtt.CallbackAPIVersion.VERSION2, client_id=f"test-sub-{uuid.uuid4().hex[:8]}",
            clean_session=False,
        )  # fmt: skip
        self.client.reconnect_delay_set(min_delay=1, max_delay=1)
        self.client.on_connect = lambda client, *_: client.subscribe(f"{topic}/#", qos=1)
        self.client.on_subscribe = lambda *_: subscribed.set()
        self.client.on_message = self._on_message
        self.client.connect(broker.host, broker.port)
        self.client.loop_start()
        assert subscribed.wait(10), "the subscription was not acknowledged"

    def _on_message(self, client: Any, userdata: Any, message: Any) -> None:
        with self._lock:
            self.messages.append((message.topic, json.loads(message.payload)))

    def ids(self) -> list[str]:
        """Event ids in arrival order, duplicates (at-least-once redelivery) removed."""
        with self._lock:
            return list(dict.fromkeys(event["id"] for _, event in self.messages))

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


@pytest.fixture
def topic() -> str:
    return f"test-{uuid.uuid4().hex[:8]}/events"


@pytest.fixture
def subscriber(mosquitto: Mosquitto, topic: str) -> Iterator[Subscriber]:
    pytest.importorskip("paho.mqtt.client", reason="needs paho-mqtt (the serve extra)")
    subscribed = Subscriber(mosquitto, topic)
    yield subscribed
    subscribed.close()


def test_mqtt_delivers_every_event_acknowledged(
    mosquitto: Mosquitto, subscriber: Subscriber, topic: str
) -> None:
    transport = MqttTransport(port=mosquitto.port, topic=topic)
    events = [zone_event(index, source=f"cam/{index % 2}") for index in range(200)]
    events += [make_event("lobby", "slo", "step down", detail={"every": 2})]
    with EventPublisher([transport]) as publisher:
        assert all(publisher.publish(event) for event in events)
        wait_until(
            lambda: len(subscriber.ids()) == len(events), what="201 events at the subscriber"
        )
        wait_until(lambda: publisher.stats()[transport.name]["queued"] == 0, what="all acks")
        stats = publisher.stats()[transport.name]
    assert stats == {"published": 201, "sent": 201, "dropped": 0, "retried": 0, "queued": 0}
    assert subscriber.ids() == [event["id"] for event in events]  # in order, none lost
    topics = {event["id"]: name for name, event in subscriber.messages}
    # A "/" in a source name stays inside one topic level.
    assert topics[events[0]["id"]] == f"{topic}/cam_0/zone"
    assert topics[events[1]["id"]] == f"{topic}/cam_1/zone"
    assert topics[events[-1]["id"]] == f"{topic}/lobby/slo"
    assert next(event for _, event in subscriber.messages) == events[0]


def test_an_mqtt_event_waits_behind_those_queued_before_the_socket() -> None:
    """paho sends what it queued while it had no socket only after the broker's CONNACK, and
    what is published on the socket meanwhile at once: without waiting, an event published
    while the connection comes up overtook the ones before it (the subscriber saw them out of
    order, once in a full suite run). A fake paho client stands in, so the order is the
    test's, not the network's."""
    mqtt = pytest.importorskip("paho.mqtt.client", reason="paho-mqtt (visionrt[serve])")
    published: list[int] = []
    looked = threading.Event()
    transport = MqttTransport()

    class Info:
        def __init__(self, mid: int, rc: int) -> None:
            self.mid, self.rc = mid, rc

    class FakeClient:
        sock: object | None = None

        def publish(self, topic: str, payload: bytes, qos: int) -> Info:
            # paho makes its socket only after on_pre_connect, which waits for this lock: a
            # send that looked and saw no socket publishes before one can come up.
            assert transport._sending.locked(), "published outside the look's lock"
            published.append(len(published) + 1)
            no_socket = self.sock is None
            return Info(
                published[-1], mqtt.MQTT_ERR_NO_CONN if no_socket else mqtt.MQTT_ERR_SUCCESS
            )

    class Watched(threading.Condition):
        def wait(self, timeout: float | None = None) -> bool:
            looked.set()  # a send waits for the queued ones
            return super().wait(timeout)

    class Report:
        def __init__(self) -> None:
            self.sent_count = 0

        def sent(self) -> None:
            self.sent_count += 1

        def dropped(self, reason: str) -> None:
            raise AssertionError(reason)

        def retried(self) -> None:
            pass

    client, report = FakeClient(), Report()
    transport._client, transport._report = client, report  # open() without paho's thread
    transport._flushed = Watched(transport._lock)
    stop = threading.Event()
    first, second = (EncodedEvent(f"e{i}", "cam", "zone", b"{}") for i in (1, 2))
    transport.send(first, stop)  # no socket yet: paho queues it
    transport._on_pre_connect(None, None)  # paho's thread, about to make its socket
    client.sock = object()  # the socket is up, the CONNACK not in yet
    sending = threading.Thread(target=transport.send, args=(second, stop), daemon=True)
    sending.start()
    wait_until(
        lambda: looked.is_set() or len(published) == 2, what="the second send, waiting or not"
    )
    assert published == [1], "the second event went out ahead of the first"
    transport._on_publish(None, None, 1, None, None)  # the first one's PUBACK, after CONNACK
    sending.join(HANG_SECONDS)
    assert not sending.is_alive()
    assert published == [1, 2]
    assert report.sent_count == 1  # the second one's acknowledgement is still to come


def test_mqtt_broker_down_queues_a_bounded_number_and_counts_the_rest(
    mosquitto: Mosquitto, subscriber: Subscriber, topic: str
) -> None:
    drops = Drops()
    transport = MqttTransport(port=mosquitto.port, topic=topic, max_queued=100)
    publisher = EventPublisher([transport], capacity=1000, on_drop=drops)
    before = [zone_event(index) for index in range(5)]
    for event in before:
        publisher.publish(event)
    wait_until(lambda: publisher.stats()[transport.name]["sent"] == 5, what="5 acknowledged")

    mosquitto.stop()
    wait_until(lambda: not transport.connected, what="the client to notice the broker left")
    during = [zone_event(index) for index in range(1000)]
    # Structural check that publish never waits on the network: 1000 calls finish while nothing
    # at all can be sent.
    publishing = threading.Thread(target=lambda: [publisher.publish(e) for e in during])
    publishing.start()
    publishing.join(timeout=HANG_SECONDS)
    assert not publishing.is_alive(), "publish() blocked while the broker was down"
    wait_until(lambda: publisher.stats()[transport.name]["dropped"] == 900, what="900 dropped")
    stats = publisher.stats()[transport.name]
    # sent means acknowledged: handing 100 events to paho did not count them.
    assert stats == {"published": 1005, "sent": 5, "dropped": 900, "retried": 0, "queued": 100}
    assert drops.reasons() == {"broker unreachable": 900}

    mosquitto.start()
    wait_until(lambda: publisher.stats()[transport.name]["queued"] == 0, what="the queue sent")
    wait_until(lambda: len(subscriber.ids()) == 105, what="105 events at the subscriber")
    publisher.close()
    stats = publisher.stats()[transport.name]
    assert stats == {"published": 1005, "sent": 105, "dropped": 900, "retried": 0, "queued": 0}
    # The first 100 of the outage waited and arrived, in order; the rest were the ones dropped.
    assert subscriber.ids() == [event["id"] for event in before + during[:100]]


@needs_paho
def test_mqtt_broker_absent_neither_fails_nor_blocks() -> None:
    drops = Drops()
    transport = MqttTransport(port=free_port(), qos=1)
    publisher = EventPublisher([transport], on_drop=drops)
    assert all(publisher.publish(zone_event(index)) for index in range(10))
    wait_until(lambda: publisher.stats()[transport.name]["queued"] == 10, what="10 queued")
    publisher.close(timeout=0.2)
    stats = publisher.stats()[transport.name]
    assert stats == {"published": 10, "sent": 0, "dropped": 10, "retried": 0, "queued": 0}
    assert drops.reasons() == {"closing": 10}
    assert transport.connected is False


# -- webhooks -----------------------------------------------------------------------------------
def webhook(url: str, **options: Any) -> WebhookTransport:
    return WebhookTransport(url, **{"timeout": 5.0, "backoff": 0.01, **options})


def test_webhook_retries_until_the_receiver_recovers(webhook_receiver: WebhookReceiver) -> None:
    webhook_receiver.fail_first = 3
    transport = webhook(webhook_receiver.url, attempts=5)
    events = [zone_event(index) for index in range(6)]
    with EventPublisher([transport]) as publisher:
        for event in events:
            publisher.publish(event)
        wait_until(lambda: publisher.stats()[transport.name]["queued"] == 0, what="all sent")
        stats = publisher.stats()[transport.name]
    assert stats == {"published": 6, "sent": 6, "dropped": 0, "retried": 3, "queued": 0}
    assert webhook_receiver.ids == [event["id"] for event in events]  # one worker: in order
    assert webhook_receiver.bodies[0] == events[0]
    assert set(webhook_receiver.content_types) == {"application/json"}
    assert webhook_receiver.requests == 9


@pytest.mark.parametrize(
    ("status", "requests", "reason"),
    [
        (400, 1, "rejected: HTTP 400"),
        (404, 1, "rejected: HTTP 404"),
        (301, 1, "rejected: HTTP 301"),  # a POST is not replayed as a GET elsewhere
        (408, 3, "gave up after 3 attempts"),
        (429, 3, "gave up after 3 attempts"),
        (500, 3, "gave up after 3 attempts"),
        (503, 3, "gave up after 3 attempts"),
    ],
)
def test_webhook_failures_retried_or_not(
    webhook_receiver: WebhookReceiver, status: int, requests: int, reason: str
) -> None:
    webhook_receiver.status = status
    drops = Drops()
    transport = webhook(webhook_receiver.url, attempts=3)
    with EventPublisher([transport], on_drop=drops) as publisher:
        publisher.publish(zone_event(0))
        publisher.publish(zone_event(1))
        wait_until(lambda: publisher.stats()[transport.name]["queued"] == 0, what="both done")
        stats = publisher.stats()[transport.name]
    retried = 2 * (requests - 1)
    assert stats == {"published": 2, "sent": 0, "dropped": 2, "retried": retried, "queued": 0}
    assert webhook_receiver.requests == 2 * requests
    assert drops.seen == [(transport.name, reason)] * 2


def test_webhook_to_a_dead_port_counts_drops() -> None:
    drops = Drops()
    transport = webhook(f"http://127.0.0.1:{free_port()}/hook", attempts=2)
    with EventPublisher([transport], on_drop=drops) as publisher:
        assert all(publisher.publish(zone_event(index)) for index in range(20))
        wait_until(lambda: publisher.stats()[transport.name]["dropped"] == 20, what="20 dropped")
        stats = publisher.stats()[transport.name]
    assert stats == {"published": 20, "sent": 0, "dropped": 20, "retried": 20, "queued": 0}
    assert drops.reasons() == {"gave up after 2 attempts": 20}


def test_webhook_bounded_queue_drops_the_newest_and_counts_exactly(
    webhook_receiver: WebhookReceiver,
) -> None:
    webhook_receiver.gate.clear()  # the receiver hangs on every request until released
    drops = Drops()
    transport = webhook(webhook_receiver.url, attempts=1)
    publisher = EventPublisher([transport], capacity=10, on_drop=drops)
    events = [zone_event(index) for index in range(50)]
    # All 50 calls return while the receiver holds the first request: publish never waits.
    accepted = [publisher.publish(event) for event in events]
    stats = publisher.stats()[transport.name]
    assert stats["sent"] == 0
    # Ten wait in the queue, plus the one the worker may already have taken.
    assert stats["dropped"] in (39, 40)
    assert stats["queued"] == 50 - stats["dropped"]
    # The new events were dropped, not the ones waiting (the worker may take one in between).
    assert accepted[:10] == [True] * 10
    assert accepted.count(False) == stats["dropped"]
    assert accepted[-1] is False
    assert drops.reasons() == {"queue full": stats["dropped"]}

    webhook_receiver.gate.set()
    samples = []
    while publisher.stats()[transport.name]["queued"]:
        samples.append(publisher.stats()[transport.name])
        time.sleep(0.001)
    publisher.close()
    assert all(balanced(sample) for sample in samples)
    final = publisher.stats()[transport.name]
    assert final["sent"] == 50 - stats["dropped"] == len(webhook_receiver.bodies)
    kept = [event["id"] for event, ok in zip(events, accepted, strict=True) if ok]
    assert webhook_receiver.ids == kept


def test_close_interrupts_the_backoff_and_counts_what_was_left(
    webhook_receiver: WebhookReceiver,
) -> None:
    webhook_receiver.status = 500
    drops = Drops()
    # A backoff longer than the hang guard: a close that waited for it would never return.
    backoff = 2 * HANG_SECONDS
    transport = webhook(webhook_receiver.url, attempts=5, backoff=backoff, max_backoff=backoff)
    publisher = EventPublisher([transport], on_drop=drops)
    publisher.publish(zone_event(0))
    publisher.publish(zone_event(1))
    wait_until(lambda: publisher.stats()[transport.name]["retried"] == 1, what="a first retry")
    finishes(lambda: publisher.close(timeout=0.1), "close() during the backoff")
    assert publisher.stats()[transport.name] == {
        "published": 2, "sent": 0, "dropped": 2, "retried": 1, "queued": 0,
    }  # fmt: skip
    assert drops.reasons() == {"closing": 2}
    assert publisher.publish(zone_event(2)) is False
    assert drops.reasons()["publisher closed"] == 1
    assert balanced(publisher.stats()[transport.name])


def test_one_publish_reaches_every_transport_and_names_stay_apart(
    webhook_receiver: WebhookReceiver,
) -> None:
    first, second = webhook(webhook_receiver.url), webhook(webhook_receiver.url)
    with EventPublisher([first, second]) as publisher:
        publisher.publish(zone_event(0))
        wait_until(lambda: len(webhook_receiver.bodies) == 2, what="two deliveries")
        names = list(publisher.stats())
    assert names == [first.name, f"{first.name} #2"]
    assert first.name == f"webhook {webhook_receiver.url}"


def test_a_failing_on_drop_hook_does_not_break_publish(
    webhook_receiver: WebhookReceiver,
) -> None:
    def hook(transport: str, reason: str) -> None:
        raise RuntimeError("the hook is broken")

    webhook_receiver.gate.clear()
    webhook_receiver.status = 500
    transport = webhook(webhook_receiver.url, attempts=1)
    with EventPublisher([transport], capacity=1, on_drop=hook) as publisher:
        # The hook raises in the publishing thread (queue full) and in the worker (gave up).
        results = [publisher.publish(zone_event(index)) for index in range(5)]
        webhook_receiver.gate.set()
        wait_until(lambda: publisher.stats()[transport.name]["queued"] == 0, what="all done")
    assert results.count(False) >= 3
    assert publisher.stats()[transport.name]["dropped"] == 5
    assert webhook_receiver.requests == results.count(True)


def test_mqtt_without_paho_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "paho.mqtt.client", None)  # import fails as if absent
    with pytest.raises(BackendUnavailable, match=re.escape("pip install 'visionrt[serve]'")):
        parse_event_targets({"mqtt": {}})


# -- the config section -------------------------------------------------------------------------
@needs_paho
def test_config_builds_the_transports() -> None:
    targets = parse_event_targets(
        {
            "mqtt": {"host": "broker.local", "port": 8883, "topic": "site/events", "qos": 2},
            "webhooks": [
                {"url": "https://hooks.example/a?token=s3cret", "attempts": 2},
                {"url": "http://10.0.0.5:8080/events", "headers": {"Authorization": "Bearer x"}},
            ],
        }
    )
    mqtt, first, second = targets
    assert isinstance(mqtt, MqttTransport)
    assert (mqtt.host, mqtt.port, mqtt.topic, mqtt.qos) == ("broker.local", 8883, "site/events", 2)
    assert isinstance(first, WebhookTransport)
    assert first.attempts == 2
    assert "s3cret" not in first.name  # a token in the query stays out of stats and logs
    assert isinstance(second, WebhookTransport)
    assert second.headers["Authorization"] == "Bearer x"
    assert parse_event_targets(None) == [] == parse_event_targets({})


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"mqqt": {}}, "events.mqqt: unknown key"),
        ({"mqtt": {"port": 70000}}, "events.mqtt.port: expected an integer 1–65535, got 70000"),
        ({"mqtt": {"port": "1883"}}, "events.mqtt.port:"),
        ({"mqtt": {"qos": 3}}, "events.mqtt.qos: expected 0, 1 or 2, got 3"),
        ({"mqtt": {"topic": "a/#"}}, "events.mqtt.topic:"),
        ({"mqtt": {"prot": 1}}, "events.mqtt.prot: unknown key"),
        ({"mqtt": {"password": "x"}}, "events.mqtt.password:"),
        ({"mqtt": "localhost"}, "events.mqtt: expected a mapping"),
        ({"webhooks": {"url": "http://h"}}, "events.webhooks: expected a list"),
        ({"webhooks": [{}]}, "events.webhooks[0].url: missing"),
        ({"webhooks": [{"url": "ftp://h/x"}]}, "events.webhooks[0].url: expected an http"),
        ({"webhooks": [{"url": "http://h:99999/"}]}, "events.webhooks[0].url:"),
        ({"webhooks": [{"url": "http://u:p@h/"}]}, "events.webhooks[0].url: credentials go in"),
        ({"webhooks": [{"url": "http://h", "attempts": 0}]}, "events.webhooks[0].attempts:"),
        ({"webhooks": [{"url": "http://h", "timeout": 0}]}, "events.webhooks[0].timeout:"),
        ({"webhooks": [{"url": "http://h", "backoff": 5, "max_backoff": 1}]}, "max_backoff:"),
        ({"webhooks": [{"url": "http://h", "headers": {"X": 1}}]}, "[0].headers: expected"),
        ({"webhooks": [{"url": "http://h"}, {"url": "h"}]}, "events.webhooks[1].url:"),
    ],
)
def test_config_errors_name_the_key(config: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_event_targets(config)
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


# -- the schema ---------------------------------------------------------------------------------
def examples() -> list[dict[str, Any]]:
    return [
        zone_event(1),
        make_event("gate", "line", "out", name="entrance", frame=0, timestamp=0.0, track_id=7,
                   class_name="car", detail={"in": 3, "out": 5}),
        make_event("cam-2", "source", "down", detail={"error": "connection refused"}),
        make_event("cam-2", "source", "ended"),
        make_event("lobby", "slo", "step up", detail={"level": 1}),
    ]  # fmt: skip


def documented_example() -> dict[str, Any]:
    text = (DOCS / "events.md").read_text(encoding="utf-8")
    block = re.search(r"```json\n(.*?)```", text, re.S)
    assert block is not None, "docs/events.md has no ```json example"
    return dict(json.loads(block.group(1)))


def test_events_match_the_schema_file() -> None:
    # jsonschema is not a dependency: the schema's required keys and enums are compared with the
    # rules event_problems applies, and the events are checked by those rules.
    schema = json.loads((DOCS / "events.schema.json").read_text(encoding="utf-8"))
    for event in [*examples(), documented_example()]:
        assert event_problems(event) == [], event
        assert list(event) == schema["required"]
        assert set(event) <= set(schema["properties"])
    assert schema["properties"]["kind"]["enum"] == list(EVENT_ACTIONS)
    by_kind = {rule["if"]["properties"]["kind"]["const"]: rule["then"] for rule in schema["allOf"]}
    for kind, then in by_kind.items():
        assert set(then["properties"]["action"]["enum"]) == EVENT_ACTIONS[kind]
        named = kind in ("zone", "line")
        assert then["properties"]["name"] == ({"minLength": 1} if named else {"const": ""})
    assert set(by_kind) == set(EVENT_ACTIONS)


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"kind": "person"}, "kind: expected zone | line | source | slo"),
        ({"kind": ["zone"]}, "kind: expected zone"),
        ({"action": ["enter"]}, "action: expected enter | leave"),
        ({"action": "arrive"}, "action: expected enter | leave"),
        ({"name": ""}, "name: expected the zone's name"),
        ({"frame": -1}, "frame:"),
        ({"frame": 1.5}, "frame:"),
        ({"track_id": True}, "track_id:"),
        ({"time": float("nan")}, "time:"),
        ({"id": "not hex"}, "id:"),
        ({"schema": "visionrt.event/2"}, "schema:"),
        ({"detail": None}, "detail:"),
        ({"colour": "red"}, "colour: unexpected key"),
    ],
)
def test_bad_events_are_named(change: dict[str, Any], problem: str) -> None:
    event = {**zone_event(1), **change}
    assert any(line.startswith(problem) for line in event_problems(event)), event_problems(event)
    with pytest.raises(ValueError, match=re.escape(problem)):
        EventPublisher([]).publish(event)


def test_missing_keys_and_source_names() -> None:
    event = zone_event(1)
    del event["track_id"]
    assert event_problems(event) == ["track_id: missing"]
    with pytest.raises(ValueError, match="name"):
        make_event("cam", "source", "down", name="door")


def test_numpy_values_become_json_numbers() -> None:
    event = zone_event(1)
    event.update(track_id=np.int64(4), timestamp=np.float32(0.5), detail={"box": np.arange(4)})
    decoded = json.loads(encode_event(event).payload)
    assert (decoded["track_id"], decoded["timestamp"]) == (4, 0.5)
    assert decoded["detail"]["box"] == [0, 1, 2, 3]
