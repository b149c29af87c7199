"""A run's files shared by a few reader threads (pipeline/readers): every frame of every file
arrives once and in order, a file is never read by two threads at once, live sources and a
service's keep a thread each, and a file's failure still fails the run."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import HANG_SECONDS, until

from visionrt import BackendOptions, Pipeline, PipelineOptions
from visionrt.errors import ConfigError, SourceError
from visionrt.pipeline import readers as readers_module
from visionrt.pipeline.flow import Flow, Item
from visionrt.pipeline.inbox import Inboxes
from visionrt.pipeline.readers import Readers
from visionrt.sources import Source
from visionrt.telemetry import Telemetry
from visionrt.types import Frame


class Counted(Source):
    """`count` tiny frames; raises SourceError at frame `fail_at` (-1: never). Each step holds
    the file's own lock, so a second thread reading it at the same moment is caught. `gate`: a
    file given one as `waits` waits for it before its first frame; one given it as `opens`
    sets it as it makes a frame."""

    def __init__(
        self,
        source_id: int,
        count: int,
        live: bool = False,
        fail_at: int = -1,
        gate: threading.Event | None = None,
        waits: bool = False,
    ):
        super().__init__()
        self.gate, self.waits = gate, waits
        self.name, self.source_id, self.live = f"file{source_id}", source_id, live
        self.count, self.fail_at = count, fail_at
        self.busy = threading.Lock()
        self.overlaps = 0
        self.threads: set[str] = set()

    def frames(self) -> Iterator[Frame]:
        import numpy as np

        for index in range(self.count):
            if self.gate is not None and self.waits and index == 0:
                self.gate.wait(HANG_SECONDS)
            if not self.busy.acquire(blocking=False):
                self.overlaps += 1
                self.busy.acquire()
            try:
                self.threads.add(threading.current_thread().name)
                if index == self.fail_at:
                    raise SourceError(f"{self.name}: broken at frame {index}")
                pixels = np.zeros((2, 2, 3), np.uint8)
                frame = Frame(self.source_id, index, pixels, index / 30, 0.0, self.name)
            finally:
                self.busy.release()
            if self.gate is not None and not self.waits:
                self.gate.set()
            yield frame


def _readers(
    sources: list[Source], shared: int, service: bool = False, i420: bool = False
) -> tuple[Readers, Inboxes[Item], list[BaseException]]:
    flow = Flow()
    errors: list[BaseException] = []

    def guard(stage: Callable[..., None], *args: Any) -> None:
        try:
            stage(*args)
        except BaseException as err:
            errors.append(err)
            flow.aborting.set()

    decoded: Inboxes[Item] = Inboxes(2, flow.aborting)
    names = [s.name for s in sources]
    readers = Readers(
        sources, names, [False] * len(sources), decoded, Telemetry(), flow, guard, service,
        i420=i420, shared=shared,
    )  # fmt: skip
    return readers, decoded, errors


def _consume(decoded: Inboxes[Item]) -> dict[int, list[int]]:
    """Every frame until the inbox closes, by source, in the order taken."""
    seen: dict[int, list[int]] = {}
    while taken := decoded.take(3):
        for item in taken:
            seen.setdefault(item.frame.source_id, []).append(item.frame.index)
    return seen


def test_files_share_the_threads_and_every_frame_arrives_once_in_order() -> None:
    counts = [1, 17, 40, 3, 25, 9]  # longer and shorter than a burst, inboxes of 2
    # The first file waits until another file made a frame: the thread that took it is held,
    # so the other thread reads (without the gate, one thread read every turn in half the runs
    # on a busy machine: which thread reads which turn is the scheduler's).
    gate = threading.Event()
    files: list[Source] = [Counted(i, n, gate=gate, waits=i == 0) for i, n in enumerate(counts)]
    readers, decoded, errors = _readers(files, shared=2)
    readers.start()
    seen = _consume(decoded)  # returns once the last file ended: the inbox closed
    assert errors == []
    assert seen == {i: list(range(n)) for i, n in enumerate(counts)}
    assert [t.name for t in readers.threads] == ["files-0", "files-1"]
    assert all(s.overlaps == 0 for s in files)  # type: ignore[attr-defined]
    assert set().union(*(s.threads for s in files)) == {"files-0", "files-1"}  # type: ignore[attr-defined]


def test_a_file_whose_frames_wait_does_not_hold_up_the_reader_s_other_files() -> None:
    """One reader, three files; the stage after it takes no frame of file 0 (its camera's
    depth is busy) until the others are through. The reader reads them on; before, it waited
    on file 0's full inbox and the other files waited with it."""
    counts = [10, 12, 9]
    files: list[Source] = [Counted(i, n) for i, n in enumerate(counts)]
    readers, decoded, errors = _readers(files, shared=1)
    readers.start()
    seen: dict[int, list[int]] = {}
    held = {0}

    def ready(source: int) -> bool:
        return source not in held

    def take() -> bool:  # never waits: a reader stuck on file 0 fails the test, not hangs it
        if any(decoded._boxes.get(source) for source in (1, 2)):
            for item in decoded.take(1, ready=ready):
                seen.setdefault(item.frame.source_id, []).append(item.frame.index)
        return len(seen.get(1, [])) == counts[1] and len(seen.get(2, [])) == counts[2]

    until(take, "the other files' frames all taken while file 0's wait", 60)
    assert 0 not in seen
    held.clear()
    for source, frames in _consume(decoded).items():
        seen.setdefault(source, []).extend(frames)
    assert errors == []
    assert seen == {i: list(range(n)) for i, n in enumerate(counts)}
    assert [t.name for t in readers.threads] == ["files-0"]


def test_a_thread_each_where_there_are_as_many_as_files(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(readers_module, "usable_cores", lambda: 16)
    files: list[Source] = [Counted(i, 5) for i in range(3)]
    readers, decoded, _ = _readers(files, shared=0)  # 0: one per core, never above the files
    readers.start()
    assert _consume(decoded) == {i: list(range(5)) for i in range(3)}
    assert [t.name for t in readers.threads] == ["source-0", "source-1", "source-2"]


def test_frames_for_a_device_get_half_the_readers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the device prepares the frames, the host's work mostly holds the GIL: one reader
    per core contended (docs/benchmarks.md), so the default is half of them."""
    monkeypatch.setattr(readers_module, "usable_cores", lambda: 4)
    for i420, expected in ((False, 4), (True, 2)):
        files: list[Source] = [Counted(i, 5) for i in range(6)]
        readers, decoded, _ = _readers(files, shared=0, i420=i420)
        readers.start()
        assert _consume(decoded) == {i: list(range(5)) for i in range(6)}
        assert [t.name for t in readers.threads] == [f"files-{k}" for k in range(expected)]


def test_live_sources_and_a_services_keep_their_own_threads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(readers_module, "usable_cores", lambda: 1)
    mixed: list[Source] = [Counted(0, 4), Counted(1, 4, live=True), Counted(2, 4), Counted(3, 4)]
    readers, decoded, _ = _readers(mixed, shared=0)
    readers.start()
    seen = _consume(decoded)
    assert sorted(seen) == [0, 1, 2, 3]
    assert [t.name for t in readers.threads] == ["source-1", "files-0"]

    service: list[Source] = [Counted(i, 4) for i in range(3)]
    readers, decoded, _ = _readers(service, shared=1, service=True)
    readers.start()
    readers.release()
    assert sorted(_consume(decoded)) == [0, 1, 2]
    assert [t.name for t in readers.threads] == ["source-0", "source-1", "source-2"]


def test_a_shared_files_failure_fails_the_run() -> None:
    files: list[Source] = [Counted(0, 30), Counted(1, 30, fail_at=12), Counted(2, 30)]
    readers, decoded, errors = _readers(files, shared=2)
    readers.start()
    _consume(decoded)  # ends: the failure aborts, and the others' readers stop putting
    for thread in readers.threads:
        thread.join(30)
    assert [str(e) for e in errors] == ["file1: broken at frame 12"]


def test_a_run_of_many_files_on_two_reader_threads_counts_every_frame(tiny_model: Path) -> None:
    counts = (7, 30, 12, 1, 22)
    options = PipelineOptions(warmup=0, reader_threads=2)
    specs = [f"synthetic:32x24:{n}" for n in counts]
    pipeline = Pipeline(specs, tiny_model, "null", BackendOptions(batch=3), options=options)
    seen: dict[int, list[int]] = {}
    for result in pipeline:
        seen.setdefault(result.frame.source_id, []).append(result.frame.index)
    pipeline.close()
    assert seen == {i: list(range(n)) for i, n in enumerate(counts)}
    assert [row["frames"] for row in pipeline.summary().sources] == list(counts)


def test_reader_threads_below_zero_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"pipeline\.reader_threads"):
        PipelineOptions(reader_threads=-1)
