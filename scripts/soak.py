"""Issue #9's soak: a long `visionrt run` over paced sources with tracking on, checking what a 24/7
deployment needs — memory that does not grow, p99 latency that stays flat, every drop counted,
no frame lost without a reason — and a stream that is killed and comes back mid-run.

Sources: (N − 1) copies of a long clip (vtest.avi looped, built once and cached) read with
`--realtime`, plus one looping local MPEG-TS stream over TCP served by this script in a child
process, killed at 40 % of the run and restarted at 50 % (`--outages K`: K shorter outages spread
over 40–90 %, to tell a per-reconnect leak from a one-time rise). The run writes per-second
telemetry (per-source figures) and serves Prometheus metrics, scraped once a minute.

Usage: .venv/bin/python scripts/soak.py [--minutes 10] [--sources 6] [--out out/soak]
       [--outages 1] [--window 60] [--set KEY=VALUE ...]
`--set` is passed to `visionrt run` (the cached plan is used if any). Prints a row per `--window`
seconds, RSS around each outage and a verdict; exit status 1 when a check fails.
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
from visionrt.paths import DEMO_VIDEO, cache_root
from visionrt.telemetry.metrics import scrape

VISIONRT = str(Path(sys.executable).parent / "visionrt")
CACHE = cache_root() / "soak"
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


def _rss_between(lines: list[dict[str, Any]], span: tuple[float, float]) -> float:
    """Mean RSS (MB) of the telemetry lines within `span` seconds of the run (0 if none)."""
    values = [line["rss_mb"] for line in lines if span[0] <= line["t"] < span[1]]
    return statistics.mean(values) if values else 0.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--sources", type=int, default=6)
    parser.add_argument("--out", default="out/soak")
    parser.add_argument("--set", action="append", default=[], dest="overrides")
    parser.add_argument("--outages", type=int, default=1, help="stream outages (kill, restart)")
    parser.add_argument("--window", type=float, default=60.0, help="seconds per table row")
    args = parser.parse_args()
    # Outage k: the server is killed at `kills[k]` and restarted at `restarts[k]` (fractions).
    kills = [0.4 + k * 0.5 / args.outages for k in range(args.outages)]
    restarts = [kill + min(0.1, 0.25 / args.outages) for kill in kills]
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
        "--metrics-port", str(metrics_port), "--quiet", "--overwrite",
        "--set", f"source.max_frames={int(seconds * 10)}",
        "--set", "source.reconnect_attempts=50", "--set", "source.reconnect_max_backoff=2",
        *(arg for override in args.overrides for arg in ("--set", override)),
    ]  # fmt: skip
    print(f"soak: {args.minutes:g} min, {args.sources} sources, CPU {cpu_model()}")
    run = subprocess.Popen(command)
    started = time.monotonic()
    outage = 0  # the next outage to start (even phase) or end (odd)
    scrapes: list[str] = []
    while run.poll() is None:
        time.sleep(1.0)
        elapsed = time.monotonic() - started
        if outage < 2 * args.outages:
            k, down = divmod(outage, 2)
            if not down and elapsed > kills[k] * seconds:
                server.kill()
                outage += 1
                print(f"  {elapsed:.0f} s: stream server killed", flush=True)
            elif down and elapsed > restarts[k] * seconds:
                server = context.Process(target=serve, args=(port, str(clip)), daemon=True)
                server.start()
                outage += 1
                print(f"  {elapsed:.0f} s: stream server restarted", flush=True)
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
    rows = windows(lines, args.window)
    print("\n| from s | RSS MB | p99 ms (median of 1 s windows) | frames out | dropped |")
    print("|---|---|---|---|---|")
    for row in rows:
        print(
            f"| {row['window'] * args.window:.0f} | {row['rss_mb']:.0f} | {row['p99_ms']:.0f} |"
            f" {row['frames_out']} | {row['dropped']} |"
        )
    # The first minute holds model loading; after the planned length only the stream (behind by
    # its outages) is left, a lighter load: neither is the steady state.
    warmup = max(WARMUP_WINDOWS, round(60 / args.window))
    steady = [r for r in rows[warmup:] if (r["window"] + 1) * args.window <= seconds] or rows
    for k, (kill, back) in enumerate(zip(kills, restarts, strict=True)):
        before = _rss_between(lines, (kill * seconds - 15, kill * seconds))
        during = _rss_between(lines, (back * seconds - 15, back * seconds))
        after = _rss_between(lines, (back * seconds + 15, back * seconds + 30))
        print(f"outage {k + 1}: RSS {before:.0f} MB before, {during:.0f} at its end,"
              f" {after:.0f} 15–30 s after")  # fmt: skip
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
