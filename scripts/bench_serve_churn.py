"""A service whose cameras come and go: `visionrt serve` with one camera running throughout, and
a second one (detection, depth, tracking) added, run until it has delivered a few frames, and
removed, CYCLES times. After each removal the script waits until the camera's files are
finalized (when the service lets go of it); the service's RSS is read then. The slope (MiB per
cycle, least squares over the cycles after the first two) is what every camera that is gone
costs for the rest of the service's life.

`--src DIR` runs the service from another tree's src/ (`git archive` of an earlier commit) for a
before/after; the two are alternated, ROUNDS times.

`--detect-only`: the cameras run detection and tracking, no depth model.

Usage: .venv/bin/python scripts/bench_serve_churn.py [--cycles 10] [--rounds 2]
       [--src /tmp/before/src] [--detect-only] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import psutil
import yaml
from bench_plan import spread  # scripts/ is on the path of a script run from it

from visionrt.hardware import cpu_model
from visionrt.models import depth_model_path
from visionrt.paths import DEMO_VIDEO

ROOT = Path(__file__).resolve().parent.parent


def request(url: str, method: str = "GET", body: Any = None) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Content-Type": "application/json"} if data is not None else {}
    req = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=60) as response:
            return json.loads(response.read() or b"null")
    except urllib.error.HTTPError as err:
        raise SystemExit(f"{method} {url}: {err.code} {err.read().decode()[:300]}") from None


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait(what: str, check: Any, limit: float = 120.0) -> None:
    deadline = time.monotonic() + limit
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.2)


def delivered(base: str, name: str, frames: int = 5) -> bool:
    rows = {row["name"]: row for row in request(f"{base}/sources")}
    return bool(rows.get(name, {}).get("frames_out", 0) >= frames)


def one_service(src: str | None, cycles: int, depth: bool = True) -> list[float]:
    """RSS (MiB) of the service after each cycle's camera is let go of."""
    port = free_port()
    with tempfile.TemporaryDirectory() as work:
        out = Path(work) / "out"
        config: dict[str, Any] = {
            "sources": [f"base={DEMO_VIDEO}"],
            "pipeline": {"tracking": {"enabled": True}},
            "serve": {"port": port, "files": [str(DEMO_VIDEO.parent)]},
            "output": {"dir": str(out), "csv": True},  # a camera's own file: when it is let go
        }
        if depth:
            config["depth"] = {"model": str(depth_model_path())}
        (Path(work) / "serve.yaml").write_text(yaml.safe_dump(config))
        env = dict(os.environ)
        command = [sys.executable, "-m", "visionrt.cli.main", "serve", "--config",
                   str(Path(work) / "serve.yaml"), "--quiet"]  # fmt: skip
        if src:
            env["PYTHONPATH"] = src
        log = (Path(work) / "serve.log").open("wb")
        serve = subprocess.Popen(command, stderr=log, env=env)
        base = f"http://127.0.0.1:{port}"
        try:

            def healthy() -> bool:
                try:
                    request(f"{base}/health")
                    return True
                except OSError:
                    if serve.poll() is not None:
                        raise SystemExit((Path(work) / "serve.log").read_text()) from None
                    return False

            wait("the service", healthy, 180)
            process = psutil.Process(serve.pid)
            rss = []
            name = "churn"
            for cycle in range(cycles):
                tasks = ["detect", "depth"] if depth else ["detect"]
                body = {"name": name, "uri": str(DEMO_VIDEO), "tasks": tasks}
                request(f"{base}/sources", "POST", body)

                wait(f"cycle {cycle}'s frames", lambda: delivered(base, name))
                request(f"{base}/sources/{name}", "DELETE")
                # Its files are finalized (and, now, its state let go) 5 s after its reader
                # ended, at the watcher's next look.
                csv = out / (name if cycle == 0 else f"{name}-{cycle + 1}")
                wait(
                    f"cycle {cycle}'s files ({csv}.*)",
                    lambda c=csv: c.with_suffix(".csv").is_file(),
                )
                rss.append(process.memory_info().rss / 2**20)
            return rss
        finally:
            serve.terminate()
            serve.wait(60)
            log.close()


def slope(values: list[float]) -> float:
    """Least-squares MiB per cycle over the cycles after the first two (allocator warm-up)."""
    ys = values[2:]
    xs = list(range(len(ys)))
    mean_x, mean_y = statistics.fmean(xs), statistics.fmean(ys)
    return sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / sum(
        (x - mean_x) ** 2 for x in xs
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--src", default=None, help="an earlier tree's src/ (before)")
    parser.add_argument("--detect-only", action="store_true")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    variants = {"now": None, **({"before": args.src} if args.src else {})}
    found: dict[str, list[list[float]]] = {name: [] for name in variants}
    for run in range(args.rounds):
        order = list(variants) if run % 2 == 0 else list(reversed(variants))
        for name in order:
            found[name].append(one_service(variants[name], args.cycles, not args.detect_only))
            print(f"round {run + 1} {name}: RSS MiB " + ", ".join(
                f"{v:.0f}" for v in found[name][-1]), flush=True)  # fmt: skip
    tasks = "detection and tracking" if args.detect_only else "detection, depth and tracking"
    print(f"{cpu_model()} · {args.cycles} cycles of a camera with {tasks}")
    result: dict[str, Any] = {"cpu": cpu_model(), "cycles": args.cycles, "tasks": tasks}
    result["variants"] = {}
    for name, runs in found.items():
        slopes = [slope(r) for r in runs]
        print(f"  {name}: {spread(slopes)} MiB per camera gone (slope per round)")
        result["variants"][name] = {"rss_mib": runs, "slope_mib_per_cycle": slopes}
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
