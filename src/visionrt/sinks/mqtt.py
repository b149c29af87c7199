"""Events to an MQTT broker (paho-mqtt 2.x): `sent` means acknowledged by the broker, and while
the broker is down a bounded number of events wait in the client and go out on reconnect."""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any

from visionrt.errors import BackendUnavailable, ConfigError

if TYPE_CHECKING:  # the publisher passes these in; importing it here would be a cycle
    from visionrt.sinks.events import DeliveryReport, EncodedEvent

log = logging.getLogger(__name__)

_EXTRA = "pip install 'visionrt[serve]'"
# How often a send waiting behind paho's backlog looks at its socket and the stop event.
_BACKLOG_POLL_S = 0.05
_STOP_WAIT_S = 2.0  # a hung broker holds paho's thread until keepalive runs out; close() won't


def _paho() -> Any:
    try:
        import paho.mqtt.client as mqtt
    except ImportError as err:
        raise BackendUnavailable(f"MQTT events need paho-mqtt ≥ 2: {_EXTRA}") from err
    if not hasattr(mqtt, "CallbackAPIVersion"):
        raise BackendUnavailable(f"MQTT events need paho-mqtt ≥ 2 (1.x is installed): {_EXTRA}")
    return mqtt


def _topic_level(name: str) -> str:
    # A source named "cam/1" or "a+b" must stay one topic level and no wildcard.
    return "".join("_" if char in "/+#" else char for char in name) or "_"


class MqttTransport:
    """Publishes each event to `{topic}/{source}/{kind}` (the source's `/`, `+`, `#` become `_`).

    Connecting happens in paho's thread (`connect_async`), so a broker that is down at start
    neither fails nor blocks; paho reconnects every 1–10 s. With QoS 1 or 2, events published
    while the broker is away wait in paho's queue (at most `max_queued`, counting those awaiting
    acknowledgement) and are sent on reconnect, in order; beyond that they are dropped ("broker
    unreachable", or "broker slow" while connected) and counted. An event is counted `sent` when
    the broker acknowledges it (PUBACK/PUBCOMP); with QoS 0 when it is written to the socket, and
    QoS 0 events are dropped, not queued, while disconnected. Delivery is at least once: an event
    whose acknowledgement was lost in a disconnect is sent again, and subscribers dedupe by `id`.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 1883,
        topic: str = "visionrt/events",
        qos: int = 1,
        client_id: str = "",
        username: str | None = None,
        password: str | None = None,
        keepalive: int = 30,
        max_queued: int = 1000,
    ) -> None:
        _check(isinstance(host, str) and host != "", "host", "a host name", host)
        _check(_int_in(port, 1, 65535), "port", "an integer 1–65535", port)
        _check(
            isinstance(topic, str) and topic != "" and not set("+#") & set(topic),
            "topic",
            "a topic without + or #",
            topic,
        )
        _check(_int_in(qos, 0, 2), "qos", "0, 1 or 2", qos)
        _check(isinstance(client_id, str), "client_id", "a string", client_id)
        _check(username is None or isinstance(username, str), "username", "a string", username)
        if password is not None and not (isinstance(password, str) and username is not None):
            raise ConfigError("password: expected a string, with a username")
        _check(_int_in(keepalive, 5, 65535), "keepalive", "seconds 5–65535", keepalive)
        # paho numbers messages 1–65535: more waiting at once would reuse a number.
        _check(_int_in(max_queued, 1, 65535), "max_queued", "an integer 1–65535", max_queued)
        self._mqtt = _paho()
        self.host, self.port, self.topic, self.qos = host, port, topic.rstrip("/"), qos
        self.client_id, self.username, self._password = client_id, username, password
        self.keepalive, self.max_queued = keepalive, max_queued
        self.name = f"mqtt://{host}:{port}/{self.topic}"
        self._lock = threading.Lock()
        # Message ids handed to paho and not yet acknowledged, and acknowledgements that beat
        # the publishing thread to the lock (paho's thread can read the PUBACK first).
        self._pending: set[int] = set()
        self._early: set[int] = set()
        # Messages paho queued while it had no socket: it sends them only once the broker
        # acknowledges the connection, after any published on the socket meanwhile — so a new
        # event waits for them while a socket is up (`_after_backlog`), and order holds.
        self._backlog: set[int] = set()
        self._flushed = threading.Condition(self._lock)
        # Whether paho is making or has a socket: set in its on_pre_connect, just before it
        # makes one, under `_sending`, which a send holds from its look at it to its publish.
        # (Asking paho for its socket left a gap: a send that saw none published just as the
        # socket came up, and its event went out ahead of the queued ones.)
        self._sending = threading.Lock()
        self._socket_up = False
        self._connected = False
        self._report: DeliveryReport | None = None
        self._client: Any = None

    @property
    def connected(self) -> bool:
        """Whether the broker is connected now (for a status page; events are queued either way)."""
        return self._connected

    def open(self, report: DeliveryReport) -> None:
        mqtt = self._mqtt
        client = mqtt.Client(
            mqtt.CallbackAPIVersion.VERSION2,
            client_id=self.client_id,
            protocol=mqtt.MQTTv311,
            clean_session=True,
        )
        if self.username is not None:
            client.username_pw_set(self.username, self._password)
        client.reconnect_delay_set(min_delay=1, max_delay=10)
        client.max_queued_messages_set(self.max_queued)
        client.on_pre_connect = self._on_pre_connect
        client.on_connect_fail = self._on_connect_fail
        client.on_connect = self._on_connect
        client.on_disconnect = self._on_disconnect
        client.on_publish = self._on_publish
        self._report, self._client = report, client
        client.connect_async(self.host, self.port, self.keepalive)
        client.loop_start()

    def send(self, event: EncodedEvent, stop: threading.Event) -> None:
        assert self._report is not None, "send before open"
        mqtt, report = self._mqtt, self._report
        topic = f"{self.topic}/{_topic_level(event.source)}/{event.kind}"
        with self._sending:  # no socket comes up between the look and the publish
            self._after_backlog(stop)
            client = self._client
            if client is None:  # closed while this one waited
                report.dropped("closing")
                return
            try:
                info = client.publish(topic, event.payload, qos=self.qos)
            except (ValueError, TypeError) as err:  # a topic or payload paho refuses
                report.dropped(f"rejected by the MQTT client: {err}")
                return
        # With QoS > 0 "no connection" means queued in paho for the reconnect.
        if info.rc == mqtt.MQTT_ERR_SUCCESS or (info.rc == mqtt.MQTT_ERR_NO_CONN and self.qos):
            with self._lock:
                acknowledged = info.mid in self._early
                self._early.discard(info.mid)
                if not acknowledged:
                    self._pending.add(info.mid)
                    if info.rc == mqtt.MQTT_ERR_NO_CONN:
                        self._backlog.add(info.mid)
            if acknowledged:
                report.sent()
        elif info.rc in (mqtt.MQTT_ERR_NO_CONN, mqtt.MQTT_ERR_QUEUE_SIZE):
            report.dropped("broker slow" if self._connected else "broker unreachable")
        else:
            report.dropped(f"MQTT error: {mqtt.error_string(info.rc)}")

    def _after_backlog(self, stop: threading.Event) -> None:
        """Wait while paho holds messages from before its socket and has a socket now: what is
        published on it goes out at once, ahead of them (paho resends its queue only after the
        broker's CONNACK). Without a socket a new message joins the queue behind them."""
        with self._flushed:
            while self._backlog and self._socket_up and not stop.is_set():
                self._flushed.wait(_BACKLOG_POLL_S)

    def close(self) -> None:
        """Disconnect and stop paho's thread; acknowledgements that did not come are the
        publisher's to count."""
        client, self._client = self._client, None
        if client is None:
            return
        self._connected = False  # our own disconnect: no "lost" warning
        client.disconnect()
        stopper = threading.Thread(target=client.loop_stop, name="events mqtt stop", daemon=True)
        stopper.start()
        stopper.join(_STOP_WAIT_S)

    # paho's callbacks, on paho's thread. Each takes self._lock only around set updates: paho
    # holds its own message lock while calling on_publish, and send() holds none of ours while
    # calling into paho, so the two cannot deadlock.
    def _on_publish(self, client: Any, userdata: Any, mid: int, reason: Any, props: Any) -> None:
        with self._lock:
            known = mid in self._pending
            self._pending.discard(mid)
            if not known:
                self._early.add(mid)
            if mid in self._backlog:
                self._backlog.discard(mid)
                self._flushed.notify_all()
        if known and self._report is not None:
            if getattr(reason, "is_failure", False):  # MQTT 5 brokers can refuse a message
                self._report.dropped(f"refused by the broker: {reason}")
            else:
                self._report.sent()

    def _on_pre_connect(self, client: Any, userdata: Any) -> None:
        # paho holds none of its locks here; a send holding `_sending` publishes into paho,
        # which calls back only into `_lock`: no cycle.
        with self._sending:
            self._socket_up = True

    def _on_connect_fail(self, client: Any, userdata: Any) -> None:
        """No socket after all (the broker is not there): sends queue behind paho's again."""
        with self._flushed:
            self._socket_up = False
            self._flushed.notify_all()

    def _on_connect(self, client: Any, userdata: Any, flags: Any, reason: Any, props: Any) -> None:
        if getattr(reason, "is_failure", False):
            log.warning("MQTT broker %s:%d refused us: %s", self.host, self.port, reason)
            return
        self._connected = True
        log.info("MQTT broker %s:%d connected", self.host, self.port)

    def _on_disconnect(self, client: Any, userdata: Any, flags: Any, reason: Any, _: Any) -> None:
        if self._connected:
            log.warning(
                "MQTT broker %s:%d lost (%s); up to %d events wait for it",
                self.host,
                self.port,
                reason,
                self.max_queued,
            )
        self._connected = False
        with self._flushed:  # a send waiting for the backlog queues behind it again
            self._socket_up = False
            if self.qos:  # paho sends every unacknowledged one again after the next CONNACK
                self._backlog |= self._pending
            self._flushed.notify_all()
        if self.qos == 0:  # paho forgets unwritten QoS 0 messages on reconnect
            with self._lock:
                lost, self._pending = len(self._pending), set()
            for _ in range(lost):
                if self._report is not None:
                    self._report.dropped("connection lost")


def _int_in(value: Any, low: int, high: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def _check(ok: bool, key: str, wanted: str, value: Any) -> None:
    if not ok:
        raise ConfigError(f"{key}: expected {wanted}, got {value!r}")
