"""A two-node local Ray cluster (`ray.cluster_utils.Cluster`, both nodes on this machine): a
node removed mid-run puts its worker's files back on the queue, resumed after the last
committed frame on the survivor; a live stream on a removed node restarts on a survivor with
the gap counted as dropped (`cluster: worker lost`). Every frame is accounted for. Machines of
two kinds (one hiding a CPU feature) run their own plans."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import av
import psutil
import pytest
from conftest import write_video
from services import free_port

ray = pytest.importorskip("ray", reason="Ray is not installed: pip install 'visionrt[ray]'")
from ray.cluster_utils import Cluster  # noqa: E402

from visionrt.config import load_config  # noqa: E402
from visionrt.distributed.ray_executor import RayExecutor  # noqa: E402
from visionrt.distributed.run import run_on_cluster, worker_settings  # noqa: E402
from visionrt.distributed.summary import WORKER_LOST  # noqa: E402
from visionrt.hardware import HIDE_VARIABLE  # noqa: E402
from visionrt.paths import file_sha256  # noqa: E402
from visionrt.plans import Plan, fingerprint_key, machine_fingerprint, plan_path  # noqa: E402
from visionrt.telemetry.metrics import scrape  # noqa: E402

pytestmark = pytest.mark.ray

# A removed node is noticed by the head's health checks: Ray's defaults take ~15 s (a period of
# 3 s, 5 failures); these take ~1 s. docs/cluster.md says how to set them on a real head node.
HEALTH_CHECKS = {
    "health_check_initial_delay_ms": 0,
    "health_check_period_ms": 250,
    "health_check_timeout_ms": 250,
    "health_check_failure_threshold": 4,
}


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with pytest.MonkeyPatch.context() as env:
        env.setenv("RAY_AUTH_MODE", "disabled")
        env.setenv("RAY_USAGE_STATS_ENABLED", "0")
        nodes = Cluster(
            initialize_head=True,
            head_node_args={"num_cpus": 1, "_system_config": HEALTH_CHECKS},
        )
        ray.init(address=nodes.address, log_to_driver=False)
        try:
            yield nodes
        finally:
            ray.shutdown()
            nodes.shutdown()


def cluster_run(
    cluster: Cluster, values: dict[str, Any], node: Any, when: int, **options: Any
) -> tuple[Any, Any, dict[str, float]]:
    """Run `values` on two 1-CPU workers (one per node); remove `node` once its worker has
    committed `when` frames. Returns the summary, the report and the moments (monotonic)
    the node was removed, its loss seen and the first frame after it committed."""
    cfg = load_config(values=values)
    executor = RayExecutor(None, 2, 1.0, 0.0, worker_settings(cfg), startup_timeout=60)
    doomed = {w for w in executor.workers() if executor.info(w)["node"] == node.node_id}
    assert len(doomed) == 1, "one worker on each node"
    moments: dict[str, float] = {}

    def watch(report: Any) -> None:
        total = sum(report.frames_by_worker.values())
        if "removed" not in moments and any(
            report.frames_by_worker.get(w, 0) >= when for w in doomed
        ):
            cluster.remove_node(node, allow_graceful=False)
            # A machine that goes takes its processes with it. Removing a local node kills only
            # its raylet: its worker would stream on until it noticed, and on a loaded machine
            # it could finish its file first (no loss seen: CI, 2026-11-28).
            for worker in doomed:
                with contextlib.suppress(psutil.NoSuchProcess):
                    psutil.Process(executor.info(worker)["pid"]).kill()
            moments["removed"], moments["total"] = time.monotonic(), total
        elif "removed" in moments and report.lost_workers and "lost" not in moments:
            moments["lost"], moments["total"] = time.monotonic(), total
        elif "lost" in moments and "resumed" not in moments and total > moments["total"]:
            moments["resumed"] = time.monotonic()

    try:
        summary, report = run_on_cluster(cfg, executor, watch, **options)
    finally:
        executor.close()
    return summary, report, moments


def two_streams(tmp_path: Path, model: Path, frames: int) -> dict[str, Any]:
    """Two videos of `frames` frames read in real time (30 FPS): cameras' stand-ins."""
    videos = [write_video(tmp_path / f"live{i}.mp4", frames=frames) for i in range(2)]
    return {
        "sources": [f"cam{i}={v}" for i, v in enumerate(videos)],
        "model": str(model),
        "backend": "onnxruntime",
        "source": {"realtime": True},
        "output": {"dir": str(tmp_path / "out"), "video": False},
    }


def test_a_node_removed_mid_run_loses_no_frame(
    cluster: Cluster, tiny_model: Path, tmp_path: Path
) -> None:
    videos = [write_video(tmp_path / f"v{i}.mp4", frames=500) for i in range(2)]
    node = cluster.add_node(num_cpus=1)
    values = {
        "sources": [f"v{i}={v}" for i, v in enumerate(videos)],
        "model": str(tiny_model),
        "backend": "onnxruntime",
        "output": {"dir": str(tmp_path / "out"), "video": True},
        "cluster": {"files_per_worker": 1},
    }
    summary, report, moments = cluster_run(cluster, values, node, when=64)
    assert "removed" in moments, moments
    assert "lost" in moments, moments
    assert report.failed == {}
    assert report.lost_workers == 1
    assert report.reassignments == 1
    assert (summary.frames_in, summary.frames_out) == (1000, 1000)
    assert summary.accounted
    rows = [json.loads(line) for line in (tmp_path / "out" / "detections.jsonl").open()]
    for name in ("v0", "v1"):
        assert [r["frame"] for r in rows if r["source"] == name] == list(range(500))
    assert not list((tmp_path / "out").glob("*.partial*"))
    # Each source's video is the attempt that counted, whole, under the run's name (this
    # machine sees both nodes' disks); the removed node's partial video is gone.
    assert sorted(p.name for p in (tmp_path / "out").glob("*.mp4")) == ["v0.mp4", "v1.mp4"]
    for name in ("v0", "v1"):
        with av.open(str(tmp_path / "out" / f"{name}.mp4")) as video:
            assert sum(1 for _ in video.decode(video=0)) == 500


def test_a_live_stream_on_a_removed_node_restarts_with_the_gap_counted(
    cluster: Cluster, tiny_model: Path, tmp_path: Path
) -> None:
    """Two streams read in real time (30 FPS files), one per worker; the node of one goes:
    its stream comes back on the head's worker once that one's stream ended, numbered after
    the gap, which is counted as frames the cluster lost."""
    node = cluster.add_node(num_cpus=1)
    values = two_streams(tmp_path, tiny_model, frames=60)
    summary, report, moments = cluster_run(cluster, values, node, when=15)
    assert "lost" in moments, moments
    assert report.failed == {}
    assert report.lost_workers == 1
    moved = [name for name, s in report.sources.items() if s.attempts == 2]
    assert len(moved) == 1
    state = report.sources[moved[0]]
    assert state.lost > 0
    assert summary.dropped[WORKER_LOST] == state.lost
    assert summary.accounted
    rows = [json.loads(line) for line in (tmp_path / "out" / "detections.jsonl").open()]
    frames = [r["frame"] for r in rows if r["source"] == moved[0]]
    assert frames == sorted(set(frames))  # in order, once
    times = [r["timestamp"] for r in rows if r["source"] == moved[0]]
    assert all(a < b for a, b in itertools.pairwise(times)), times  # the retry's go on
    missing = [b - a - 1 for a, b in itertools.pairwise(frames) if b - a > 1]
    assert any(gap >= state.lost for gap in missing), missing  # the worker's loss
    # Every other gap is frames a live stream under load dropped (stale), counted: by the
    # retry's summary, or, for the lost attempt whose counts went with its worker, as the
    # frame numbers it skipped. No frame number goes missing uncounted.
    row = next(r for r in summary.sources if r["name"] == moved[0])
    assert frames[-1] + 1 - len(frames) <= sum(row["dropped"].values())


def test_a_survivor_busy_with_a_stream_takes_in_the_lost_one(
    cluster: Cluster, tiny_model: Path, tmp_path: Path
) -> None:
    """As above, but the survivor's stream outlasts the wait (`regroup_after`): the survivor is
    told to end its group and starts again with both streams in one Pipeline (no room for a
    replacement worker: each node has one CPU). Both continue after their gaps, in order,
    once, every frame accounted for; neither failed."""
    node = cluster.add_node(num_cpus=1)
    values = two_streams(tmp_path, tiny_model, frames=150)
    summary, report, moments = cluster_run(cluster, values, node, when=15, regroup_after=1.0)
    assert "lost" in moments, moments
    assert report.failed == {}
    assert (report.lost_workers, report.regroups) == (1, 1)
    assert {name: s.attempts for name, s in report.sources.items()} == {"cam0": 2, "cam1": 2}
    assert sorted(s.regrouped for s in report.sources.values()) == [0, 1]
    assert summary.accounted
    rows = [json.loads(line) for line in (tmp_path / "out" / "detections.jsonl").open()]
    workers = {w for w, n in report.frames_by_worker.items() if n}
    assert len(workers) == 2  # the lost worker's frames, then the survivor's
    dropped = {row["name"]: sum(row["dropped"].values()) for row in summary.sources}
    for name, state in report.sources.items():
        frames = [r["frame"] for r in rows if r["source"] == name]
        assert frames == sorted(set(frames)), name  # in order, once
        times = [r["timestamp"] for r in rows if r["source"] == name]
        assert all(a < b for a, b in itertools.pairwise(times)), (name, times)
        missing = sum(b - a - 1 for a, b in itertools.pairwise(frames))
        # The lost stream's wait is lost. The survivor's own stream (a file read in real time)
        # goes on from where it had got to when it was started again: delayed, hardly lost.
        if not state.regrouped:
            assert state.lost > 0, name
        # Frames not written are the gaps and those a Pipeline dropped (queue full, newer frame
        # kept): all counted, but for the lost worker's own drops, which died with it.
        if state.regrouped:
            assert missing <= dropped[name], (name, missing, dropped[name], state)
        assert missing >= state.lost, (name, missing, state)


def test_each_kind_of_machine_is_tuned_on_its_own_and_runs_its_own_plan(
    cluster: Cluster, tiny_model: Path, tmp_path: Path
) -> None:
    """The head (this machine, its plan cached) and a node that hides a CPU feature (a machine
    without it): `visionrt tune --ray ADDRESS` tunes only the kind without a plan, on its
    node, and keeps the plan here; `visionrt run --ray ADDRESS` then runs two plan groups,
    each with its own machine's plan — said on stderr and in summary.json."""
    fingerprint = machine_fingerprint()
    assert fingerprint["features"], "no CPU feature a plan depends on to hide"
    hidden = fingerprint["features"][-1]  # avx512_bf16 on Zen 4/5; present on every kind
    without = {**fingerprint, "features": [f for f in fingerprint["features"] if f != hidden]}
    root = tmp_path / "plans"
    mine_path = plan_path(tiny_model, fingerprint, root)
    Plan(
        run={"model": str(tiny_model), "backend": "onnxruntime"},
        tuned={
            "source_model": str(tiny_model),
            "source_sha256": file_sha256(tiny_model),
            "measured": {"fps": 100.0, "fidelity": 0.99, "frames": 30},
            "fingerprint": fingerprint,
        },
    ).save(mine_path)
    # The node hides one feature more than this process does (which may hide some already:
    # the head node and the driver share this process's view).
    hides = ",".join(filter(None, [os.environ.get(HIDE_VARIABLE, ""), hidden]))
    node = cluster.add_node(num_cpus=1, env_vars={HIDE_VARIABLE: hides})
    video = write_video(tmp_path / "v.mp4", frames=20)
    env = {**os.environ, "VISIONRT_PLANS": str(root), "RAY_AUTH_MODE": "disabled"}
    cli = [sys.executable, "-m", "visionrt.cli.main"]
    try:
        tuned = subprocess.run(
            [*cli, "tune", str(video), "--model", str(tiny_model), "--ray", cluster.address,
             "--no-motion", "--budget-minutes", "1"],
            capture_output=True, text=True, timeout=300, env=env,
        )  # fmt: skip
        assert tuned.returncode == 0, tuned.stderr
        theirs_path = plan_path(tiny_model, without, root)
        assert theirs_path.is_file()
        assert Plan.load(theirs_path).fingerprint["features"] == without["features"]
        assert f"plan {mine_path.name}" in tuned.stderr  # its own kind: not tuned again
        done = subprocess.run(
            [*cli, "run", f"a={video}", f"b={video}", "--model", str(tiny_model),
             "--ray", cluster.address, "--workers", "2", "--worker-cpus", "1", "--no-video",
             "--out", str(tmp_path / "out")],
            capture_output=True, text=True, timeout=240, env=env,
        )  # fmt: skip
    finally:
        cluster.remove_node(node)
    assert done.returncode == 0, done.stderr
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    groups = summary["cluster"]["plan_groups"]
    assert set(groups) == {fingerprint_key(fingerprint), fingerprint_key(without)}
    mine, theirs = groups[fingerprint_key(fingerprint)], groups[fingerprint_key(without)]
    assert f"plan {mine_path.name}" in mine["plan"]
    assert f"plan {theirs_path.name}" in theirs["plan"]
    assert hidden not in theirs["features"]
    assert len(mine["workers"]) == len(theirs["workers"]) == 1
    assert f"plan group {fingerprint_key(without)}" in done.stderr
    assert summary["frames_out"] == 40


def test_each_worker_serves_metrics_listed_for_prometheus_and_the_driver_serves_totals(
    cluster: Cluster, tiny_model: Path, tmp_path: Path
) -> None:
    """Through the Python API (`run_on_ray`): mid-run, the service-discovery file names one
    endpoint per worker (labelled by node and worker), each scrapeable, counting the frames of
    its own sources; the driver's endpoint has the cluster's committed frames per source."""
    from visionrt.distributed import run_on_ray

    port = free_port()  # for the driver's endpoint: one Ray's nodes do not take meanwhile
    videos = [write_video(tmp_path / f"v{i}.mp4", frames=400) for i in range(2)]
    node = cluster.add_node(num_cpus=1)
    cfg = load_config(
        values={
            "sources": [f"v{i}={v}" for i, v in enumerate(videos)],
            "model": str(tiny_model),
            "backend": "onnxruntime",
            "output": {"dir": str(tmp_path / "out"), "video": False, "metrics_port": port},
            "cluster": {"address": cluster.address, "workers": "2", "worker_cpus": 1},
        }
    )
    targets = tmp_path / "out" / "prometheus_targets.json"
    seen: dict[str, Any] = {}

    def look(report: Any) -> None:
        # Once each source has committed frames: on a busy machine one source's worker can
        # commit the first 64 before the other's first (a full suite beside it: v0 had none).
        written = [state.written for state in report.sources.values()]
        if seen or sum(written) < 64 or min(written, default=0) == 0:
            return
        seen["targets"] = json.loads(targets.read_text())
        seen["workers"] = [
            scrape(f"http://{group['targets'][0]}/metrics") for group in seen["targets"]
        ]
        seen["cluster"] = scrape(f"http://127.0.0.1:{port}/metrics")

    said: list[str] = []
    try:
        summary, report = run_on_ray(cfg, say=said.append, on_progress=look)
    finally:
        cluster.remove_node(node)
    assert report.failed == {}
    assert seen, "the run ended before 64 frames were committed"
    assert any(line.startswith("ray: 2 worker(s)") for line in said)
    labels = [group["labels"] for group in seen["targets"]]
    assert sorted(label["worker"] for label in labels) == sorted(report.workers_seen)
    assert {label["node"] for label in labels} == {node.node_id, cluster.head_node.node_id}
    counted = [
        re.findall(r'visionrt_frames_out_total\{source="(v\d)"\} (\d+)', text)
        for text in seen["workers"]
    ]
    assert sorted(name for found in counted for name, _ in found) == ["v0", "v1"]
    assert all(int(n) > 0 for found in counted for _, n in found)
    for name in ("v0", "v1"):
        line = rf'visionrt_cluster_frames_out_total\{{source="{name}"\}} (\S+)'
        assert re.search(line, seen["cluster"]) is not None
    assert summary.frames_out == 800
