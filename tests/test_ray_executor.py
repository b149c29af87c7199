"""The Ray executor on a local 2-CPU Ray: units stream every frame once in order, equal to a
single-process run; a bad file is the user's error; a killed actor is Lost and replaced."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import conftest
import pytest
from conftest import HANG_SECONDS, write_video
from executor_reports import (
    collect,
    ctrl_c_finalizes,
    killed_mid_file_resumes,
    lines,
    ready,
    reference,
    two_units_equal_one_process,
)

from visionrt.distributed.units import Batch, Done, Failed, WorkUnit

ray = pytest.importorskip("ray", reason="Ray is not installed: pip install 'visionrt[ray]'")
from visionrt.distributed.ray_executor import RayExecutor  # noqa: E402

pytestmark = pytest.mark.ray


@pytest.fixture(scope="module")
def executor(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RayExecutor]:
    with pytest.MonkeyPatch.context() as env:
        # Since Ray 2.59 a local cluster turns token auth on and writes ~/.ray/auth_token,
        # which a later head node on this machine would pick up: tests opt out.
        env.setenv("RAY_AUTH_MODE", "disabled")
        env.setenv("RAY_USAGE_STATS_ENABLED", "0")
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
        # The workers' attempt files in a folder of the test's, not `out/` where tests run.
        out = str(tmp_path_factory.mktemp("ray_out"))
        run = {"model": str(tiny_model), "backend": "onnxruntime", "output": {"dir": out}}
        workers = RayExecutor(None, workers=2, worker_cpus=1, worker_gpus=0, run=run)
        try:
            yield workers
        finally:
            workers.close()
            ray.shutdown()


@pytest.fixture(scope="module")
def videos(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("ray_media")
    return {
        "a": write_video(folder / "a.mp4", frames=45),
        "b": write_video(folder / "b.mp4", frames=30, width=96, height=128),
        "long": write_video(folder / "long.mp4", frames=600),
    }


def test_units_stream_every_frame_once_equal_to_one_process(
    executor: RayExecutor, videos: dict[str, Path], tiny_model: Path
) -> None:
    reports = two_units_equal_one_process(executor, videos, tiny_model)
    batches = [r for r in reports if isinstance(r, Batch)]
    assert all(0 < len(b.frames) <= 32 for b in batches)
    done = next(r for r in reports if isinstance(r, Done) and r.unit_id == 0)
    assert done.summary["frames_out"] == 45
    assert done.summary["worker"]["threads"] == 1  # from the 1 CPU Ray assigned


def test_a_group_runs_in_one_pipeline_and_each_unit_gets_its_frames(
    executor: RayExecutor, videos: dict[str, Path], tiny_model: Path
) -> None:
    """Two files as one group on one worker (one Pipeline, batched across them): each unit's
    frames come back in order under its id, equal to the file run alone but for source_id
    (the group's Pipeline numbers its sources 0 and 1), and each unit ends with a Done
    holding its own counts. A resumed unit in the group skips what was committed."""
    worker = min(executor.workers())
    group = (WorkUnit(4, "a", str(videos["a"])), WorkUnit(5, "b", str(videos["b"]), start_frame=12))
    executor.start(worker, group)
    reports = collect(executor, 2)
    assert {r.unit_id for r in reports if isinstance(r, Done)} == {4, 5}
    assert all(r.worker == worker for r in reports)
    got = [json.loads(line) for _, line in lines(reports, 4)]
    assert {r.pop("source_id") for r in got} == {0}
    alone = reference("a", videos["a"], tiny_model)
    assert got == [{k: v for k, v in r.items() if k != "source_id"} for r in alone]
    assert [index for index, _ in lines(reports, 5)] == list(range(12, 30))
    done = {r.unit_id: r.summary for r in reports if isinstance(r, Done)}
    assert (done[4]["frames_in"], done[4]["frames_out"]) == (45, 45)
    assert (done[5]["frames_in"], done[5]["frames_out"]) == (30, 30)  # 0-11 read, not sent


def test_unit_range_sends_only_its_frames(executor: RayExecutor, videos: dict[str, Path]) -> None:
    worker = min(executor.workers())
    executor.start(worker, (WorkUnit(7, "a", str(videos["a"]), start_frame=10, end_frame=25),))
    reports = collect(executor, 1)
    assert [index for index, _ in lines(reports, 7)] == list(range(10, 25))
    assert isinstance(reports[-1], Done)


def test_bad_file_is_the_users_error(executor: RayExecutor, tmp_path: Path) -> None:
    bad = tmp_path / "bad.mp4"
    bad.write_bytes(b"not a video" * 100)
    worker = min(executor.workers())
    executor.start(worker, (WorkUnit(3, "bad", str(bad), attempt=2),))
    reports = collect(executor, 1)
    assert len(reports) == 1
    failed = reports[0]
    assert isinstance(failed, Failed)
    assert (failed.worker, failed.unit_id, failed.attempt, failed.retry) == (worker, 3, 2, False)
    assert "bad.mp4" in failed.error
    assert worker in executor.workers()  # a user's error leaves the worker up


def test_a_bad_file_in_a_group_fails_alone_and_the_rest_runs_on(
    executor: RayExecutor, videos: dict[str, Path], tmp_path: Path
) -> None:
    worker = min(executor.workers())
    gone = WorkUnit(11, "gone", str(tmp_path / "gone.mp4"))
    executor.start(worker, (WorkUnit(10, "a", str(videos["a"])), gone))
    reports = collect(executor, 2)
    failed = [r for r in reports if isinstance(r, Failed)]
    assert [(r.unit_id, r.retry, r.own) for r in failed] == [(11, False, True)]
    assert "gone.mp4" in failed[0].error
    assert reports.index(failed[0]) == 0  # said before any frame of the others
    assert [index for index, _ in lines(reports, 10)] == list(range(45))
    assert [r.unit_id for r in reports if isinstance(r, Done)] == [10]


def test_killed_actor_is_lost_and_its_unit_resumes_on_a_new_worker(
    executor: RayExecutor, videos: dict[str, Path]
) -> None:
    reports = killed_mid_file_resumes(executor, videos["long"], 600)
    assert reports[-1].attempt == 2


def test_a_run_whose_actor_is_killed_mid_file_completes_every_frame_once(
    executor: RayExecutor, videos: dict[str, Path], tiny_model: Path, tmp_path: Path
) -> None:
    """The coordinator over Ray: one worker is SIGKILLed once its first frames are committed;
    its unit runs again on a survivor (or the replacement) from the last committed frame, and
    the JSONL holds each frame of each source once, in order; no `.partial` is left, and the
    killed actor's decode processes end with it (none orphaned)."""
    import psutil

    from visionrt.config import load_config
    from visionrt.distributed.run import run_on_cluster, worker_settings

    values = {
        "sources": [f"long={videos['long']}", f"a={videos['a']}"],
        "model": str(tiny_model),
        "backend": "onnxruntime",
        "source": {"workers": "process"},  # each file decoded in a process of the actor's
        "output": {"dir": str(tmp_path / "out"), "video": False},
    }
    cfg = load_config(values=values)
    killed: list[str] = []
    orphans: list[psutil.Process] = []

    def kill_once(report: Any) -> None:
        for worker, frames in report.frames_by_worker.items():
            long_file = 0 in executor.running(worker)  # still decoding: 600 frames
            if not killed and frames >= 32 and long_file and worker in executor.workers():
                killed.append(worker)
                actor = psutil.Process(executor.info(worker)["pid"])
                orphans.extend(actor.children(recursive=True))
                actor.kill()

    # The module's workers run its settings: this run's (decoding in processes) for a while.
    ready(executor)
    saved = executor.run, {name: state.settings for name, state in executor._workers.items()}
    executor.run = worker_settings(cfg)
    for state in executor._workers.values():
        state.settings = executor.run
    try:
        summary, report = run_on_cluster(cfg, executor, kill_once)
    finally:
        executor.run = saved[0]
        for name, state in executor._workers.items():
            state.settings = saved[1].get(name, saved[0])
    assert killed, "no worker was killed"
    assert report.failed == {}
    assert report.lost_workers == 1
    assert report.reassignments == 1
    assert (summary.frames_in, summary.frames_out) == (645, 645)
    lines = [json.loads(line) for line in (tmp_path / "out" / "detections.jsonl").open()]
    for source, count in (("long", 600), ("a", 45)):
        assert [r["frame"] for r in lines if r["source"] == source] == list(range(count))
    assert not list((tmp_path / "out").glob("*.partial*"))
    assert orphans, "the actor decoded in processes of its own"
    _, alive = psutil.wait_procs(orphans, timeout=HANG_SECONDS)
    assert alive == [], f"decode processes outlived their actor: {alive}"


def test_a_tracked_file_whose_actor_is_killed_keeps_its_track_ids_and_line_counts(
    executor: RayExecutor, videos: dict[str, Path], follower_model: Path, tmp_path: Path
) -> None:
    """Issue #32, items 1 and 2, over Ray: the actor running a tracked file with a line is
    SIGKILLed once two of the square's passes are committed (a new track each ~37 frames).
    Its retry resumed with a fresh tracker and line (ids from 1 again for other objects, the
    totals from 0); now it resumes with the fusion state of the last frame committed, and the
    JSONL and the summary's figures are a plain run's."""
    import psutil

    from visionrt.config import load_config
    from visionrt.distributed.run import run_on_cluster, worker_settings
    from visionrt.pipeline import pipeline_for

    values = {
        "sources": [f"long={videos['long']}"],
        "model": str(follower_model),
        "backend": "onnxruntime",
        "output": {"dir": str(tmp_path / "out"), "video": False},
        "pipeline": {"warmup": 0, "track": True},
        "analytics": {"long": {"lines": {"mid": [[64, 0], [64, 96]]}}},
        "cluster": {"range_frames": 0},
    }
    cfg = load_config(values=values)
    killed: list[str] = []

    def kill_once(report: Any) -> None:
        for worker, frames in report.frames_by_worker.items():
            if not killed and frames >= 80 and worker in executor.workers():
                killed.append(worker)
                psutil.Process(executor.info(worker)["pid"]).kill()

    ready(executor)
    saved = executor.run, {name: state.settings for name, state in executor._workers.items()}
    executor.run = worker_settings(cfg)
    for state in executor._workers.values():
        state.settings = executor.run
    executor._replacements += 1  # the module's later tests find two workers, as before it
    try:
        summary, report = run_on_cluster(cfg, executor, kill_once)
        ready(executor)  # its replacement is up (and gets the saved settings)
    finally:
        executor.run = saved[0]
        for name, state in executor._workers.items():
            state.settings = saved[1].get(name, saved[0])
    assert killed, "no worker was killed"
    assert report.reassignments == 1
    assert summary.error == ""
    plain = pipeline_for(cfg)
    try:
        expected = [json.loads(json.dumps(result.to_json())) for result in plain]
    finally:
        plain.close()
    got = [json.loads(line) for line in (tmp_path / "out" / "long.jsonl").open()]
    assert [[d["track_id"] for d in r["detections"]] for r in got] == [
        [d["track_id"] for d in r["detections"]] for r in expected
    ]
    assert [r.get("analytics") for r in got] == [r.get("analytics") for r in expected]
    alone = plain.summary()
    assert alone.analytics["long"]["lines"]["mid"]["out"] == 16
    assert summary.analytics == alone.analytics
    assert summary.events == alone.events


def test_a_split_file_whose_range_worker_is_killed_completes_every_frame_once(
    executor: RayExecutor, videos: dict[str, Path], tiny_model: Path, tmp_path: Path
) -> None:
    """A 600-frame file split into two ranges, one per worker; the worker of the second range
    is SIGKILLed once some of its frames are in: the range runs again from its own last frame,
    the first range's frames are written first, and the JSONL holds every frame once, in
    order."""
    import psutil

    from visionrt.config import load_config
    from visionrt.distributed.run import run_on_cluster

    values = {
        "sources": [f"long={videos['long']}"],
        "model": str(tiny_model),
        "backend": "onnxruntime",
        "output": {"dir": str(tmp_path / "out"), "video": False},
        "cluster": {"range_frames": 100},
    }
    cfg = load_config(values=values)
    killed: list[str] = []
    said: list[str] = []

    def kill_once(report: Any) -> None:
        for worker, frames in report.frames_by_worker.items():
            second = 1 in executor.running(worker)
            if not killed and frames >= 32 and second and worker in executor.workers():
                killed.append(worker)
                psutil.Process(executor.info(worker)["pid"]).kill()

    # Two ready workers make two ranges; an earlier test's kill may still be being replaced.
    ready(executor)
    summary, report = run_on_cluster(cfg, executor, kill_once, say=said.append)
    assert said == ["long: 2 frame ranges from frames [0, 300]"]
    assert killed, "no worker was killed"
    assert report.failed == {}
    assert report.reassignments == 1
    assert (summary.frames_in, summary.frames_out) == (600, 600)
    assert summary.accounted
    lines = [json.loads(line) for line in (tmp_path / "out" / "long.jsonl").open()]
    assert [r["frame"] for r in lines] == list(range(600))
    assert report.sources["long"].duplicates == 0  # the retry started after its last frame
    assert not list((tmp_path / "out").glob("*.partial*"))


def test_run_ray_writes_what_a_plain_run_writes(
    videos: dict[str, Path], tiny_model: Path, tmp_path: Path
) -> None:
    """`visionrt run --ray local` (its own embedded Ray, after the module's: run in a
    subprocess) and a plain run write the same JSONL and the same summary figures (events,
    zones, motion gating); summary.json has the cluster section;
    `--telemetry` is one file of the workers' per-second lines, each naming its worker. The
    embedded Ray is its own: a RAY_ADDRESS in the environment (a cluster Ray would join
    otherwise, refusing the CPUs asked) is not used."""
    import subprocess
    import sys

    sources = [f"a={videos['a']}", f"b={videos['b']}"]
    common = ["--model", str(tiny_model), "--backend", "onnxruntime", "--no-plan", "--no-video"]
    # Zones for one source (issue #32: the other's worker refused them, exit 3), tracking and
    # motion gating, whose figures summary.json adds up as a plain run's.
    common += ["--track", "--motion", "skip", "--set", "pipeline.motion_min_area=0.5",
               "--set", "analytics.a.zones.all=[[0,0],[128,0],[128,96],[0,96]]"]  # fmt: skip
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_ADDRESS": "127.0.0.1:1"}
    telemetry = tmp_path / "ray" / "telemetry.jsonl"
    cluster = ["--ray", "local", "--workers", "2", "--telemetry", str(telemetry)]
    for out, extra in (("plain", []), ("ray", cluster)):
        done = subprocess.run(
            [sys.executable, "-m", "visionrt.cli.main", "run", *sources, *common, *extra,
             "--out", str(tmp_path / out)],
            capture_output=True, text=True, timeout=HANG_SECONDS, env=env,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
    plain = (tmp_path / "plain" / "detections.jsonl").read_text().splitlines()
    clustered = (tmp_path / "ray" / "detections.jsonl").read_text().splitlines()

    def by_source(rows: list[str]) -> dict[str, list[dict]]:
        out: dict[str, list[dict]] = {}
        for row in map(json.loads, rows):
            out.setdefault(row["source"], []).append(row)
        return out

    assert by_source(clustered) == by_source(plain)
    summary = json.loads((tmp_path / "ray" / "summary.json").read_text())
    assert summary["accounted"]
    alone = json.loads((tmp_path / "plain" / "summary.json").read_text())
    assert alone["events"]["zone all: enter"] == 1
    assert alone["motion"]["reused"] > 0
    for key in ("events", "analytics", "motion"):
        assert summary[key] == alone[key], key
    assert summary["cluster"]["attempts"] == 2
    assert sorted(summary["cluster"]["sources"]) == ["a", "b"]
    lines = [json.loads(line) for line in telemetry.read_text().splitlines()]
    last = {line["worker"]: line for line in lines}  # each worker ran one file, one Pipeline
    assert sorted(last) == sorted(summary["cluster"]["workers"])
    assert all(line["node"] for line in lines)
    assert sum(line["frames_out"] for line in last.values()) == summary["frames_out"]
    assert {name for line in last.values() for name in line["sources"]} == {"a", "b"}
    assert str(telemetry) in summary["outputs"]


def test_auto_workers_are_what_the_cluster_holds() -> None:
    from visionrt.distributed.ray_executor import _fitting

    assert _fitting({"CPU": 8.0}, 2.0, 0.0) == 4
    assert _fitting({"CPU": 8.0, "GPU": 2.0}, 2.0, 1.0) == 2  # one per GPU
    assert _fitting({"CPU": 1.0}, 2.0, 0.0) == 1  # at least one (Ray then waits for room)


def test_model_files_are_fetched_from_the_drivers_node(
    executor: RayExecutor, tiny_model: Path
) -> None:
    """What a worker on a node without the driver's model does: a task placed on the
    driver's node reads the files' bytes."""
    from visionrt.distributed.actor import fetch
    from visionrt.distributed.files import manifest

    files = manifest({"model": str(tiny_model)})
    got = fetch(ray.get_runtime_context().get_node_id(), files)
    assert got == {str(tiny_model): tiny_model.read_bytes()}


def _cluster_run(sources: list[str], model: Path, out: Path, *extra: str) -> Any:
    """`visionrt run --ray local` in a subprocess (its own embedded Ray, after the module's)."""
    import subprocess
    import sys

    command = [
        sys.executable, "-m", "visionrt.cli.main", "run", *sources, "--model", str(model),
        "--backend", "onnxruntime", "--no-plan", "--ray", "local", "--workers", "1",
        "--out", str(out), "--quiet", *extra,
    ]  # fmt: skip
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    return subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env=env)


def _follow(process: Any, until: Any, timeout: float = HANG_SECONDS) -> list[Any]:
    """The processes `process` started (Ray's too), gathered until `until()` holds."""
    import psutil

    seen: dict[int, psutil.Process] = {}

    def there() -> bool:
        if until():
            return True
        assert process.poll() is None, process.communicate()[1]
        with contextlib.suppress(psutil.Error):
            seen.update({p.pid: p for p in psutil.Process(process.pid).children(recursive=True)})
        return False

    conftest.until(there, "the run got there", timeout)
    return list(seen.values())


def _none_left(started: list[Any]) -> None:
    import psutil

    _gone, alive = psutil.wait_procs(started, timeout=HANG_SECONDS)
    assert not alive, [p.name() for p in alive]


def test_ctrl_c_ends_a_cluster_run_with_its_outputs_finalized(
    videos: dict[str, Path], tiny_model: Path, tmp_path: Path
) -> None:
    """Ctrl-C mid-run: the workers finish the frames they read, and the JSONL, the videos and
    summary.json hold the frames committed (`interrupted`, every frame accounted); exit 130
    with one line; no `.partial` file and no process of the embedded Ray is left."""
    out = tmp_path / "out"
    sources = [f"a={videos['a']}", f"b={videos['b']}"]
    looped = ("--realtime", "--set", "source.loop=true")  # streams that never end
    run = _cluster_run(sources, tiny_model, out, *looped)
    partial = out / "detections.partial.jsonl"

    def enough() -> bool:
        return partial.exists() and len(partial.read_text().splitlines()) >= 20

    started = _follow(run, enough)
    said, frames = ctrl_c_finalizes(run, out)
    assert said.endswith(f" {len(frames)} frames")
    assert sorted(p.name for p in out.iterdir() if p.name.endswith((".mp4", ".jsonl"))) == [
        "a.mp4", "b.mp4", "detections.jsonl"
    ]  # fmt: skip
    summary = json.loads((out / "summary.json").read_text())
    assert all(Path(p).exists() for p in summary["outputs"])
    _none_left(started)


def test_sigterm_while_ray_starts_leaves_nothing_running(
    videos: dict[str, Path], tiny_model: Path, tmp_path: Path
) -> None:
    """SIGTERM while the embedded Ray starts its processes (Ray's own handler would exit at
    once, and a head stopped half-way left the raylet's agents running for good): one line,
    exit 130, no output, and every process it started ends."""
    import psutil

    out = tmp_path / "out"
    before = _orphans()
    run = _cluster_run([f"a={videos['a']}"], tiny_model, out)

    def ray_starting() -> bool:
        try:
            children = psutil.Process(run.pid).children(recursive=True)
            return any("gcs_server" in " ".join(p.cmdline()) for p in children)
        except psutil.Error:
            return False

    started = _follow(run, ray_starting)
    run.send_signal(signal.SIGTERM)
    _, stderr = run.communicate(timeout=HANG_SECONDS)
    assert run.returncode == 130, stderr
    said = stderr.strip().splitlines()[-1]
    assert said == "visionrt: error: interrupted (SIGTERM) while starting: nothing processed"
    assert not [p.name for p in out.iterdir()] if out.exists() else True
    time.sleep(1.0)  # the raylet starts its agents after it registers
    _none_left(started + [p for pid, p in _orphans().items() if pid not in before])


def _orphans() -> dict[int, Any]:
    """Ray's processes whose parent is gone (re-parented to init)."""
    import psutil

    found = psutil.process_iter(["name", "ppid"])
    return {
        p.pid: p
        for p in found
        if (p.info["name"] or "").startswith("ray::") and p.info["ppid"] == 1
    }


class _DyingGenerator:
    """A running group's generator whose next report raises `error` (from `ray.get`)."""

    def __init__(self, error: BaseException) -> None:
        self.error = error

    def __next__(self) -> BaseException:
        return self.error


class _FakeRay:
    """What `_drain` calls of Ray: the real exception classes, a get that raises."""

    exceptions = ray.exceptions

    def __init__(self) -> None:
        self.killed: list[Any] = []

    def wait(self, refs: list[Any], timeout: float) -> tuple[list[Any], list[Any]]:
        return refs, []

    def get(self, error: BaseException) -> None:
        raise error

    def kill(self, actor: Any) -> None:
        self.killed.append(actor)


@pytest.mark.parametrize(
    ("error", "lost"),
    [
        (ray.exceptions.ActorDiedError(), True),
        (ray.exceptions.NodeDiedError("node gone"), True),
        (ray.exceptions.ObjectReconstructionFailedError("ff" * 28), True),
        (ray.exceptions.WorkerCrashedError(), True),
        (ray.exceptions.TaskCancelledError(), False),
    ],
    ids=["actor", "node", "object", "worker", "cancelled"],
)
def test_a_worker_whose_node_died_is_lost_however_ray_says_it(
    error: BaseException, lost: bool
) -> None:
    """A node that goes mid-run reaches the driver as one of several errors, by timing: each
    is the worker lost (its units resumed elsewhere, counted as a lost worker), not a failure
    of its units; another error of the task fails its units for a retry."""
    from visionrt.distributed.ray_executor import _Worker
    from visionrt.distributed.units import Lost

    executor = object.__new__(RayExecutor)
    executor.ray = _FakeRay()
    executor._replacements = 0
    executor._lost_errors = RayExecutor.lost_errors(ray)
    state = _Worker(actor="actor", running=_DyingGenerator(error), units={7: 1})
    executor._workers = {"w1": state}
    reports = executor._drain("w1", state)
    if lost:
        assert reports == [Lost("w1")]
        assert executor._workers == {}
        assert executor.ray.killed == ["actor"]
    else:
        assert [type(r) for r in reports] == [Failed]
        assert reports[0].retry
        assert "w1" in executor._workers
