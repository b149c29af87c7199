"""The distributed coordinator with scripted executors: the pull queue, a lost worker's unit run
again from the last committed frame, frames written once and in order, late answers of a given-up
attempt ignored, a user error not retried, attempts bounded, a cluster with no worker left."""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import HANG_SECONDS, finishes, write_video

from visionrt import Pipeline
from visionrt.distributed.coordinator import Coordinator, RunStop
from visionrt.distributed.local import ThreadExecutor
from visionrt.distributed.units import Batch, Done, Failed, Lost, Report, WorkUnit
from visionrt.distributed.worker import run_group
from visionrt.errors import ConfigError, SourceError
from visionrt.fuse import Checkpoint
from visionrt.sinks import JsonlSink


def units(*frames: int) -> list[WorkUnit]:
    return [WorkUnit(i, f"s{i}", f"video{i}.mp4", end_frame=n) for i, n in enumerate(frames)]


def tiny_run(model: Path, **sections: object) -> dict[str, object]:
    """A worker's settings for the tiny detector (ONNX Runtime, no warm-up, no MP4: an
    attempt's would go to the working folder's out/), with `sections`."""
    return {
        "model": str(model),
        "backend": "onnxruntime",
        "pipeline": {"warmup": 0},
        "output": {"video": False},
        **sections,
    }


def lines(unit: WorkUnit, start: int, stop: int) -> tuple[tuple[int, str], ...]:
    return tuple((f, f"{unit.name}:{f}") for f in range(start, stop))


class CoordinatorClock:
    """The coordinator's `time`: `monotonic()` reads a clock that moves only when the test says
    (a Scripted executor's pause per report), so rates, gaps and waits come out the same on any
    machine."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> CoordinatorClock:
    import visionrt.distributed.coordinator as coordinator_module

    fake = CoordinatorClock()
    monkeypatch.setattr(coordinator_module, "time", fake)
    return fake


class Scripted:
    """Workers `names`; `act(worker, unit)` returns the reports starting `unit` produces (and
    may take workers away); reports come back one per `reports` call (after `pause` s: on
    `clock` when given, else slept), in order."""

    def __init__(
        self,
        names: set[str],
        act: Callable[[str, WorkUnit], list[Report]],
        pause: float = 0.0,
        clock: CoordinatorClock | None = None,
    ) -> None:
        self.alive, self.act, self.pause, self.clock = set(names), act, pause, clock
        self.pending: list[Report] = []
        self.started: list[tuple[str, WorkUnit]] = []

    def workers(self) -> set[str]:
        return set(self.alive)

    def start(self, worker: str, units: tuple[WorkUnit, ...]) -> None:
        for unit in units:
            self.started.append((worker, unit))
            self.pending.extend(self.act(worker, unit))

    def reports(self, timeout: float) -> list[Report]:
        if self.clock is not None:
            self.clock.now += self.pause
        else:
            time.sleep(self.pause)
        return [self.pending.pop(0)] if self.pending else []

    def stop(self, worker: str) -> bool:
        return False

    def info(self, worker: str) -> dict[str, str]:
        return {"worker": worker, "node": f"node-{worker}"}

    def close(self) -> None:
        pass


def whole(worker: str, unit: WorkUnit) -> list[Report]:
    """A worker that runs the unit from its start frame to its end, in batches of 4."""
    end = unit.end_frame or 0
    batches: list[Report] = [
        Batch(worker, unit.unit_id, unit.attempt, lines(unit, f, min(f + 4, end)))
        for f in range(unit.start_frame, end, 4)
    ]
    return [*batches, Done(worker, unit.unit_id, unit.attempt)]


def run(work: list[WorkUnit], executor: object, **options: object) -> tuple[dict, object]:
    written: dict[str, list[int]] = {}

    def write(name: str, frame: int, line: str) -> None:
        assert line == f"{name}:{frame}"
        written.setdefault(name, []).append(frame)

    report = Coordinator(work, executor, write, **options).run()  # type: ignore[arg-type]
    return written, report


def test_idle_workers_pull_units_and_every_frame_is_written_once_in_order() -> None:
    executor = Scripted({"w1", "w2"}, whole)
    written, report = run(units(9, 5, 12, 3, 7), executor)
    assert written == {f"s{i}": list(range(n)) for i, n in enumerate((9, 5, 12, 3, 7))}
    assert report.failed == {}
    assert report.attempts == 5
    assert report.reassignments == 0
    assert {worker for worker, _ in executor.started} == {"w1", "w2"}
    assert sum(report.frames_by_worker.values()) == 9 + 5 + 12 + 3 + 7


def test_a_lost_workers_unit_runs_again_after_the_last_committed_frame() -> None:
    def act(worker: str, unit: WorkUnit) -> list[Report]:
        if worker == "w1" and unit.attempt == 1 and unit.name == "s0":
            executor.alive.discard("w1")  # dies after frames 0-7 of 20
            return [
                Batch(worker, unit.unit_id, 1, lines(unit, 0, 4)),
                Batch(worker, unit.unit_id, 1, lines(unit, 4, 8)),
                Lost(worker),
                # The dead actor answers late: its attempt was given up, nothing is written.
                Batch(worker, unit.unit_id, 1, lines(unit, 8, 12)),
            ]
        # The retry does not honour its start frame: it sends 0-19 again.
        restart = WorkUnit(unit.unit_id, unit.name, unit.spec, 0, unit.end_frame, unit.attempt)
        return whole(worker, restart)

    executor = Scripted({"w1", "w2"}, act)
    written, report = run(units(20, 6), executor)
    assert written == {"s0": list(range(20)), "s1": list(range(6))}
    retried = [u for w, u in executor.started if u.name == "s0" and u.attempt == 2]
    assert len(retried) == 1
    assert retried[0].start_frame == 8  # after the last frame committed
    assert report.reassignments == 1
    assert report.lost_workers == 1
    assert report.stale_batches == 1
    assert report.sources["s0"].duplicates == 8  # 0-7 sent again, dropped
    assert report.to_json()["sources"]["s0"]["attempts"] == 2


def test_a_retry_resumes_with_the_fusion_state_of_the_last_frame_committed() -> None:
    """Issue #32, items 1 and 2: each batch brings its source's fusion state after its last
    frame (tracks, zones, lines); the retry of a lost worker's unit resumes after the last
    frame committed with the state after that frame, not a batch's sent again (duplicates),
    nor a late one of the attempt given up. A live stream's retry takes its state too."""
    after = {f: Checkpoint({"after": f}) for f in (3, 7, 11)}

    def batch(worker: str, unit: WorkUnit, start: int, stop: int, attempt: int = 1) -> Batch:
        return Batch(worker, unit.unit_id, attempt, lines(unit, start, stop), after.get(stop - 1))

    def act(worker: str, unit: WorkUnit) -> list[Report]:
        if unit.attempt == 1:
            executor.alive.discard(worker)
            executor.alive.add(f"{worker}-next")
            return [
                batch(worker, unit, 0, 4),
                batch(worker, unit, 4, 8),
                Lost(worker),
                batch(worker, unit, 8, 12),  # late: its attempt was given up
            ]
        if unit.attempt == 2:  # sends 4-7 again, with the state after 7, then dies
            executor.alive.discard(worker)
            executor.alive.add(f"{worker}-next")
            return [batch(worker, unit, 4, 8, 2), Lost(worker)]
        return whole(worker, unit)

    executor = Scripted({"w1"}, act)
    written, report = run(units(12), executor, max_attempts=4)
    assert written == {"s0": list(range(12))}
    retries = [(u.attempt, u.start_frame, u.checkpoint) for _, u in executor.started[1:]]
    assert retries == [(2, 8, after[7]), (3, 8, after[7])]
    assert report.sources["s0"].duplicates == 4

    stream = WorkUnit(0, "cam", "rtsp://cam", live=True)
    executor = Scripted({"w1"}, act)
    Coordinator([stream], executor, lambda *_: None, max_attempts=4).run()
    assert [u.checkpoint for _, u in executor.started] == [None, after[7], after[7]]


def test_a_user_error_fails_its_source_at_once_and_the_others_finish() -> None:
    def act(worker: str, unit: WorkUnit) -> list[Report]:
        if unit.name == "s1":
            return [Failed(worker, unit.unit_id, unit.attempt, "not a video", retry=False)]
        return whole(worker, unit)

    written, report = run(units(5, 5, 5), Scripted({"w1"}, act))
    assert report.failed == {"s1": "not a video"}
    assert report.sources["s1"].attempts == 1
    assert written == {"s0": list(range(5)), "s2": list(range(5))}


def test_attempts_are_bounded() -> None:
    def act(worker: str, unit: WorkUnit) -> list[Report]:
        return [Failed(worker, unit.unit_id, unit.attempt, "segfault in the runtime")]

    written, report = run(units(5), Scripted({"w1", "w2"}, act), max_attempts=3)
    assert written == {}
    assert report.failed == {"s0": "gave up after 3 attempts (segfault in the runtime)"}
    assert report.attempts == 3


def test_a_cluster_with_no_worker_left_fails_what_is_queued() -> None:
    def act(worker: str, unit: WorkUnit) -> list[Report]:
        executor.alive.clear()  # the last node went away
        return [Lost(worker)]

    executor = Scripted({"w1"}, act)
    written, report = run(units(5, 5), executor, no_workers_grace=0.2)
    assert written == {}
    assert set(report.failed) == {"s0", "s1"}
    assert "no worker left" in report.failed["s1"]


def ranges(name: str, *cuts: int) -> list[WorkUnit]:
    """Source `name` as frame ranges [cuts[0], cuts[1]), [cuts[1], cuts[2]), ..."""
    return [
        WorkUnit(i, name, f"{name}.mp4", a, b, first_frame=a)
        for i, (a, b) in enumerate(itertools.pairwise(cuts))
    ]


class LastFirst(Scripted):
    """As Scripted, but the reports of the unit started last come first: a file's later
    ranges finish before its earlier ones."""

    def reports(self, timeout: float) -> list[Report]:
        ids = [getattr(report, "unit_id", -1) for report in self.pending]
        if not ids:
            return []
        return [self.pending.pop(ids.index(max(ids)))]


def test_a_files_ranges_are_written_in_order_though_later_ones_finish_first(
    tmp_path: Path,
) -> None:
    """Three ranges of one file on three workers, the last finishing first: every frame is
    written once and in order (a later range's frames are held until the ones before are
    done), and nothing is held at the end."""
    executor = LastFirst({"w1", "w2", "w3"}, whole)
    written, report = run(ranges("s", 0, 10, 22, 30), executor, spool_dir=tmp_path)
    assert written["s"] == list(range(30))
    assert {w for w, _ in executor.started} == {"w1", "w2", "w3"}
    state = report.sources["s"]
    assert (state.units, state.done_units, state.held, state.duplicates) == (3, 3, 0, 0)
    assert sum(report.frames_by_worker.values()) == 30
    assert list(tmp_path.iterdir()) == []  # the spools leave no file behind


def test_a_lost_range_resumes_after_its_own_last_frame() -> None:
    """The middle range's worker dies after 4 frames: its retry starts at frame 14 (after its
    own last frame, not the source's last written one), and the source is written whole, in
    order, once."""

    def act(worker: str, unit: WorkUnit) -> list[Report]:
        if unit.unit_id == 1 and unit.attempt == 1:
            executor.alive.discard(worker)
            return [Batch(worker, 1, 1, lines(unit, 10, 14)), Lost(worker)]
        return whole(worker, unit)

    executor = LastFirst({"w1", "w2", "w3"}, act)
    written, report = run(ranges("s", 0, 10, 20, 30), executor)
    assert written["s"] == list(range(30))
    retry = [u for _, u in executor.started if u.unit_id == 1 and u.attempt == 2]
    assert [(u.start_frame, u.first_frame, u.end_frame) for u in retry] == [(14, 10, 20)]
    assert report.sources["s"].duplicates == 0


def test_a_stopped_run_writes_the_held_ranges_after_what_was_written() -> None:
    """A stop while the first range is still running: the later ranges' frames a worker sent
    are written too, after the first range's, in order (with the gap of what it never sent)."""
    stop = RunStop()

    def act(worker: str, unit: WorkUnit) -> list[Report]:
        if unit.unit_id == 0:  # sends 4 frames, then the user presses Ctrl-C
            return [Batch(worker, 0, 1, lines(unit, 0, 4))]
        return whole(worker, unit)

    executor = Scripted({"w1", "w2", "w3"}, act)
    original = executor.reports

    def reports(timeout: float) -> list[Report]:
        got = original(timeout)
        if not executor.pending:
            stop.abort()
        return got

    executor.reports = reports  # type: ignore[method-assign]
    written, report = run(ranges("s", 0, 10, 20, 30), executor, stop=stop)
    assert written["s"] == [*range(4), *range(10, 30)]
    assert report.sources["s"].held == 0


def test_two_ranges_of_one_file_never_share_a_pipeline() -> None:
    """One worker taking up to 4 files at once takes one range of a file at a time (two would
    share its name and outputs in one Pipeline), beside other files."""
    work = [*ranges("s", 0, 10, 20), WorkUnit(2, "t", "t.mp4", end_frame=5)]
    executor = Scripted({"w1"}, whole)
    written, _ = run(work, executor, group=4)
    assert written == {"s": list(range(20)), "t": list(range(5))}
    first = [u.unit_id for w, u in executor.started][:2]
    assert first == [0, 2]  # s's first range beside t; its second range after


def test_threads_run_units_and_report_user_errors() -> None:
    def run_one(group: tuple[WorkUnit, ...], send: Callable[..., None]) -> dict:
        (unit,) = group
        if unit.spec == "missing.mp4":
            raise SourceError("source not found: missing.mp4")
        end = unit.end_frame or 0
        for start in range(unit.start_frame, end, 3):
            send(unit.unit_id, lines(unit, start, min(start + 3, end)), None)
        return {unit.unit_id: {"frames": end}}

    work = [*units(7, 4), WorkUnit(2, "bad", "missing.mp4")]
    executor = ThreadExecutor(2, run_one)
    written, report = run(work, executor)
    executor.close()
    assert written == {"s0": list(range(7)), "s1": list(range(4))}
    assert report.failed == {"bad": "source not found: missing.mp4"}


def test_units_through_real_pipelines_write_what_one_process_writes(
    tmp_path: Path, tiny_model: Path
) -> None:
    """Two videos as units on two thread workers, each a Pipeline of the tiny detector: the
    lines committed per source are those a single-process run over both yields."""
    videos = [write_video(tmp_path / f"v{i}.mp4", frames=n) for i, n in enumerate((12, 7))]
    settings = tiny_run(tiny_model)
    work = [WorkUnit(i, f"v{i}", str(v)) for i, v in enumerate(videos)]
    executor = ThreadExecutor(2, lambda group, send: run_group(group, settings, send))
    got: dict[str, list[str]] = {}
    report = Coordinator(
        work, executor, lambda n, f, line: got.setdefault(n, []).append(line)
    ).run()
    executor.close()
    assert report.failed == {}
    alone = Pipeline([f"v{i}={v}" for i, v in enumerate(videos)], tiny_model, "onnxruntime")
    expected: dict[str, list[str]] = {}
    for result in alone:
        record = result.to_json()
        expected.setdefault(record["source"], []).append(record)
    alone.close()
    committed = {name: [json.loads(line) for line in rows] for name, rows in got.items()}
    for rows in [*committed.values(), *expected.values()]:
        for row in rows:
            row.pop("source_id")  # each worker's Pipeline numbers its one source 0
    assert committed == expected
    assert {name: len(rows) for name, rows in committed.items()} == {"v0": 12, "v1": 7}


def test_a_cluster_run_writes_the_jsonl_a_single_process_run_writes(
    tmp_path: Path, tiny_model: Path
) -> None:
    """`run_on_cluster` over thread workers and a plain run of the same sources write the same
    detections.jsonl, line for line per source (source ids included; a named image folder's
    lines with their image, as a plain run writes them); a missing file fails its source
    alone, named in the summary's error."""
    import cv2
    import numpy as np

    from visionrt.config import load_config
    from visionrt.distributed.run import run_on_cluster, worker_settings

    videos = [str(write_video(tmp_path / f"v{i}.mp4", frames=n)) for i, n in enumerate((9, 6))]
    shelf = tmp_path / "shelf"
    shelf.mkdir()
    for i in range(3):
        cv2.imwrite(str(shelf / f"{i}.png"), np.full((48, 64, 3), 40 * i, np.uint8))
    values = {
        "sources": [f"a={videos[0]}", videos[1], f"photos={shelf}"],
        "model": str(tiny_model),
        "backend": "onnxruntime",
        "output": {"dir": str(tmp_path / "cluster"), "video": False},
        "pipeline": {"warmup": 0},
    }
    cfg = load_config(values=values)
    executor = ThreadExecutor(2, lambda group, send: run_group(group, worker_settings(cfg), send))
    summary, report = run_on_cluster(cfg, executor)
    executor.close()
    assert summary.error == ""
    assert (summary.frames_in, summary.frames_out) == (18, 18)
    assert summary.accounted
    assert summary.cluster["sources"]["a"]["frames_out"] == 9

    alone = Pipeline(values["sources"], tiny_model, "onnxruntime")  # as `visionrt run` writes
    plain = tmp_path / "plain.jsonl"
    alone.run([JsonlSink(plain, alone.names, [source.name for source in alone.sources])])
    alone.close()
    expected = [json.loads(line) for line in plain.read_text().splitlines()]
    lines = (tmp_path / "cluster" / "detections.jsonl").read_text().splitlines()
    got = [json.loads(line) for line in lines]
    for name in ("a", "v1", "photos"):
        assert [r for r in got if r["source"] == name] == [
            r for r in expected if r["source"] == name
        ]
    assert [Path(r["image"]).name for r in got if r["source"] == "photos"] == [
        "0.png", "1.png", "2.png"
    ]  # fmt: skip

    broken = load_config(values={**values, "sources": [videos[0], str(tmp_path / "gone.mp4")]})
    executor = ThreadExecutor(
        2, lambda group, send: run_group(group, worker_settings(broken), send)
    )
    summary, report = run_on_cluster(broken, executor)
    executor.close()
    assert report.failed.keys() == {"gone"}
    assert "gone: source not found" in summary.error
    assert summary.frames_out == 9
    # One worker takes both into one Pipeline: the missing file fails alone, at once, and the
    # other runs on in that attempt (a bad camera must not hold the others back).
    grouped = load_config(values={**values, "sources": broken.sources, "output": {
        "dir": str(tmp_path / "grouped"), "video": False}})  # fmt: skip
    executor = ThreadExecutor(
        1, lambda group, send: run_group(group, worker_settings(grouped), send)
    )
    summary, report = run_on_cluster(grouped, executor)
    executor.close()
    assert report.failed.keys() == {"gone"}
    assert summary.frames_out == 9
    assert report.attempts == 2  # one group of two units, no retry


def test_files_resumed_at_different_frames_run_again_in_one_group() -> None:
    """A lost worker's group of files: each resumes after its own last committed frame, and
    they run again together (one Pipeline, each source from its own frame), not one by one."""
    calls: list[tuple[str, list[tuple[str, int]]]] = []

    def act(worker: str, unit: WorkUnit) -> list[Report]:
        if worker == "w1":
            stop = {"s0": 8, "s1": 4}[unit.name]
            reports: list[Report] = [Batch(worker, unit.unit_id, 1, lines(unit, 0, stop))]
            if unit.name == "s1":
                executor.alive.discard("w1")
                executor.alive.add("w2")
                reports.append(Lost(worker))
            return reports
        return whole(worker, unit)

    class Calls(Scripted):
        def start(self, worker: str, units: tuple[WorkUnit, ...]) -> None:
            calls.append((worker, [(u.name, u.start_frame) for u in units]))
            super().start(worker, units)

    executor = Calls({"w1"}, act)
    written, _ = run(units(20, 12), executor, group=2)
    assert calls == [("w1", [("s0", 0), ("s1", 0)]), ("w2", [("s0", 8), ("s1", 4)])]
    assert written == {"s0": list(range(20)), "s1": list(range(12))}


def test_idle_workers_take_files_in_groups_that_leave_no_worker_idle() -> None:
    executor = Scripted({"w1", "w2"}, whole)
    written, report = run(units(4, 4, 4, 4, 4, 4, 4), executor, group=3)
    groups: dict[str, list[str]] = {}
    for worker, unit in executor.started:
        groups.setdefault(worker, []).append(unit.name)
    # 7 files, 2 idle workers, 3 at most to one: 3 + 3 at once; the 7th to whoever is idle.
    assert sorted(len(names) for names in groups.values()) in ([3, 4], [1, 3, 3])
    assert written == {f"s{i}": list(range(4)) for i in range(7)}
    assert report.attempts == 7
    few = Scripted({"w1", "w2", "w3"}, whole)
    run(units(4, 4), few, group=4)  # 2 files on 3 workers: one each, not both on one
    assert len({worker for worker, _ in few.started}) == 2


def test_a_group_failing_on_a_users_file_runs_its_units_alone_and_fails_only_that_file() -> None:
    def act(worker: str, unit: WorkUnit) -> list[Report]:
        if not unit.alone:  # the group's Pipeline cannot open s1: every unit of it fails
            return [Failed(worker, unit.unit_id, unit.attempt, "s1: not a video", retry=False)]
        if unit.name == "s1":
            return [Failed(worker, unit.unit_id, unit.attempt, "s1: not a video", retry=False)]
        return whole(worker, unit)

    executor = Scripted({"w1"}, act)
    written, report = run(units(5, 5, 5), executor, group=3)
    assert report.failed == {"s1": "s1: not a video"}
    assert written == {"s0": list(range(5)), "s2": list(range(5))}
    assert [u.alone for _, u in executor.started] == [False] * 3 + [True] * 3


def test_live_streams_are_spread_by_cost_and_a_lost_ones_gap_is_counted(
    clock: CoordinatorClock,
) -> None:
    """Four live streams on two workers: the 4K one alone, the three small ones together.
    The worker with the three dies; they restart on its replacement, numbered after the gap
    (estimated from each stream's rate and how long nobody read it) that counts as lost."""
    costs = {"a": 1.0, "big": 8.0, "b": 1.0, "c": 1.0}
    streams = [
        WorkUnit(i, n, f"rtsp://{n}", live=True, cost=c) for i, (n, c) in enumerate(costs.items())
    ]
    placed: dict[str, list[tuple[str, int]]] = {}
    big_worker: list[str] = []

    def act(worker: str, unit: WorkUnit) -> list[Report]:
        placed.setdefault(worker, []).append((unit.name, unit.attempt))
        if unit.attempt == 1:
            if unit.name == "big":
                big_worker.append(worker)
            # Frames 0-9 in 5 batches (the executor takes 20 ms over each report).
            reports: list[Report] = [
                Batch(worker, unit.unit_id, 1, lines(unit, f, f + 2)) for f in range(0, 10, 2)
            ]
            if unit.name == "c":  # the third of its group: then its worker dies
                reports.append(Lost(worker))
                executor.alive.discard(worker)
                executor.alive.add("w3")
            return reports
        clock.now += 0.1  # the replacement takes its time to open the stream again
        # A live retry numbers its frames from 0 again.
        reports = [
            Batch(worker, unit.unit_id, unit.attempt, lines(unit, 0, 5)),
            Done(worker, unit.unit_id, unit.attempt),
        ]
        if unit.name == "c":  # the big one ends too (the test's end)
            reports.append(Done(big_worker[0], 1, 1))
        return reports

    executor = Scripted({"w1", "w2"}, act, pause=0.02, clock=clock)
    got: dict[str, list[int]] = {}
    report = Coordinator(streams, executor, lambda n, f, _: got.setdefault(n, []).append(f)).run()
    first = [sorted(n for n, attempt in units if attempt == 1) for units in placed.values()]
    assert sorted(names for names in first if names) == [["a", "b", "c"], ["big"]]
    assert sorted(placed["w3"]) == [("a", 2), ("b", 2), ("c", 2)]  # restarted on the survivor
    for name in ("a", "b", "c"):
        lost = report.sources[name].lost
        # Its retry's frames came over 0.1 s after its last ones, which came at ~100 a second.
        assert lost >= 1, (name, report.sources[name])
        assert got[name] == [*range(10), *range(10 + lost, 15 + lost)]
    assert got["big"] == list(range(10))
    assert report.sources["big"].lost == 0


def test_a_lost_stream_with_no_idle_worker_is_taken_in_by_a_busy_worker_of_streams(
    clock: CoordinatorClock,
) -> None:
    """Two workers with a live stream each; w2 dies and no replacement comes. After
    `regroup_after` the coordinator tells w1 (all live streams: it never comes free) to end its
    group, then starts both streams on it in one group; each stream's frames go on after its
    gap, and the regroup is not a failed attempt. A worker running files is never told."""
    streams = [
        WorkUnit(0, "a", "rtsp://a", live=True, cost=2.0),
        WorkUnit(1, "b", "rtsp://b", live=True),
    ]

    def act(worker: str, unit: WorkUnit) -> list[Report]:
        if unit.attempt == 1:
            reports: list[Report] = [
                Batch(worker, unit.unit_id, 1, lines(unit, f, f + 2)) for f in range(0, 10, 2)
            ]
            if unit.name == "b":
                executor.alive.discard(worker)
                reports.append(Lost(worker))
            return reports
        # Both again, in one group on the survivor: frames from 0, then the test's end.
        return [
            Batch(worker, unit.unit_id, unit.attempt, lines(unit, 0, 5)),
            Done(worker, unit.unit_id, unit.attempt),
        ]

    class Regrouping(Scripted):
        def __init__(self) -> None:
            super().__init__({"w1", "w2"}, act, pause=0.02, clock=clock)
            self.stops: list[str] = []

        def stop(self, worker: str) -> bool:
            self.stops.append(worker)
            running = [u for w, u in self.started if w == worker and u.attempt == 1]
            self.pending.extend(Done(worker, u.unit_id, u.attempt) for u in running)
            return True

    executor = Regrouping()
    got: dict[str, list[int]] = {}
    report = Coordinator(
        streams,
        executor,
        lambda n, f, _: got.setdefault(n, []).append(f),
        max_attempts=2,
        regroup_after=0.1,
    ).run()
    assert [(w, u.name) for w, u in executor.started if u.attempt == 1] == [
        ("w1", "a"),
        ("w2", "b"),
    ]
    assert executor.stops == ["w1"]
    assert sorted((w, u.name, u.attempt) for w, u in executor.started if u.attempt > 1) == [
        ("w1", "a", 2), ("w1", "b", 2)
    ]  # fmt: skip
    assert report.failed == {}
    assert (report.regroups, report.reassignments) == (1, 1)  # b's loss; a's regroup is free
    assert (report.sources["a"].regrouped, report.sources["b"].regrouped) == (1, 0)
    for name in ("a", "b"):
        lost = report.sources[name].lost
        assert lost >= 1, (name, report.sources[name])
        assert got[name] == [*range(10), *range(10 + lost, 15 + lost)]

    # Files end on their own: a worker running them is not stopped for a waiting stream.
    files = Regrouping()
    files.alive = {"w1"}
    coordinator = Coordinator([WorkUnit(0, "f", "f.mp4", end_frame=40)], files, lambda *_: None)
    coordinator._assign()
    assert coordinator.running == {"w1": {0: WorkUnit(0, "f", "f.mp4", end_frame=40)}}
    coordinator.queue.append(WorkUnit(1, "cam", "rtsp://cam", live=True))
    coordinator._waiting[1] = clock.now - 60.0  # long overdue
    coordinator._regroup()
    assert files.stops == []


def test_a_cluster_run_writes_every_output_a_single_process_run_writes(
    tmp_path: Path, tiny_model: Path, tiny_depth: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With tracking, MOT, COCO, CSV and a depth model writing its MP4 and PNG maps, a cluster
    run over thread workers leaves the files `visionrt run` leaves, under the same names: the
    text files and the maps byte for byte (the driver writes MOT, COCO and CSV from the
    committed JSONL lines), the depth MP4s with every frame; no attempt's name is left."""
    import cv2
    from conftest import run_cli

    from visionrt.config import load_config
    from visionrt.distributed.run import run_on_cluster, worker_settings

    videos = [str(write_video(tmp_path / f"v{i}.mp4", frames=n)) for i, n in enumerate((9, 6))]
    sources = [f"a={videos[0]}", videos[1]]
    code, err = run_cli(
        ["run", *sources, "-m", str(tiny_model), "--no-plan", "-o", str(tmp_path / "plain"),
         "--no-video", "--track", "--mot", "--coco", "--csv", "--depth", str(tiny_depth),
         "--depth-size", "42", "--set", "depth.maps=png"],
        capsys,
    )  # fmt: skip
    assert code == 0, err
    cfg = load_config(
        values={
            "sources": sources,
            "model": str(tiny_model),
            "backend": "onnxruntime",
            "pipeline": {"track": True},
            "output": {"dir": str(tmp_path / "cluster"), "video": False, "mot": True,
                       "coco": True, "csv": True},
            "depth": {"model": str(tiny_depth), "short_side": 42, "maps": "png"},
        }
    )  # fmt: skip
    executor = ThreadExecutor(2, lambda group, send: run_group(group, worker_settings(cfg), send))
    summary, _ = run_on_cluster(cfg, executor)
    executor.close()
    assert summary.error == ""
    assert summary.frames_out == 15

    def files(folder: Path) -> dict[str, bytes]:
        return {
            str(p.relative_to(folder)): p.read_bytes()
            for p in sorted(folder.rglob("*"))
            # The JSONL interleaves its sources as they come (compared per source above).
            if p.is_file()
            and p.name not in ("summary.json", "detections.jsonl")
            and p.suffix != ".mp4"
        }

    plain, cluster = files(tmp_path / "plain"), files(tmp_path / "cluster")
    assert {"a.mot.txt", "v1.coco.json", "a.depth/000008.png"} <= plain.keys()
    assert cluster.keys() == plain.keys()
    for name in ("a.mot.txt", "v1.mot.txt", "a.coco.json", "v1.csv"):
        assert plain[name].count(b"\n") > 5, name  # detections, tracked, in every frame
    assert cluster == plain
    for name, frames in (("a", 9), ("v1", 6)):
        capture = cv2.VideoCapture(str(tmp_path / "cluster" / f"{name}.depth.mp4"))
        assert int(capture.get(cv2.CAP_PROP_FRAME_COUNT)) == frames
        capture.release()
    assert not list((tmp_path / "cluster").glob("*attempt*"))


def test_videos_the_driver_cannot_see_are_listed_in_a_manifest(tmp_path: Path) -> None:
    """The attempt that counted gets the run's name and the others' files go, where this
    machine sees them; a video on another node's disk is listed with its node."""
    from visionrt.distributed.outputs import MANIFEST, finalize_outputs

    here = tmp_path / "cam.attempt2.mp4"
    here.write_bytes(b"video")
    (tmp_path / "cam.attempt1.partial.mp4").write_bytes(b"half")  # the dead worker's
    (tmp_path / "cam.attempt1.mp4").write_bytes(b"late")  # an actor given up, done late
    (tmp_path / "cam2.attempt1.mp4").write_bytes(b"other")  # another source's: kept
    maps = tmp_path / "cam.attempt2.depth"  # depth maps: a folder, named like the files
    maps.mkdir()
    (maps / "000000.png").write_bytes(b"map")
    (tmp_path / "cam.attempt1.partial.depth").mkdir()  # the dead worker's maps
    (tmp_path / "cam.depth.attempt2.mp4").write_bytes(b"depth")
    (tmp_path / "cam.depth.attempt1.partial.mp4").write_bytes(b"half depth")
    finals = {
        "cam": [
            {
                "outputs": [str(here), str(tmp_path / "cam.depth.attempt2.mp4"), str(maps)],
                "worker": {"node": "n1"},
            }
        ],
        "far": [{"outputs": ["/elsewhere/far.attempt1.mp4"], "worker": {"node": "n2"}}],
    }
    written = finalize_outputs(tmp_path, finals)
    assert written == [
        str(tmp_path / name) for name in ("cam.mp4", "cam.depth.mp4", "cam.depth", MANIFEST)
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "cam.depth", "cam.depth.mp4", "cam.mp4", "cam2.attempt1.mp4", MANIFEST
    ]  # fmt: skip
    assert (tmp_path / "cam.depth" / "000000.png").read_bytes() == b"map"
    assert (tmp_path / "cam.mp4").read_bytes() == b"video"
    manifest = json.loads((tmp_path / MANIFEST).read_text())
    assert manifest == {"far": {"node": "n2", "files": ["/elsewhere/far.attempt1.mp4"]}}
    # A split file with a range's part on another node: the parts are listed, not joined
    # (the one here keeps its range's name).
    split = tmp_path / "split"
    split.mkdir()
    (split / "long.part1.attempt1.mp4").write_bytes(b"first range")
    parts = [
        {"outputs": [str(split / "long.part1.attempt1.mp4")], "worker": {"node": "n1"}, "part": 1},
        {"outputs": [str(split / "long.part2.attempt3.mp4")], "worker": {"node": "n2"}, "part": 2},
    ]
    written = finalize_outputs(split, {"long": parts})
    assert written == [str(split / "long.part1.mp4"), str(split / MANIFEST)]
    assert json.loads((split / MANIFEST).read_text()) == {
        "long": {
            "node": "n2",
            "files": [str(split / "long.part1.mp4"), str(split / "long.part2.attempt3.mp4")],
            "nodes": ["n1", "n2"],
        }
    }
    # A file of the user's own named like a part (a split archive's `rec.part2.mp4`), run
    # whole: its name is kept.
    (split / "rec.part2.attempt1.mp4").write_bytes(b"whole")
    finals = {"rec.part2": [{"outputs": [str(split / "rec.part2.attempt1.mp4")], "part": 0}]}
    assert finalize_outputs(split, finals) == [str(split / "rec.part2.mp4")]
    # A live stream's earlier attempt saw frames the last one did not: its file is kept.
    road = tmp_path / "live"
    road.mkdir()
    (road / "road.attempt1.partial.mp4").write_bytes(b"before the loss")
    (road / "road.attempt2.mp4").write_bytes(b"after")
    final = {"road": [{"outputs": [str(road / "road.attempt2.mp4")]}]}
    finalize_outputs(road, final, live=frozenset({"road"}))
    assert sorted(p.name for p in road.iterdir()) == ["road.attempt1.partial.mp4", "road.mp4"]


def test_a_node_without_the_drivers_model_files_gets_them_by_content(tmp_path: Path) -> None:
    """An OpenVINO model (.xml with its .bin) the driver names: where the node has the same
    bytes at that path they are read in place; where it has none (or others), the driver's
    bytes are fetched once and written together under the cache, and the settings name them."""
    from visionrt.distributed.files import bundle, localized, manifest

    ir = tmp_path / "driver" / "model.xml"
    ir.parent.mkdir()
    ir.write_text("<net/>")
    ir.with_suffix(".bin").write_bytes(b"weights")
    settings = {"model": str(ir), "backend": "openvino", "depth": {"model": ""}}
    files = manifest(settings)
    assert sorted(Path(p).name for p in files) == ["model.bin", "model.xml"]
    fetched: list[int] = []

    def fetch() -> dict[str, bytes]:
        fetched.append(1)
        return bundle(files)

    assert localized(settings, files, fetch, tmp_path / "cache") == settings
    assert fetched == []  # the same bytes here: nothing fetched
    shipped = bundle(files)
    ir.with_suffix(".bin").write_bytes(b"other weights")  # this node's file differs
    moved = localized(settings, files, lambda: shipped, tmp_path / "cache")
    placed = Path(moved["model"])
    assert placed != ir
    assert placed.read_text() == "<net/>"
    assert placed.with_suffix(".bin").read_bytes() == b"weights"  # beside its .xml
    assert moved["backend"] == "openvino"
    assert settings["model"] == str(ir)  # the driver's settings are not changed


def test_a_plan_tuned_on_a_node_is_kept_with_its_artifact_for_that_kind_of_machine(
    tmp_path: Path, tiny_model: Path
) -> None:
    """What `tune --ray` keeps of a node's plan: the plan under that machine's fingerprint in
    this machine's plan folder, its artifact's files together beside it, the plan naming them."""
    from visionrt.distributed.tune import keep
    from visionrt.paths import file_sha256
    from visionrt.plans import Plan, cached_plan, fingerprint_key, machine_fingerprint

    theirs = {**machine_fingerprint(), "cpu": "a node's CPU"}
    sha = file_sha256(tiny_model)
    node_plan = Plan(
        run={"model": "/node/cache/artifacts/x-openvino-int8/model.xml", "backend": "openvino"},
        tuned={"source_model": "/node/tiny.onnx", "source_sha256": sha, "fingerprint": theirs},
    )
    files = {"model.xml": b"<net/>", "model.bin": b"weights"}
    kept = keep(tiny_model, theirs, (node_plan.to_yaml(), files), tmp_path / "plans")
    plan = Plan.load(kept)
    artifact = Path(str(plan.run["model"]))
    assert artifact.parent.parent == tmp_path / "artifacts"
    assert artifact.parent.name == f"{fingerprint_key(theirs)}-x-openvino-int8"
    assert artifact.read_bytes() == b"<net/>"
    assert (artifact.parent / "model.bin").read_bytes() == b"weights"
    assert cached_plan(tiny_model, tmp_path / "plans", theirs) == (plan, kept)
    assert cached_plan(tiny_model, tmp_path / "plans") is None  # not this machine's


def test_the_progress_bar_counts_the_files_frames_and_shows_frames_per_node(
    tmp_path: Path,
) -> None:
    """The bar's total is the files' frames from their headers (`max_frames` each at most),
    none when a source is live; its text gives the frames per node, most first."""
    from visionrt.cli.cluster import by_node
    from visionrt.config import load_config
    from visionrt.distributed.report import ClusterReport
    from visionrt.distributed.run import frame_total

    videos = [str(write_video(tmp_path / f"v{i}.mp4", frames=n)) for i, n in enumerate((9, 6))]
    assert frame_total(load_config(values={"sources": videos})) == 15
    assert frame_total(load_config(values={"sources": videos, "source": {"max_frames": 7}})) == 13
    assert frame_total(load_config(values={"sources": [videos[0], "rtsp://cam/1"]})) is None
    assert (
        frame_total(load_config(values={"sources": videos, "source": {"realtime": True}})) is None
    )

    report = ClusterReport(
        frames_by_worker={"w1": 3, "w2": 5, "w3": 4},
        worker_info={"w1": {"node": "aaaaaaaaffff"}, "w2": {"node": "bbbbbbbbffff"},
                     "w3": {"node": "aaaaaaaaffff"}},
    )  # fmt: skip
    assert by_node(report) == "node aaaaaaaa 7, node bbbbbbbb 5"


def test_a_workers_next_group_takes_its_detector_still_loaded(
    tmp_path: Path, tiny_model: Path
) -> None:
    """A worker keeps its detector loaded between groups: the next group with the same model
    and inference options runs on the same loaded backend (not closed with the first group's
    Pipeline) and sends what a fresh load sends; other options load their own."""
    from visionrt.distributed.worker import KeptDetector, group_batches

    videos = [str(write_video(tmp_path / f"v{i}.mp4", frames=n)) for i, n in enumerate((8, 5))]
    settings = {
        "model": str(tiny_model),
        "backend": "onnxruntime",
        "output": {"dir": str(tmp_path / "out"), "video": False},
        "pipeline": {"warmup": 0},
    }
    kept, seen = KeptDetector(), []

    def frames(unit: WorkUnit, run: dict, keep: KeptDetector | None) -> list:
        batches = group_batches((unit,), run, on_pipeline=seen.append, kept=keep)
        return [frame for _, batch, _ in batches for frame in batch]

    assert len(frames(WorkUnit(0, "a", videos[0]), settings, kept)) == 8
    second = frames(WorkUnit(1, "b", videos[1]), settings, kept)
    assert seen[1].task.backend is seen[0].task.backend
    assert not seen[1].task.owns_backend
    assert second == frames(WorkUnit(1, "b", videos[1]), settings, None)  # a fresh load
    assert seen[2].task.backend is not seen[0].task.backend
    other = {**settings, "inference": {"threads": 1}}
    frames(WorkUnit(2, "c", videos[0]), other, kept)
    assert seen[3].task.backend is not seen[0].task.backend
    assert kept.backend is seen[3].task.backend
    kept.close()
    assert kept.backend is None


@pytest.mark.parametrize("frames", [0, 12])
def test_a_file_read_in_real_time_resumes_where_its_stream_has_got_to(
    frames: int, clock: CoordinatorClock
) -> None:
    """A camera's stand-in (a file with --realtime) on a lost worker: its retry starts at the
    frame the stream has reached since (not at the file's start, which would show its frames
    again), at its last frame at most, keeps the file's numbers, and what it passed over
    counts as lost."""
    cam = WorkUnit(0, "cam", "cam.mp4", live=True, paced=True, frames=frames)

    def act(worker: str, unit: WorkUnit) -> list[Report]:
        if unit.attempt == 1:
            reports: list[Report] = [
                Batch(worker, 0, 1, lines(unit, f, f + 2)) for f in range(0, 10, 2)
            ]
            executor.alive.discard(worker)
            executor.alive.add("w2")
            return [*reports, Lost(worker)]
        start = unit.start_frame
        return [Batch(worker, 0, unit.attempt, lines(unit, start, start + 5)), Done(worker, 0, 2)]

    executor = Scripted({"w1"}, act, pause=0.05, clock=clock)  # 2 frames a report: 40 a second
    written, report = run([cam], executor)
    retry = executor.started[-1][1]
    assert retry.attempt == 2
    # The stream ran on for at least one report's pause after frame 9.
    assert retry.start_frame > 10 if not frames else retry.start_frame == 11
    assert written["cam"] == [*range(10), *range(retry.start_frame, retry.start_frame + 5)]
    assert report.sources["cam"].lost == retry.start_frame - 10


def test_a_group_of_files_read_in_real_time_starts_each_at_its_own_frame(
    tmp_path: Path, tiny_model: Path
) -> None:
    """A regroup restarts several stand-ins in one Pipeline, each where its stream has got to:
    each source's frames from its unit's frame on (the pictures: test_sources)."""
    from visionrt.distributed.worker import group_batches

    videos = [write_video(tmp_path / f"v{i}.mp4", frames=16, fps=25) for i in range(2)]
    settings = tiny_run(tiny_model, source={"realtime": True})
    group = tuple(
        WorkUnit(i, f"v{i}", str(v), start_frame=s, attempt=2, live=True, paced=True)
        for i, (v, s) in enumerate(zip(videos, (5, 11), strict=True))
    )
    got: dict[int, list[dict]] = {}
    for unit_id, frames, _ in group_batches(group, settings):
        got.setdefault(unit_id, []).extend(json.loads(line) for _, line in frames)
    # Live: a loaded machine may drop a frame (the newer one kept), never deliver an earlier one.
    for unit_id, start in ((0, 5), (1, 11)):
        numbers = [r["frame"] for r in got[unit_id]]
        assert numbers == sorted(set(numbers)), numbers
        assert set(numbers) <= set(range(start, 16)), numbers
        assert numbers[0] < start + 3, numbers  # from its own frame, not the other's
        assert [r["timestamp"] for r in got[unit_id]] == [n / 25 for n in numbers]


def test_a_group_resumes_each_file_at_its_own_frame(tmp_path: Path, tiny_model: Path) -> None:
    """The worker's side: the frames before each unit's start are decoded only, not sent nor
    counted in (the run adds them back from `start_frame`)."""
    from visionrt.distributed.worker import group_batches

    videos = [write_video(tmp_path / f"v{i}.mp4", frames=n) for i, n in enumerate((20, 12))]
    settings = tiny_run(tiny_model, output={"video": False})
    group = tuple(
        WorkUnit(i, f"v{i}", str(v), start_frame=s, attempt=2)
        for i, (v, s) in enumerate(zip(videos, (8, 4), strict=True))
    )
    got: dict[int, list[int]] = {}
    summaries: dict[int, dict] = {}
    for unit_id, frames, _ in group_batches(group, settings, summaries=summaries):
        got.setdefault(unit_id, []).extend(index for index, _ in frames)
    assert got == {0: list(range(8, 20)), 1: list(range(4, 12))}
    counts = {u: (s["start_frame"], s["frames_in"], s["frames_out"]) for u, s in summaries.items()}
    assert counts == {0: (8, 12, 12), 1: (4, 8, 8)}


def test_a_workers_lines_are_the_runs_lines(tmp_path: Path, tiny_model: Path) -> None:
    """Issue #35: a result reaches the driver in one encoding. A worker's line carries the
    run's `source_id` (its source's place, not its group's nor its range unit's), and its
    frame number is the one it is sent under: the driver writes a file's line as it comes."""
    from visionrt.distributed.worker import group_batches

    videos = [write_video(tmp_path / f"v{i}.mp4", frames=6) for i in range(2)]
    settings = tiny_run(tiny_model, output={"video": False})
    # Range units of sources 3 and 1 of some run: unit ids of their own, in another order.
    group = (
        WorkUnit(7, "v0", str(videos[0]), 2, 6, first_frame=2, part=2, place=3),
        WorkUnit(4, "v1", str(videos[1]), place=1),
    )
    got: dict[int, list[tuple[int, dict]]] = {}
    for unit_id, frames, _ in group_batches(group, settings):
        got.setdefault(unit_id, []).extend((index, json.loads(line)) for index, line in frames)
    assert {r["source_id"] for _, r in got[7]} == {3}
    assert {r["source_id"] for _, r in got[4]} == {1}
    for lines in got.values():
        assert [index for index, _ in lines] == [r["frame"] for _, r in lines]
    assert [index for index, _ in got[7]] == [2, 3, 4, 5]


def test_a_live_streams_timestamps_go_on_after_a_retry() -> None:
    """A live retry opens its stream again, its clock from 0: the run's timestamps go on after
    the last one written, the gap's frames at the stream's rate so far."""
    from visionrt.distributed.run import LiveClock

    clock = LiveClock()
    assert [clock.place(f, f * 0.1) for f in range(10)] == [round(f * 0.1, 6) for f in range(10)]
    # The retry's frames are numbered after a gap of 5 (10-14); its own clock starts at 0.
    assert [clock.place(f, (f - 15) * 0.1) for f in range(15, 18)] == [1.5, 1.6, 1.7]


class Stopping(Scripted):
    """Workers that run each unit's first 8 frames, then wait; told to stop, a worker sends
    the frames it read since (8-9) and Done for each of its units, or is Lost (`lose`)."""

    def __init__(self, names: set[str], lose: frozenset[str] = frozenset()) -> None:
        super().__init__(names, self.first, pause=0.01)
        self.lose, self.stops = lose, []
        self.stop_run = RunStop()

    def first(self, worker: str, unit: WorkUnit) -> list[Report]:
        return [Batch(worker, unit.unit_id, unit.attempt, lines(unit, f, f + 4)) for f in (0, 4)]

    def reports(self, timeout: float) -> list[Report]:
        got = super().reports(timeout)
        if not got and not self.stop_run.asked.is_set():
            self.stop_run.ask()  # Ctrl-C once the first frames are in
        return got

    def stop(self, worker: str) -> bool:
        self.stops.append(worker)
        if worker in self.lose:
            self.alive.discard(worker)
            self.pending.append(Lost(worker))
            return True
        for w, unit in self.started:
            if w == worker:
                self.pending.append(Batch(w, unit.unit_id, unit.attempt, lines(unit, 8, 10)))
                self.pending.append(Done(w, unit.unit_id, unit.attempt, {"frames_in": 10}))
        return True


def test_a_stop_ends_the_running_groups_starts_nothing_more_and_retries_nothing() -> None:
    """Ctrl-C on the driver: the queue is dropped, each running worker is told to end its
    group, and what it read is committed; a live stream that ends so is not regrouped, and a
    worker lost while stopping is not replaced."""
    work = [
        WorkUnit(0, "f", "f.mp4", end_frame=100),
        WorkUnit(1, "cam", "rtsp://cam", live=True),
        WorkUnit(2, "g", "g.mp4", end_frame=100),
        WorkUnit(3, "queued", "q.mp4", end_frame=100),
    ]
    executor = Stopping({"w1", "w2", "w3"}, lose=frozenset({"w3"}))
    got: dict[str, list[int]] = {}
    coordinator = Coordinator(
        work,
        executor,
        lambda n, f, _: got.setdefault(n, []).append(f),
        stop=executor.stop_run,
        regroup_after=0.0,
    )
    report = coordinator.run()
    started = sorted((w, u.name, u.attempt) for w, u in executor.started)
    assert started == [("w1", "cam", 1), ("w2", "f", 1), ("w3", "g", 1)]  # stream placed first
    assert sorted(executor.stops) == ["w1", "w2", "w3"]
    assert got == {"cam": list(range(10)), "f": list(range(10)), "g": list(range(8))}
    assert report.failed == {}
    assert (report.reassignments, report.regroups, report.lost_workers) == (0, 0, 1)
    assert report.sources["f"].done_units == 1
    assert report.sources["queued"].attempts == 0
    assert coordinator.stop.started.is_set()


def test_a_second_stop_or_a_worker_that_does_not_stop_ends_the_run_with_what_was_committed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Asked twice (a second Ctrl-C) the run ends at once; asked once, a worker that never ends
    its group holds the run INTERRUPT_GRACE at most."""
    import visionrt.distributed.coordinator as coordinator_module

    class Deaf(Stopping):
        def stop(self, worker: str) -> bool:
            self.stops.append(worker)
            return True  # and never sends Done

    # Twice: a grace longer than the hang guard, which only a run that waits for it would reach.
    for twice, grace in ((True, 2 * HANG_SECONDS), (False, 0.3)):
        monkeypatch.setattr(coordinator_module, "INTERRUPT_GRACE", grace)
        executor = Deaf({"w1"})
        if twice:
            executor.stop_run.asked.set()  # the first Ctrl-C came; the second now
            executor.stop_run.ask()
            assert executor.stop_run.aborted.is_set()
        got: list[int] = []
        work = [WorkUnit(0, "f", "f.mp4", end_frame=100)]
        coordinator = Coordinator(work, executor, _frames_into(got), stop=executor.stop_run)
        report = finishes(coordinator.run, "the stopped run")
        assert got == ([] if twice else list(range(8)))
        assert report.failed == {}


def _frames_into(frames: list[int]) -> Callable[[str, int, str], None]:
    return lambda _name, frame, _line: frames.append(frame)


def test_a_model_missing_on_the_driver_fails_before_any_worker_starts(
    tmp_path: Path, tiny_model: Path
) -> None:
    """Workers get their model files from the driver: one missing there is the plain run's
    error (exit 4), said before Ray starts."""
    from visionrt.config import load_config
    from visionrt.distributed.files import check_models
    from visionrt.distributed.ray_run import run_on_ray
    from visionrt.errors import ModelLoadError

    missing = tmp_path / "missing.onnx"
    with pytest.raises(ModelLoadError, match=r"^model file not found: .*missing\.onnx"):
        check_models({"model": str(missing)})
    with pytest.raises(ModelLoadError, match=r"^depth\.model: model file not found"):
        check_models({"model": str(tiny_model), "depth": {"model": str(missing)}})
    check_models({"model": str(tiny_model), "depth": {"model": ""}})
    check_models({"model": str(missing), "backend": "null"})  # runs without a file
    values = {"sources": ["a.mp4"], "model": str(missing), "cluster": {"address": "local"}}
    with pytest.raises(ModelLoadError):
        run_on_ray(load_config(values=values))


def test_a_cluster_runs_summary_keeps_what_the_workers_pipelines_said(
    tmp_path: Path, tiny_model: Path
) -> None:
    """summary.json of a cluster run has what a plain run's has of each source (its latency,
    what it declared), the runtime, and the live audit's figures and events of every source,
    though each ran on its own worker."""
    from visionrt.config import load_config
    from visionrt.distributed.run import run_on_cluster, worker_settings

    videos = [str(write_video(tmp_path / f"v{i}.mp4", frames=12)) for i in range(2)]
    values = {
        "sources": [f"a={videos[0]}", f"b={videos[1]}"],
        "model": str(tiny_model),
        "backend": "onnxruntime",
        "output": {"dir": str(tmp_path / "cluster"), "video": False},
        "pipeline": {"warmup": 0, "audit": 0.5, "audit_reference": str(tiny_model)},
    }
    cfg = load_config(values=values)
    executor = ThreadExecutor(2, lambda group, send: run_group(group, worker_settings(cfg), send))
    summary, report = run_on_cluster(cfg, executor)
    executor.close()
    assert sorted(report.frames_by_worker) == ["thread-0", "thread-1"]  # one source each
    assert summary.accounted
    for row in summary.sources:
        assert row["declared"] == 12
        assert row["latency_ms"]["p50"] > 0
        assert row["frames_out"] == 12
    assert summary.backend["runtime"] == "onnxruntime"
    audited = summary.audit["sources"]
    assert sorted(audited) == ["a", "b"]
    assert all(audited[name]["audited"] >= 5 for name in ("a", "b"))
    assert summary.audit["budget"] == {"min_fidelity": 0.95}
    assert any("its own FP32 reference" in note for note in summary.notes)


def gated_zones_run(tmp_path: Path, model: Path) -> dict[str, Any]:
    """A run's settings over two videos (14 and 9 frames), tracked and motion-gated, with a zone
    on the first only: the whole of its 128×96 frames, where the tiny detector's box stands
    (its feet at (64, 58))."""
    videos = [str(write_video(tmp_path / f"v{i}.mp4", frames=n)) for i, n in enumerate((14, 9))]
    return {
        "sources": [f"a={videos[0]}", f"b={videos[1]}"],
        "model": str(model),
        "backend": "onnxruntime",
        "output": {"dir": str(tmp_path / "cluster"), "video": False},
        "pipeline": {"warmup": 0, "track": True, "motion": "skip", "motion_min_area": 0.5},
        "analytics": {"a": {"zones": {"all": [[0, 0], [128, 0], [128, 96], [0, 96]]}}},
    }


def on_two_threads(cfg: Any) -> tuple[Any, Any]:
    """`cfg` run over two thread workers: the summary and the report."""
    from visionrt.distributed.run import run_on_cluster, worker_settings

    executor = ThreadExecutor(2, lambda group, send: run_group(group, worker_settings(cfg), send))
    try:
        return run_on_cluster(cfg, executor)
    finally:
        executor.close()


def test_zones_of_one_source_leave_the_other_sources_worker_alone(
    tmp_path: Path, tiny_model: Path
) -> None:
    """Issue #32: with zones for one source, the other source's worker refused the run's
    analytics ("no source named 'a'"), exit 3, 0 frames. Each worker runs its own sources'
    zones; names of no source of the run are refused before any worker starts, as a plain run
    refuses them."""
    from visionrt.config import load_config
    from visionrt.distributed.run import run_on_cluster

    values = gated_zones_run(tmp_path, tiny_model)
    summary, report = on_two_threads(load_config(values=values))
    assert summary.error == ""
    assert sorted(report.frames_by_worker) == ["thread-0", "thread-1"]  # one source each
    assert [row["frames_out"] for row in summary.sources] == [14, 9]
    typo = load_config(values={**values, "analytics": {"c": values["analytics"]["a"]}})
    never = ThreadExecutor(2, lambda group, send: pytest.fail("a worker started"))
    with pytest.raises(ConfigError, match=r"analytics: no source named 'c' \(sources: a, b\)"):
        run_on_cluster(typo, never)
    never.close()


def test_a_cluster_runs_events_zones_and_motion_add_up_as_a_plain_runs(
    tmp_path: Path, tiny_model: Path
) -> None:
    """Issue #32: a cluster run's summary.json had empty `events`, `analytics` and `motion`
    where a plain run's had zone events and frames reused. Now they hold what a plain run's
    hold, each source's row its events."""
    from visionrt.config import load_config
    from visionrt.pipeline import pipeline_for

    cfg = load_config(values=gated_zones_run(tmp_path, tiny_model))
    summary, _ = on_two_threads(cfg)
    plain = pipeline_for(cfg)
    for _ in plain:
        pass
    plain.close()
    alone = plain.summary()
    assert alone.events["zone all: enter"] == 1
    assert alone.motion["reused"] > 0
    assert summary.events == alone.events
    assert summary.analytics == alone.analytics
    assert summary.motion == alone.motion
    assert [row["events"] for row in summary.sources] == [row["events"] for row in alone.sources]


def test_a_workers_note_of_a_zone_outside_its_frames_reaches_the_runs_summary(
    tmp_path: Path, tiny_model: Path
) -> None:
    """As a plain run notes it (the CLI prints the summary's notes the workers made)."""
    from visionrt.config import load_config

    values = gated_zones_run(tmp_path, tiny_model)
    values["analytics"] = {"b": {"lines": {"far": [[500, 0], [500, 90]]}}}
    summary, _ = on_two_threads(load_config(values=values))
    assert summary.notes == [
        "analytics.b.lines.far: wholly outside the 128x96 frames of 'b': it will count nothing"
    ]


def test_a_split_files_events_and_motion_are_its_ranges_added_up() -> None:
    from visionrt.distributed.report import ClusterReport, SourceState
    from visionrt.distributed.summary import cluster_summary

    settings = {"mode": "skip", "threshold": 25, "min_area": 0.002, "refresh": 2.0}

    def part(frames: int, skipped: int, pixels: int) -> dict[str, Any]:
        events = {"motion: skipped": skipped, "motion: detector pixels": pixels}
        return {"frames_out": frames, "row": {"events": events}, "input_hw": [10, 10],
                "motion": {**settings, "reused": skipped}}  # fmt: skip

    state = SourceState(unit_summaries={0: part(30, 10, 2000), 1: part(10, 5, 500)})
    report = ClusterReport(sources={"long": state})
    summary = cluster_summary(report, frozenset(), [])
    assert summary.events == {"motion: skipped": 15, "motion: detector pixels": 2500}
    assert summary.sources[0]["events"] == summary.events
    # 15 of 40 frames reused; 2500 of 40 × 100 detector pixels run.
    assert summary.motion == {
        **settings,
        "frames": 40,
        "reused": 15,
        "share": 0.375,
        "pixel_share": 0.625,
    }


def test_a_worker_sharing_its_node_leaves_its_runtimes_threads_unpinned(
    tmp_path: Path, tiny_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker given fewer CPUs than its node has tells the runtimes not to pin their threads
    (OpenVINO pins from the first core: every worker on one node would run on the same ones);
    one given the whole node leaves them as a plain run does."""
    import visionrt.distributed.worker as worker

    video = write_video(tmp_path / "v.mp4", frames=3)
    unit = WorkUnit(0, "v", str(video))
    built = worker.pipeline_for
    seen: list[Any] = []

    def pipeline_for(cfg: Any, *args: Any, **kwargs: Any) -> Pipeline:
        seen.append(cfg)
        return built(cfg, *args, **kwargs)

    monkeypatch.setattr(worker, "pipeline_for", pipeline_for)
    monkeypatch.setattr(worker.os, "cpu_count", lambda: 4)
    for cpus, pinned in ((1, False), (4, True)):
        batches = worker.group_batches((unit,), tiny_run(tiny_model), cpus)
        assert sum(len(frames) for _, frames, _ in batches) == 3
        options = seen[-1].inference
        assert (options.threads, options.pin_threads) == (cpus, pinned)
        assert seen[-1].depth.inference.pin_threads == pinned


def test_what_a_lost_attempt_dropped_before_its_worker_died_is_counted(
    clock: CoordinatorClock,
) -> None:
    """A live stream's attempt drops stale frames (3, 4, 7 and 8: numbers its batches skip),
    then its worker dies with the counts of why. Its retry goes on after the gap. Every frame
    number up to the last written is then written or counted: the skipped ones as dropped by
    the lost attempt, the gap as lost."""
    from visionrt.distributed.report import UNREPORTED
    from visionrt.distributed.summary import WORKER_LOST, cluster_summary

    stream = WorkUnit(0, "cam", "rtsp://cam", live=True)

    def act(worker: str, unit: WorkUnit) -> list[Report]:
        if unit.attempt == 1:
            sent = [(0, 3), (5, 7), (9, 10)]
            reports: list[Report] = [Batch(worker, 0, 1, lines(unit, a, b)) for a, b in sent]
            executor.alive.discard(worker)
            executor.alive.add("w2")
            return [*reports, Lost(worker)]
        clock.now += 0.1  # the replacement takes its time to open the stream again
        return [
            Batch(worker, 0, unit.attempt, lines(unit, 0, 5)),
            Done(worker, 0, unit.attempt, {"dropped": {"older than 0.5s": 1}}),
        ]

    executor = Scripted({"w1"}, act, pause=0.02, clock=clock)
    got: list[int] = []
    report = Coordinator([stream], executor, lambda _n, f, _l: got.append(f)).run()
    state = report.sources["cam"]
    assert state.dropped_before == {UNREPORTED: 4}
    assert got[:6] == [0, 1, 2, 5, 6, 9]
    row = cluster_summary(report, frozenset({"cam"}), []).sources[0]
    assert row["dropped"][UNREPORTED] == 4
    assert row["dropped"][WORKER_LOST] == state.lost
    # Every number up to the last written is accounted for (the retry's own drop came after).
    assert got[-1] + 1 == len(got) + 4 + state.lost
    assert row["frames_in"] == len(got) + sum(row["dropped"].values())
