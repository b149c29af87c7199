"""The sink stage: results written into the sinks on a thread of their own, behind a bounded queue
(`fused` in telemetry and `profile`), so a slow encoder shows as a full queue and a busy sink
thread instead of silently capping the consumer that joins and fuses frames."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from visionrt.errors import SinkError
from visionrt.pipeline.flow import END, POLL
from visionrt.sinks import Sink
from visionrt.telemetry import Telemetry
from visionrt.types import FrameResult


class OutputStage:
    """A run's sink stage from start to end: each result written into every sink, in the order
    given, on the sink thread (then `on_result`), and every sink finalized however the run ended
    (`outputs`: the files written). A sink that raises (or `on_result`) is reported to
    `on_error` (the first one stops the run) and given no more results; only such a sink keeps
    its `.partial` name, and the others still get every result that reached the stage. Results
    already queued when the run aborts are still written: they were delivered."""

    def __init__(
        self,
        sinks: Sequence[Sink],
        on_result: Callable[[FrameResult], Any] | None,
        telemetry: Telemetry,
        on_error: Callable[[BaseException], None],
        size: int,
    ) -> None:
        self.sinks, self.on_result = list(sinks), on_result
        self.telemetry, self._on_error = telemetry, on_error
        self.queue: queue.Queue[Any] = queue.Queue(maxsize=size)
        self.failed: list[Sink] = []  # the sinks that raised: each keeps its `.partial` name
        self.outputs: list[str] = []
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._write, name="sink", daemon=True)
        telemetry.register_gauge("fused", self.queue.qsize)

    def start(self) -> None:
        self._thread.start()

    def put(self, result: FrameResult) -> bool:
        """Queue `result` for the sinks; False once one failed (the run is then aborting)."""
        while not self._stopped.is_set():
            try:
                self.queue.put(result, timeout=POLL)
                return True
            except queue.Full:
                continue
        return False

    def finish(self, complete: bool = True) -> SinkError | None:
        """Write what is queued, then finalize every sink (none where not `complete`: a run
        cut short whose files must not look whole); the first error finalizing one."""
        while self._thread.is_alive():
            try:
                self.queue.put(END, timeout=POLL)
                break
            except queue.Full:
                continue
        if self._thread.ident is not None:
            self._thread.join()
        outputs, error = close_sinks(self.sinks, self.failed, complete)
        self.outputs = [str(path) for path in outputs]
        return error

    def drain(self, results: Iterator[FrameResult], errors: list[BaseException]) -> None:
        """Write every result of `results` (the run's), then finalize the sinks. An error that
        ends the results is added to `errors` and raised; one finalizing a sink is too, where
        nothing failed before it."""
        writing = bool(self.sinks) or self.on_result is not None  # else no thread, no queue
        if writing:
            self.start()
        try:
            for result in results:
                if not writing:
                    continue
                # False once a sink failed: the run is then aborting, and `results` raises the
                # sink's error as it ends (a `break` here would close it and lose that).
                self.put(result)
        except BaseException as err:
            errors.append(err)
            raise
        finally:
            close_error = self.finish()
            if close_error is not None and not errors:
                errors.append(close_error)
                raise close_error

    def _write(self) -> None:
        writing = list(self.sinks)
        try:
            while (result := self.queue.get()) is not END:
                started = time.perf_counter()
                for sink in list(writing):
                    try:
                        sink.write(result)
                    except Exception as err:
                        # The run stops on it, but what the other sinks were given (the JSONL
                        # beside a video that cannot be encoded) is still written: results
                        # computed are never lost with the sink that failed.
                        writing.remove(sink)
                        self._sink_failed(sink, err)
                self.telemetry.record("sink", time.perf_counter() - started)
                if self.on_result is not None and not self.failed:
                    self.on_result(result)
        except BaseException as err:
            self._stopped.set()
            self._on_error(err)
        finally:
            self._stopped.set()

    def _sink_failed(self, sink: Sink, err: Exception) -> None:
        """A sink that failed keeps its `.partial` name; the first stops the run with its error,
        in one line (a full disk, a vanished folder: not a trace)."""
        self.failed.append(sink)
        if len(self.failed) == 1:
            if not isinstance(err, SinkError):
                err = SinkError(f"writing {type(sink).__name__} output failed: {err}")
            self._on_error(err)


def close_sinks(
    sinks: Sequence[Sink], failed: Sequence[Sink] = (), complete: bool = True
) -> tuple[list[Path], SinkError | None]:
    """Finalize every sink (those in `failed`, which raised while writing, keep their
    `.partial` name; every one does where not `complete`): the files written, and the first
    error closing one raised (the others are still finalized). A run's, a service's and a
    cluster's driver's."""
    outputs: list[Path] = []
    error: SinkError | None = None
    for sink in sinks:
        try:
            outputs.extend(sink.close(complete=complete and sink not in failed))
        except Exception as err:
            error = error or _as_sink_error(sink, err)
    return outputs, error


def _as_sink_error(sink: Sink, err: Exception) -> SinkError:
    if isinstance(err, SinkError):
        return err
    return SinkError(f"finalizing {type(sink).__name__} output failed: {err}")
