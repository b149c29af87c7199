"""What the executor tests (Ray actors, worker processes) read from an executor: its reports
until units end, its workers ready, a unit's frames, and the single-process run to compare."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import conftest
from conftest import HANG_SECONDS

from visionrt.distributed.coordinator import Executor
from visionrt.distributed.units import Batch, Done, Failed, Lost, Report, WorkUnit
from visionrt.pipeline import Pipeline


def collect(executor: Executor, units: int, timeout: float = HANG_SECONDS) -> list[Report]:
    """Reports until `units` units ended (Done or Failed) or a worker was Lost (`timeout` only
    guards against a hang)."""
    out: list[Report] = []

    def ended() -> bool:
        if sum(isinstance(r, Done | Failed) for r in out) >= units:
            return True
        out.extend(executor.reports(1.0))
        return any(isinstance(r, Lost) for r in out)

    conftest.until(ended, f"{units} unit(s) ended", timeout)
    return out


def ready(executor: Executor, workers: int = 2) -> list[Report]:
    """Wait until `workers` workers are ready: a replacement for one an earlier test killed
    may still be starting (seconds on a loaded machine). The reports that came meanwhile."""
    out: list[Report] = []

    def up() -> bool:
        if len(executor.workers()) >= workers:
            return True
        out.extend(executor.reports(1.0))
        return False

    conftest.until(up, f"{workers} workers ready")
    return out


def lines(reports: list[Report], unit_id: int) -> list[tuple[int, str]]:
    """The (frame index, JSONL line) pairs `unit_id`'s batches carried, in the order sent."""
    return [f for r in reports if isinstance(r, Batch) and r.unit_id == unit_id for f in r.frames]


def reference(name: str, video: Path, model: Path) -> list[dict]:
    """`video`'s records from a plain single-process run (onnxruntime), named `name`."""
    pipeline = Pipeline([f"{name}={video}"], model, "onnxruntime", plan=False)
    try:
        return [result.to_json() for result in pipeline]
    finally:
        pipeline.close()


def two_units_equal_one_process(
    executor: Executor, videos: dict[str, Path], model: Path
) -> list[Report]:
    """Units for videos "a" (45 frames) and "b" (30) on the executor's two workers, one each:
    each streams every frame once, in order, records equal to a single-process run's (to_json
    holds no timings, and one source per Pipeline numbers both 0). The reports."""
    workers = sorted(executor.workers())
    assert len(workers) == 2
    for unit_id, (worker, name) in enumerate(zip(workers, ("a", "b"), strict=True)):
        executor.start(worker, (WorkUnit(unit_id, name, str(videos[name])),))
    reports = collect(executor, 2)
    assert sorted((r.unit_id, r.worker) for r in reports if isinstance(r, Done)) == [
        (0, workers[0]),
        (1, workers[1]),
    ]
    for unit_id, name, frames in ((0, "a", 45), (1, "b", 30)):
        got = lines(reports, unit_id)
        assert [index for index, _ in got] == list(range(frames))
        records = [json.loads(line) for _, line in got]
        assert records == reference(name, videos[name], model)
    return reports


def killed_mid_file_resumes(executor: Executor, video: Path, frames: int) -> list[Report]:
    """A unit of `video` (`frames` long) whose worker is SIGKILLed after its first reports:
    Lost, its frames so far in order and fewer than all; resumed on the replacement after the
    last frame sent, which then sends the rest. The resumed attempt's reports.

    The worker can run only a few batches ahead of a driver that reads nothing (Ray's generator
    back-pressure, a pipe's buffer), so it is still mid-file when it is killed."""
    victim = min(executor.workers())
    unit = WorkUnit(9, "long", str(video))
    executor.start(victim, (unit,))
    first: list[Report] = []
    while not first:
        first = executor.reports(10.0)
    assert all(isinstance(r, Batch) for r in first)
    os.kill(executor.info(victim)["pid"], signal.SIGKILL)
    reports = collect(executor, 1)
    assert reports[-1] == Lost(victim)
    survivors = executor.workers()
    assert victim not in survivors
    sent = lines(first + reports, 9)
    assert [index for index, _ in sent] == list(range(len(sent)))
    assert len(sent) < frames
    assert ready(executor) == []  # its replacement, under a new name
    (replacement,) = executor.workers() - survivors
    executor.start(replacement, (unit.retried(resume_at=len(sent)),))
    reports = collect(executor, 1)
    assert isinstance(reports[-1], Done)
    assert [index for index, _ in lines(reports, 9)] == list(range(len(sent), frames))
    return reports


def ctrl_c_finalizes(run: subprocess.Popen[str], out: Path) -> tuple[str, list[str]]:
    """SIGINT to a cluster run mid-run: exit 130 with one line, summary.json `interrupted`
    with every frame accounted, the JSONL holding the frames committed (20 or more). The line
    and the JSONL's lines."""
    run.send_signal(signal.SIGINT)
    _, stderr = run.communicate(timeout=HANG_SECONDS)
    assert run.returncode == 130, stderr
    said = stderr.strip().splitlines()[-1]
    assert said.startswith("visionrt: error: interrupted: outputs finalized with"), stderr
    assert "Traceback" not in stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["interrupted"]
    assert summary["accounted"]
    frames = (out / "detections.jsonl").read_text().splitlines()
    assert len(frames) == summary["frames_out"] >= 20
    return said, frames
