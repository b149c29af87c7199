"""Worker processes of this machine, no Ray (`--ray processes`): units stream every frame once
in order, equal to a single-process run; a killed worker is Lost, replaced, and its unit
resumes; a stop ends a group with what it read; `run --ray processes` writes what a plain run
writes; Ctrl-C finalizes the outputs and leaves no process behind."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import conftest
import psutil
import pytest
from conftest import HANG_SECONDS, write_video
from executor_reports import (
    collect,
    ctrl_c_finalizes,
    killed_mid_file_resumes,
    lines,
    ready,
    two_units_equal_one_process,
)

from visionrt.config import ClusterOptions
from visionrt.distributed.processes import ProcessExecutor
from visionrt.distributed.report import ClusterReport, SourceState
from visionrt.distributed.units import Done, Report, WorkUnit
from visionrt.errors import ConfigError

LONG = 2000  # frames of the long video


@pytest.fixture(scope="module")
def executor(
    tiny_model: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ProcessExecutor]:
    # The workers' attempt files in a folder of the test's, not `out/` where the tests run.
    out = str(tmp_path_factory.mktemp("process_out"))
    run = {"model": str(tiny_model), "backend": "onnxruntime", "output": {"dir": out}}
    workers = ProcessExecutor(2, worker_cpus=1, run=run)
    try:
        yield workers
    finally:
        workers.close()


@pytest.fixture(scope="module")
def videos(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("process_media")
    return {
        "a": write_video(folder / "a.mp4", frames=45),
        "b": write_video(folder / "b.mp4", frames=30, width=96, height=128),
        # Longer than a worker can run ahead of a driver that reads nothing (the pipe's buffer:
        # some hundreds of frames' lines), so a stop or a kill finds it mid-file.
        "long": write_video(folder / "long.mp4", frames=LONG),
    }


def test_units_stream_every_frame_once_equal_to_one_process(
    executor: ProcessExecutor, videos: dict[str, Path], tiny_model: Path
) -> None:
    reports = two_units_equal_one_process(executor, videos, tiny_model)
    assert {executor.info(w)["pid"] for w in executor.workers()}.isdisjoint({os.getpid()})
    done = next(r for r in reports if isinstance(r, Done) and r.unit_id == 0)
    assert done.summary["frames_out"] == 45
    assert done.summary["worker"]["threads"] == 1
    assert done.summary["worker"]["node"] == "local"


def test_a_busy_worker_cannot_start_another_group_and_an_idle_one_cannot_stop(
    executor: ProcessExecutor, videos: dict[str, Path]
) -> None:
    assert ready(executor) == []
    worker = min(executor.workers())
    assert not executor.stop(worker)  # idle: nothing to stop
    executor.start(worker, (WorkUnit(5, "a", str(videos["a"])),))
    with pytest.raises(RuntimeError, match="is not idle"):
        executor.start(worker, (WorkUnit(6, "b", str(videos["b"])),))
    assert isinstance(collect(executor, 1)[-1], Done)


def test_a_stopped_group_ends_with_the_frames_it_read(
    executor: ProcessExecutor, videos: dict[str, Path]
) -> None:
    assert ready(executor) == []
    worker = min(executor.workers())
    executor.start(worker, (WorkUnit(7, "long", str(videos["long"])),))
    first: list[Report] = []
    while not first:
        first = executor.reports(10.0)
    assert executor.stop(worker)
    reports = first + collect(executor, 1)
    assert isinstance(reports[-1], Done)
    sent = [index for index, _ in lines(reports, 7)]
    assert sent == list(range(len(sent)))
    assert 0 < len(sent) < LONG


def test_a_killed_worker_is_lost_replaced_and_its_unit_resumes(
    executor: ProcessExecutor, videos: dict[str, Path]
) -> None:
    assert ready(executor) == []
    killed_mid_file_resumes(executor, videos["long"], LONG)


def test_a_bad_option_fails_before_any_process_starts(tiny_model: Path) -> None:
    before = {p.pid for p in psutil.Process().children()}
    with pytest.raises(ConfigError, match="unknown option"):
        ProcessExecutor(1, run={"model": str(tiny_model), "pipeline": {"nope": 1}})
    assert {p.pid for p in psutil.Process().children()} == before
    ClusterOptions(address="processes")  # an address of its own, not Ray's
    with pytest.raises(ConfigError, match="expected local, auto, processes or HOST:PORT"):
        ClusterOptions(address="procs")


def _run(sources: list[str], model: Path, out: Path, *extra: str) -> subprocess.Popen[str]:
    command = [
        sys.executable, "-m", "visionrt.cli.main", "run", *sources, "--model", str(model),
        "--backend", "onnxruntime", "--no-plan", "--out", str(out), *extra,
    ]  # fmt: skip
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_run_on_processes_writes_what_a_plain_run_writes(
    videos: dict[str, Path], tiny_model: Path, tmp_path: Path
) -> None:
    sources = [f"a={videos['a']}", f"b={videos['b']}"]
    common = ["--no-video", "--track"]
    for out, extra in (("plain", []), ("processes", ["--ray", "processes", "--workers", "2"])):
        run = _run(sources, tiny_model, tmp_path / out, *common, *extra)
        _, stderr = run.communicate(timeout=HANG_SECONDS)
        assert run.returncode == 0, stderr
    assert "processes: 2 worker process(es) on this machine" in stderr

    def by_source(folder: str) -> dict[str, list[dict]]:
        rows: dict[str, list[dict]] = {}
        for line in (tmp_path / folder / "detections.jsonl").read_text().splitlines():
            row = json.loads(line)
            rows.setdefault(row["source"], []).append(row)
        return rows

    assert by_source("processes") == by_source("plain")
    summary = json.loads((tmp_path / "processes" / "summary.json").read_text())
    assert summary["accounted"]
    assert summary["frames_out"] == 75
    assert summary["cpu_percent"] > 0  # the workers' processes and the driver's (was 0)
    cluster = summary["cluster"]
    assert cluster["attempts"] == 2
    # The workers' start is told apart from the running rate (its arithmetic: below).
    assert {"first_result_seconds", "fps_after_first_result"} <= cluster.keys()


def test_the_running_rate_leaves_out_the_start_and_the_first_frames() -> None:
    report = ClusterReport(seconds=10.0, first_result=4.0, first_frames=32)
    report.sources = {"a": SourceState(written=332), "b": SourceState(written=300)}
    assert report.fps_after_first_result() == 100.0  # (632 - 32) frames over 6 s
    assert report.to_json()["first_result_seconds"] == 4.0
    assert ClusterReport(seconds=10.0).fps_after_first_result() == 0.0  # no result yet


def test_ctrl_c_ends_a_run_on_processes_with_its_outputs_finalized(
    videos: dict[str, Path], tiny_model: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    sources = [f"a={videos['a']}", f"b={videos['b']}"]
    looped = ("--realtime", "--set", "source.loop=true")  # streams that never end
    run = _run(sources, tiny_model, out, "--ray", "processes", "--workers", "2", "-q", *looped)
    partial = out / "detections.partial.jsonl"
    seen: dict[int, Any] = {}

    def enough() -> bool:
        assert run.poll() is None, run.communicate()[1]
        with contextlib.suppress(psutil.Error):
            seen.update({p.pid: p for p in psutil.Process(run.pid).children(recursive=True)})
        return partial.exists() and len(partial.read_text().splitlines()) >= 20

    conftest.until(enough, "20 frames committed")
    assert len(seen) >= 2  # the worker processes
    ctrl_c_finalizes(run, out)
    _gone, alive = psutil.wait_procs(list(seen.values()), timeout=HANG_SECONDS)
    assert not alive, [p.name() for p in alive]


def test_sigterm_while_the_workers_start_leaves_nothing_running(
    videos: dict[str, Path], tiny_model: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    run = _run([f"a={videos['a']}"], tiny_model, out, "--ray", "processes", "--workers", "2")
    seen: dict[int, Any] = {}

    def workers_spawned() -> bool:
        assert run.poll() is None, run.communicate()[1]
        with contextlib.suppress(psutil.Error):
            children = psutil.Process(run.pid).children(recursive=True)
            seen.update({p.pid: p for p in children})
            return sum("multiprocessing" in " ".join(p.cmdline()) for p in children) >= 2
        return False

    conftest.until(workers_spawned, "the worker processes spawned")
    run.send_signal(signal.SIGTERM)
    _, stderr = run.communicate(timeout=HANG_SECONDS)
    assert run.returncode == 130, stderr
    said = stderr.strip().splitlines()[-1]
    assert said == "visionrt: error: interrupted (SIGTERM) while starting: nothing processed"
    assert "Traceback" not in stderr
    assert not (out / "detections.jsonl").exists()
    _gone, alive = psutil.wait_procs(list(seen.values()), timeout=HANG_SECONDS)
    assert not alive, [p.name() for p in alive]


def test_ctrl_c_at_the_terminal_while_workers_import_is_one_line(
    videos: dict[str, Path], tiny_model: Path, tmp_path: Path
) -> None:
    """Ctrl-C goes to the whole process group: the workers, still importing, ignore it (they
    start with SIGINT blocked, then ignore it), and the run says one line; no worker's traceback."""
    command = [
        sys.executable, "-m", "visionrt.cli.main", "run", f"a={videos['long']}", "--model",
        str(tiny_model), "--backend", "onnxruntime", "--no-plan", "--out", str(tmp_path / "o"),
        "--ray", "processes", "--workers", "2",
    ]  # fmt: skip
    run = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, start_new_session=True)

    def spawned() -> bool:
        assert run.poll() is None, run.communicate()[1]
        with contextlib.suppress(psutil.Error):
            children = psutil.Process(run.pid).children()
            return sum("multiprocessing" in " ".join(p.cmdline()) for p in children) >= 2
        return False

    conftest.until(spawned, "the worker processes spawned")
    workers = [
        p for p in psutil.Process(run.pid).children() if "multiprocessing" in " ".join(p.cmdline())
    ]
    for worker in workers:  # blocked from their first instruction, then ignored
        assert any(conftest.sigint_state(Path(f"/proc/{worker.pid}/status")))
    os.killpg(run.pid, signal.SIGINT)
    _, stderr = run.communicate(timeout=HANG_SECONDS)
    assert run.returncode == 130, stderr
    assert "Traceback" not in stderr, stderr
    assert "KeyboardInterrupt" not in stderr, stderr
    assert stderr.strip().splitlines()[-1].startswith("visionrt: error: interrupted")
