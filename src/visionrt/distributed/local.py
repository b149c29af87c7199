"""Workers as threads of this process: the executor the coordinator's tests use, and a way to
run the distributed path on one machine without Ray."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

from visionrt.distributed.units import Batch, Done, Failed, Group, Report
from visionrt.distributed.worker import USER_ERROR, USER_ERRORS, Frames, Send
from visionrt.fuse import Checkpoint

# run(units, send) runs a group, calling send(unit id, frames, checkpoint) with (frame index,
# JSONL line) batches, each unit's in frame order; returns each unit's summary by unit id.
RunGroup = Callable[[Group, Send], dict[int, Any]]


class ThreadExecutor:
    """`count` workers named `thread-N`, each running one unit at a time with `run`."""

    def __init__(self, count: int, run: RunGroup) -> None:
        self.run = run
        self._names = {f"thread-{i}" for i in range(count)}
        self._reports: queue.Queue[Report] = queue.Queue()
        self._threads: list[threading.Thread] = []

    def workers(self) -> set[str]:
        return set(self._names)

    def info(self, worker: str) -> dict[str, Any]:
        return {"worker": worker, "node": "local"}

    def start(self, worker: str, units: Group) -> None:
        thread = threading.Thread(target=self._work, args=(worker, units), daemon=True)
        self._threads.append(thread)
        thread.start()

    def _work(self, worker: str, units: Group) -> None:
        attempts = {unit.unit_id: unit.attempt for unit in units}

        def send(unit_id: int, frames: Frames, checkpoint: Checkpoint | None) -> None:
            self._reports.put(Batch(worker, unit_id, attempts[unit_id], frames, checkpoint))

        try:
            summaries = self.run(units, send)
        except USER_ERRORS as err:
            for unit in units:
                self._reports.put(Failed(worker, unit.unit_id, unit.attempt, str(err), False))
        except Exception as err:
            error = f"{type(err).__name__}: {err}"
            for unit in units:
                self._reports.put(Failed(worker, unit.unit_id, unit.attempt, error))
        else:
            for unit in units:
                summary = summaries.get(unit.unit_id, {})
                if USER_ERROR in summary:  # its source alone could not be opened
                    error = summary[USER_ERROR]
                    failed = Failed(worker, unit.unit_id, unit.attempt, error, False, own=True)
                    self._reports.put(failed)
                else:
                    self._reports.put(Done(worker, unit.unit_id, unit.attempt, summary))

    def stop(self, worker: str) -> bool:
        """Threads run a group to its end: no regrouping here."""
        return False

    def reports(self, timeout: float) -> list[Report]:
        try:
            got = [self._reports.get(timeout=timeout)]
        except queue.Empty:
            return []
        while True:
            try:
                got.append(self._reports.get_nowait())
            except queue.Empty:
                return got

    def close(self) -> None:
        for thread in self._threads:
            thread.join(5.0)
