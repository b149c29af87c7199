"""Issue #9's soak: a long `visionrt run` over paced sources with tracking on, checking what a 24/7
deployment needs — memory that does not grow, p99 latency that stays flat, every drop counted,
no frame lost without a reason — and a stream that is killed and comes back mid-run.

Sources: (N − 1) copies of a long clip (vtest.avi looped, built once and cached) read with
`--realtime`, plus one looping local MPEG-TS stream over TCP served by this script in a child
process, killed at 40 % of the run and restarted at 50 %. The run writes per-second telemetry
(per-source figures) and serves Prometheus metrics, scraped once a minute.

Usage: .venv/bin/python scripts/soak.py [--minutes 10] [--sources 6] [--out out/soak]
       [--set KEY=VALUE ...]      (passed to `visionrt run`; the cached plan is used if any)
Prints per-minute windows and a verdict; exit status 1 when a check fails.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import socket
import statistics
import subprocess
import sys
import time
from fractions import Fraction
from pathlib import Path
from typing import Any

from visionrt.hardware import cpu_model
from visionrt.model import DEMO_VIDEO
from visionrt.telemetry.metrics import scrape

VISIONRT = str(Path(sys.executable).parent / "visionrt")
CACHE = Path.home() / ".cache" / "visionrt" / "soak"
RSS_DRIFT_LIMIT = 0.05
WARMUP_WINDOWS = 1  # the first minute holds model loading and allocator growth
# Checks judge the full minutes between the first and the last.


def long_clip(loops: int) -> Path:
    """vtest.avi looped `loops` times as one H.264 MP4 (built once, cached)."""
    import av

    path = CACHE / f"vtest_x{loops}.mp4"
    if path.is_file():
        return path
    CACHE.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial.mp4")
    with av.open(str(partial), "w") as out:
        stream = out.add_stream("libx264", rate=10)
        stream.width, stream.height, stream.pix_fmt = 768, 576, "yuv420p"
        stream.options = {"preset": "ultrafast"}
        index = 0
        for _ in range(loops):
            with av.open(str(DEMO_VIDEO)) as clip:
                for frame in clip.decode(video=0):
                    frame = frame.reformat(format="yuv420p")
                    frame.pts, frame.time_base = index, Fraction(1, 10)  # one timeline
                    out.mux(stream.encode(frame))
                    index += 1
        out.mux(stream.encode(None))
    partial.rename(path)
    return path


def serve(port: int, clip: str) -> None:
    """Loop `clip` as a paced MPEG-TS stream to one client at a time on tcp://127.0.0.1:port."""
    import av

    while True:
        try:
            url = f"tcp://127.0.0.1:{port}?listen=1"
            with av.open(url, "w", format="mpegts") as out:
                stream = out.add_stream("libx264", rate=10)
                stream.width, stream.height, stream.pix_fmt = 768, 576, "yuv420p"
                stream.options = {"preset": "ultrafast", "tune": "zerolatency"}
                started, index = time.monotonic(), 0
                while True:
                    with av.open(clip) as source:
                        for frame in source.decode(video=0):
                            time.sleep(max(0.0, started + index / 10 - time.monotonic()))
                            frame = frame.reformat(format="yuv420p")
                            frame.pts, frame.time_base = index, Fraction(1, 10)
                            out.mux(stream.encode(frame))
                            index += 1
        except (av.FFmpegError, OSError):  # the client went away: listen again
            time.sleep(0.2)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def windows(lines: list[dict[str, Any]], seconds: float) -> list[dict[str, Any]]:
    """Telemetry lines grouped into windows of `seconds`: RSS, p99 and drops per window."""
    grouped: dict[int, list[dict[str, Any]]] = {}
    for line in lines:
        grouped.setdefault(int(line["t"] // seconds), []).append(line)
    rows = []
    for key in sorted(grouped):
        group = grouped[key]
        p99s = [g["latency_ms"]["p99"] for g in group if g["latency_ms"]["p99"] > 0]
        rows.append(
            {
                "window": key,
                "rss_mb": statistics.mean(g["rss_mb"] for g in group),
                "p99_ms": statistics.median(p99s) if p99s else 0.0,
                "frames_out": group[-1]["frames_out"],
                "dropped": group[-1]["dropped"],
            }
        )
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--sources", type=int, default=6)
    parser.add_argument("--out", default="out/soak")
    parser.add_argument("--set", action="append", default=[], dest="overrides")
    args = parser.parse_args()
    seconds = args.minutes * 60
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    clip = long_clip(max(1, int(seconds / 79) + 1))
    port, metrics_port = free_port(), free_port()
    context = multiprocessing.get_context("spawn")
    server = context.Process(target=serve, args=(port, str(clip)), daemon=True)
    server.start()
    time.sleep(1.0)
    sources = [f"cam{i}={clip}" for i in range(1, args.sources)] + [
        f"stream=tcp://127.0.0.1:{port}"
    ]
    command = [
        VISIONRT, "run", *sources, "--realtime", "--track", "--detect-every", "3",
        "--no-video", "--out", str(out), "--telemetry", str(out / "telemetry.jsonl"),
        "--metrics-port", str(metrics_port), "--quiet",
        "--set", f"source.max_frames={int(seconds * 10)}",
        "--set", "source.reconnect_attempts=50", "--set", "source.reconnect_max_backoff=2",
        *(arg for override in args.overrides for arg in ("--set", override)),
    ]  # fmt: skip
    print(f"soak: {args.minutes:g} min, {args.sources} sources, CPU {cpu_model()}")
    run = subprocess.Popen(command)
    started = time.monotonic()
    killed = restarted = False
    scrapes: list[str] = []
    while run.poll() is None:
        time.sleep(1.0)
        elapsed = time.monotonic() - started
        if not killed and elapsed > 0.4 * seconds:
            server.kill()
            killed = True
            print(f"  {elapsed:.0f} s: stream server killed")
        if killed and not restarted and elapsed > 0.5 * seconds:
            server = context.Process(target=serve, args=(port, str(clip)), daemon=True)
            server.start()
            restarted = True
            print(f"  {elapsed:.0f} s: stream server restarted")
        if int(elapsed) % 60 == 30 and len(scrapes) < int(elapsed) // 60 + 1:
            try:
                scrapes.append(scrape(f"http://127.0.0.1:{metrics_port}/metrics"))
            except OSError as err:
                print(f"  metrics scrape failed: {err}")
        if elapsed > seconds + 120:  # the stream never ends by itself: stop the run
            run.send_signal(2)
    server.kill()
    summary = json.loads((out / "summary.json").read_text())
    lines = [json.loads(x) for x in (out / "telemetry.jsonl").read_text().splitlines()]
    rows = windows(lines, 60.0)
    print("\n| minute | RSS MB | p99 ms (median of 1 s windows) | frames out | dropped |")
    print("|---|---|---|---|---|")
    for row in rows:
        print(
            f"| {row['window'] + 1} | {row['rss_mb']:.0f} | {row['p99_ms']:.0f} |"
            f" {row['frames_out']} | {row['dropped']} |"
        )
    # The first minute holds model loading; the last is partial (sources ending one by one).
    steady = rows[WARMUP_WINDOWS:-1] if len(rows) > WARMUP_WINDOWS + 2 else rows
    drift = (steady[-1]["rss_mb"] - steady[0]["rss_mb"]) / steady[0]["rss_mb"]
    p99 = [r["p99_ms"] for r in steady]
    stream = next(s for s in summary["sources"] if s["name"] == "stream")
    checks = {
        f"RSS drift {drift:+.1%} (< {RSS_DRIFT_LIMIT:.0%})": abs(drift) < RSS_DRIFT_LIMIT,
        "every frame accounted for (in = out + dropped)": bool(summary["accounted"]),
        f"stream reconnected ({stream.get('reconnects', 0)} reconnects)": stream.get(
            "reconnects", 0
        )
        >= 1,
        f"p99 per minute {min(p99):.0f}–{max(p99):.0f} ms (max ≤ 2× min)": max(p99)
        <= 2 * max(min(p99), 1.0),
        f"metrics scraped {len(scrapes)}×": bool(scrapes),
    }
    print(
        f"\nframes in {summary['frames_in']}, out {summary['frames_out']},"
        f" dropped {sum(summary['dropped'].values())}: {summary['dropped']}"
    )
    for name, ok in checks.items():
        print(f"  {'PASS' if ok else 'FAIL'}  {name}")
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
