"""A service soak: `visionrt serve` over paced, looped cameras for MINUTES, a camera added and
one removed part-way, a headless Chromium showing the live view throughout, a subscriber
counting the MQTT events, and the broker stopped for a while near the end.

Reports per source frames in/out and drops; per minute the glass-to-result p99 (the median and
the worst of the per-second p99s the telemetry file holds) and FPS; RSS at the start and the
end; events published, sent, dropped, received. Writes docs/results/serve_soak.json.

    python scripts/bench_serve.py                 # 10 minutes: add at 3, remove at 6, outage at 8
    python scripts/bench_serve.py --minutes 2 --add-at 0.5 --remove-at 1 --outage-at 1.4
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import yaml

DATA = Path("/usr/share/doc/opencv-doc/examples/data")
ROOT = Path(__file__).resolve().parent.parent
VISIONRT = str(Path(sys.executable).with_name("visionrt"))
# vtest.avi (768×576): a line across the walkway and a zone on its left half.
LINE = [[0, 330], [768, 330]]
ZONE = [[0, 200], [384, 200], [384, 576], [0, 576]]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Broker:
    """Debian's mosquitto on 127.0.0.1, stopped and started again on demand."""

    def __init__(self, folder: Path) -> None:
        self.exe = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
        self.port = free_port()
        self.conf = folder / "mosquitto.conf"
        # Persistence keeps the subscriber's session (its subscription and the QoS 1 messages
        # for it) across the broker's restart, as a deployed broker would.
        self.conf.write_text(
            f"listener {self.port} 127.0.0.1\nallow_anonymous true\npersistence true\n"
            f"persistence_location {folder}/\nautosave_interval 1\n"
            + (f"user {os.environ.get('USER', 'root')}\n" if os.getuid() == 0 else "")
        )
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(
            [self.exe, "-c", str(self.conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("mosquitto did not start")

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(10)
            self.process = None


class Subscriber:
    """Counts the events the broker delivers, by kind, and their ids (QoS 1 may repeat one)."""

    def __init__(self, port: int) -> None:
        import paho.mqtt.client as mqtt

        self.ids: set[str] = set()
        self.messages = 0
        self.kinds: dict[str, int] = {}
        self._lock = threading.Lock()
        self.client = mqtt.Client(
            mqtt.CallbackAPIVersion.VERSION2, client_id="soak-subscriber", clean_session=False
        )
        self.client.on_message = self._message
        self.client.on_connect = lambda c, *_: c.subscribe("visionrt/events/#", qos=1)
        self.client.reconnect_delay_set(1, 2)
        self.client.connect_async("127.0.0.1", port)
        self.client.loop_start()

    def _message(self, _client: Any, _data: Any, message: Any) -> None:
        event = json.loads(message.payload)
        with self._lock:
            self.messages += 1
            if event["id"] not in self.ids:
                self.ids.add(event["id"])
                self.kinds[event["kind"]] = self.kinds.get(event["kind"], 0) + 1

    def close(self) -> None:
        self.client.loop_stop()
        self.client.disconnect()


def request(url: str, method: str = "GET", body: Any = None) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method)
    with urllib.request.urlopen(req, timeout=30) as response:
        return json.loads(response.read() or b"null")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--add-at", type=float, default=3.0)
    parser.add_argument("--remove-at", type=float, default=6.0)
    parser.add_argument("--outage-at", type=float, default=8.0)
    parser.add_argument("--outage", type=float, default=30.0, help="seconds the broker is down")
    parser.add_argument("--no-browser", action="store_true")
    parser.add_argument("--mqtt-queue", type=int, default=1000, help="serve.events.mqtt.max_queued")
    parser.add_argument("--result", default=str(ROOT / "docs/results/serve_soak.json"))
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="visionrt-soak-"))
    out = work / "out"
    broker = Broker(work)
    broker.start()
    port = free_port()
    vtest = str(DATA / "vtest.avi")
    lines = {"walkway": LINE}
    config = {
        "sources": [f"cam1={vtest}", f"cam2={vtest}", f"cam3={vtest}"],
        "pipeline": {"track": True, "detect_every": 3},
        "analytics": {
            "cam1": {"lines": lines, "zones": {"left": ZONE}},
            "cam3": {"lines": lines},
        },
        "serve": {
            "port": port,
            "files": [str(DATA)],
            "events": {
                "mqtt": {"port": broker.port, "max_queued": args.mqtt_queue},
            },
        },
        "output": {"dir": str(out), "telemetry": str(out / "telemetry.jsonl")},
    }
    (work / "serve.yaml").write_text(yaml.safe_dump(config))
    base = f"http://127.0.0.1:{port}"
    print(f"work folder {work}; serve at {base}", flush=True)
    serve = subprocess.Popen(
        [VISIONRT, "serve", "--config", str(work / "serve.yaml"), "--quiet"],
        stderr=open(work / "serve.log", "wb"),  # noqa: SIM115 - lives as long as the process
    )
    deadline = time.monotonic() + 180
    while True:
        try:
            request(f"{base}/health")
            break
        except OSError:
            if serve.poll() is not None or time.monotonic() > deadline:
                raise SystemExit((work / "serve.log").read_text()) from None
            time.sleep(0.5)
    started = time.monotonic()
    subscriber = Subscriber(broker.port)
    browser = None
    if not args.no_browser:
        chromium = shutil.which("chromium")
        if chromium:
            browser = subprocess.Popen(
                [chromium, "--headless=new", "--no-sandbox", "--disable-gpu",
                 "--disable-dev-shm-usage", f"--user-data-dir={work / 'chromium'}",
                 "--window-size=1280,900", f"{base}/"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )  # fmt: skip
    timeline: list[dict[str, Any]] = []

    def at(minute: float) -> None:
        while time.monotonic() - started < minute * 60:
            time.sleep(0.2)

    def mark(what: str) -> None:
        timeline.append({"t": round(time.monotonic() - started, 2), "what": what})
        print(f"{timeline[-1]['t']:8.1f} s  {what}", flush=True)

    mark("started: cam1 (line + zone), cam2, cam3 (line): vtest.avi paced at 10 FPS, looped")
    at(args.add_at)
    request(f"{base}/sources", "POST", {"name": "cam4", "uri": vtest, "lines": lines})
    mark("added cam4 (vtest, line)")
    at(args.remove_at)
    request(f"{base}/sources/cam2", "DELETE")
    mark("removed cam2")
    at(args.outage_at)
    broker.stop()
    mark("broker stopped")
    time.sleep(args.outage)
    broker.start()
    mark("broker started")
    at(args.minutes)
    previews = request(f"{base}/sources")
    serve.send_signal(signal.SIGTERM)
    code = serve.wait(120)
    mark(f"service stopped (exit {code})")
    browser_alive = browser is not None and browser.poll() is None
    if browser is not None:
        browser.terminate()
        browser.wait(10)
    time.sleep(3)  # the subscriber's last messages
    subscriber.close()
    broker.stop()
    report = analyse(out, timeline, subscriber, args, previews)
    report["browser"] = {"shown": browser is not None, "alive_at_end": browser_alive}
    Path(args.result).parent.mkdir(parents=True, exist_ok=True)
    Path(args.result).write_text(json.dumps(report, indent=2))
    print(json.dumps({k: v for k, v in report.items() if k != "minutes"}, indent=2))
    for row in report["minutes"]:
        print(row)
    print(f"written {args.result}")


def analyse(
    out: Path,
    timeline: list[dict[str, Any]],
    subscriber: Subscriber,
    args: argparse.Namespace,
    last_sources: list[dict[str, Any]],
) -> dict[str, Any]:
    summary = json.loads((out / "summary.json").read_text())
    seconds = [json.loads(line) for line in (out / "telemetry.jsonl").read_text().splitlines()]
    minutes: list[dict[str, Any]] = []
    for minute in range(int(args.minutes + 0.999)):
        rows = [s for s in seconds if minute * 60 <= s["t"] < (minute + 1) * 60]
        row: dict[str, Any] = {"minute": minute + 1}
        for name in sorted({n for s in rows for n in s.get("sources", {})}):
            p99 = [
                s["sources"][name]["latency_ms"]["p99"]
                for s in rows
                if name in s["sources"] and s["sources"][name]["latency_ms"].get("p99")
            ]
            fps = [s["sources"][name].get("fps", 0.0) for s in rows if name in s["sources"]]
            if p99:
                row[name] = {
                    "p99_ms_median": round(statistics.median(p99), 1),
                    "p99_ms_worst": round(max(p99), 1),
                    "fps": round(statistics.median(fps), 2),
                }
        row["rss_mb"] = round(statistics.median([s["rss_mb"] for s in rows]), 1) if rows else None
        row["cpu_percent"] = (
            round(statistics.median([s["cpu_percent"] for s in rows]), 1) if rows else None
        )
        minutes.append(row)
    events = summary.get("events", {})
    counted = {k: v for k, v in events.items() if k.startswith(("zone ", "line ", "source: "))}
    delivery = summary.get("service", {}).get("events", {})
    rss = [s["rss_mb"] for s in seconds]
    warm = [s["rss_mb"] for s in seconds if 60 <= s["t"] < 120] or rss[:60]
    last = [s["rss_mb"] for s in seconds if s["t"] >= seconds[-1]["t"] - 60]
    return {
        "machine": _cpu(),
        "around_changes": around(seconds, timeline),
        "minutes_run": args.minutes,
        "timeline": timeline,
        "sources": [
            {k: s.get(k) for k in ("name", "frames_in", "frames_out", "dropped", "fps")}
            for s in summary["sources"]
        ],
        "frames_in": summary["frames_in"],
        "frames_out": summary["frames_out"],
        "dropped": summary["dropped"],
        "accounted": summary["accounted"],
        "events_counted": counted,
        "events_counted_total": sum(counted.values()),
        "delivery": delivery,
        "received": {"unique": len(subscriber.ids), "messages": subscriber.messages},
        "received_by_kind": subscriber.kinds,
        "rss_mb": {
            "minute_2_median": statistics.median(warm) if warm else None,
            "last_minute_median": statistics.median(last) if last else None,
            "drift": round(statistics.median(last) / statistics.median(warm) - 1, 4)
            if warm and last
            else None,
        },
        "sources_at_end": last_sources,
        "minutes": minutes,
    }


def around(
    seconds: list[dict[str, Any]], timeline: list[dict[str, Any]], span: float = 15.0
) -> list[dict[str, Any]]:
    """For each camera added or removed, every other camera's drops and worst per-second p99
    in the `span` seconds before and after: a stall or a drop the change caused shows here."""
    changes = [m for m in timeline if m["what"].startswith(("added", "removed", "broker"))]
    rows = []
    for change in changes:
        t = change["t"]
        row: dict[str, Any] = {"change": change["what"], "t": t}
        for side, lo, hi in (("before", t - span, t), ("after", t, t + span)):
            window = [s for s in seconds if lo <= s["t"] < hi]
            previous = [s for s in seconds if s["t"] < lo]
            for name in sorted({n for s in window for n in s.get("sources", {})}):
                mine = [s["sources"][name] for s in window if name in s["sources"]]
                start = next(
                    (
                        s["sources"][name]["dropped"]
                        for s in reversed(previous)
                        if name in s["sources"]
                    ),
                    0,
                )
                p99 = [m["latency_ms"].get("p99") or 0.0 for m in mine]
                row.setdefault(name, {})[side] = {
                    "drops": mine[-1]["dropped"] - start if mine else 0,
                    "p99_ms_worst": round(max(p99), 1) if p99 else None,
                    "fps": round(statistics.median(m.get("fps", 0.0) for m in mine), 2),
                }
        rows.append(row)
    return rows


def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return f"{line.split(':', 1)[1].strip()}, {os.cpu_count()} vCPU"
    except OSError:
        pass
    return "unknown"


if __name__ == "__main__":
    main()
