"""Work units on worker processes of this machine, without Ray (`--ray processes`): each worker a
spawned process running one Pipeline per group (`actor.UnitRunner`, as a Ray actor does), its
reports sent back through a pipe. One process's pipeline is bound by its GIL long before a GPU,
or two cores, are busy; several pipelines are not.

- Start method: spawn (the driver has threads). A worker imports visionrt and its runtimes,
  says "ready" with what it is (pid, fingerprint), then runs the groups it is sent; a thread
  of its own reads the driver's commands, so that a stop reaches a running group.
- Back-pressure: a worker's reports go through a pipe, whose buffer bounds how far it runs
  ahead of the driver; the driver drains every pipe that has something at each `reports`.
- A worker that dies (killed, out of memory) is seen at once (its process sentinel), reported
  `Lost` (the coordinator runs its units again) and replaced, `replacements` times in all.
- Ctrl-C goes to the whole process group: workers ignore SIGINT, the driver decides (a stop
  is a "stop" command, then "exit"); a worker whose driver is gone (its pipe closed) exits."""

from __future__ import annotations

import contextlib
import multiprocessing
import queue
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Any

from visionrt.config import load_config
from visionrt.distributed.actor import UnitRunner, group_key
from visionrt.distributed.units import Done, Failed, Group, Lost, Report
from visionrt.errors import ConfigError
from visionrt.sources.registry import usable_cores
from visionrt.spawning import ignore_interrupts, start_shielded

START_SECONDS = 120.0  # a worker's interpreter start and imports (torch: tens of seconds)
EXIT_SECONDS = 5.0  # a worker's own exit, after "exit", before it is killed

Message = tuple[Any, ...]


def work(name: str, cpus: float, commands: Connection, replies: Connection) -> None:
    """A worker process: say "ready" with `UnitRunner.describe()`, then run each group sent
    ("group", units, settings) and send its reports, until "exit" or the driver is gone."""
    ignore_interrupts()  # Ctrl-C goes to the process group: the driver decides
    runner = UnitRunner(name, cpus, node="local")
    groups: queue.Queue[Message] = queue.Queue()  # groups to run, then "exit"

    def read() -> None:
        while True:
            try:
                message: Message = commands.recv()
            except (EOFError, OSError):
                message = ("exit",)  # the driver is gone
            if message[0] == "stop":
                runner.stop(message[1])
                continue
            groups.put(message)
            if message[0] == "exit":
                if runner.pipeline is not None:  # a running group ends with its frames
                    runner.pipeline.stop()
                return

    threading.Thread(target=read, name="commands", daemon=True).start()
    try:
        replies.send(("ready", runner.describe()))
        while (message := groups.get())[0] != "exit":
            _, units, settings = message
            for report in runner.run_group(units, settings, {}, ""):
                replies.send(("report", report))
    except (BrokenPipeError, ConnectionResetError, EOFError):
        return  # the driver is gone


@dataclass
class _Worker:
    """A worker process as the driver tracks it."""

    process: Any
    commands: Connection
    replies: Connection
    info: dict[str, Any] = field(default_factory=dict)  # empty until it said "ready"
    settings: Mapping[str, Any] = field(default_factory=dict)
    units: dict[int, int] = field(default_factory=dict)  # unit id → attempt, not yet ended
    key: tuple[tuple[int, int], ...] = ()
    child_ends: list[Connection] = field(default_factory=list)  # until the child has started


class ProcessExecutor:
    """`workers` worker processes of this machine (0: its usable cores ÷ `worker_cpus`, at
    least 1), each sized to `worker_cpus` threads; `run` is the Pipeline's configuration as in
    RayExecutor (`settings_for(worker, info)` may pick another per worker: plan groups). A dead
    worker is replaced `replacements` times in all (None: `workers` times). Waits up to
    `startup_timeout` seconds for the first worker, then raises ConfigError."""

    def __init__(
        self,
        workers: int,
        worker_cpus: float = 2.0,
        run: Mapping[str, Any] | None = None,
        *,
        replacements: int | None = None,
        startup_timeout: float = START_SECONDS,
        settings_for: Callable[[str, Mapping[str, Any]], Mapping[str, Any]] | None = None,
    ) -> None:
        if workers < 0:
            raise ConfigError(f"cluster.workers: expected >= 0 (0: auto), got {workers}")
        self.run = dict(run or {})
        load_config(values=self.run)  # a bad option fails here, before any process starts
        if workers == 0:
            workers = max(1, int(usable_cores() // max(worker_cpus, 1.0)))
        self.settings_for = settings_for
        self._cpus = worker_cpus
        self._context = multiprocessing.get_context("spawn")
        self._workers: dict[str, _Worker] = {}
        self._count = 0
        self._replacements = workers if replacements is None else replacements
        self._lost: list[Report] = []
        self._starting: list[threading.Thread] = []
        try:
            for _ in range(workers):
                self._spawn()
            # Every worker, started together on one machine, is waited for: a group given to
            # the first one up would otherwise hold the sources a second one was meant for.
            deadline = time.monotonic() + startup_timeout
            while len(self.workers()) < len(self._workers) and time.monotonic() < deadline:
                self._lost.extend(self._settle(min(1.0, deadline - time.monotonic())))
            if not self.workers():
                raise ConfigError(
                    f"no worker process started within {startup_timeout:g} s"
                    f" ({len(self._lost)} died starting)"
                )
        except BaseException:  # a signal too: what was started ends with this run
            self.close()
            raise

    # -- the executor protocol ----------------------------------------------------------------
    def workers(self) -> set[str]:
        """Names of the workers alive and ready now."""
        return {name for name, w in self._workers.items() if w.info}

    def info(self, worker: str) -> dict[str, Any]:
        return dict(self._workers[worker].info)

    def start(self, worker: str, units: Group) -> None:
        state = self._workers[worker]
        if not state.info or state.units:
            raise RuntimeError(f"worker {worker} is not idle: cannot start {len(units)} unit(s)")
        state.units = {unit.unit_id: unit.attempt for unit in units}
        state.key = group_key(state.units)
        self._send(worker, ("group", units, state.settings))

    def reports(self, timeout: float) -> list[Report]:
        """What happened since the last call, waiting up to `timeout` seconds for the first."""
        out, self._lost = self._lost, []
        out.extend(self._settle(0.0 if out else timeout))
        return out

    def stop(self, worker: str) -> bool:
        """Ask `worker` to end its group (reading stops, what was read is finished, each unit
        reports Done); False when it runs none."""
        state = self._workers.get(worker)
        if state is None or not state.units:
            return False
        self._send(worker, ("stop", state.key))  # that group only, not a later one
        return True

    def close(self) -> None:
        """End every worker: "exit" (a running group stops), then a kill after EXIT_SECONDS."""
        for starting in self._starting:  # a start a signal interrupted the wait for
            starting.join()
        workers, self._workers = list(self._workers.values()), {}
        for state in workers:
            with contextlib.suppress(OSError, ValueError):
                state.commands.send(("exit",))
        deadline = time.monotonic() + EXIT_SECONDS
        for state in workers:
            if state.process.pid is not None:
                state.process.join(max(0.0, deadline - time.monotonic()))
                if state.process.is_alive():
                    state.process.kill()
                    state.process.join()
            for end in (state.commands, state.replies, *state.child_ends):
                end.close()

    # -- internals ------------------------------------------------------------------------
    def _spawn(self) -> None:
        self._count += 1
        name = f"p{self._count}"
        their_commands, commands = self._context.Pipe(duplex=False)
        replies, their_replies = self._context.Pipe(duplex=False)
        process = self._context.Process(
            target=work, args=(name, self._cpus, their_commands, their_replies),
            name=f"visionrt-{name}", daemon=True,
        )  # fmt: skip
        state = _Worker(process, commands, replies, child_ends=[their_commands, their_replies])
        self._workers[name] = state
        # A signal's exception cannot cut the start short (visionrt.spawning); close() waits for
        # a start whose wait it interrupted, then ends the child.
        starting = start_shielded(process)
        self._starting.append(starting)
        starting.join()
        self._starting.remove(starting)
        for end in state.child_ends:  # only the child holds them now
            end.close()
        state.child_ends = []

    def _send(self, worker: str, message: Message) -> None:
        # A worker that died is reported by _settle.
        with contextlib.suppress(OSError, ValueError):
            self._workers[worker].commands.send(message)

    def _settle(self, timeout: float) -> list[Report]:
        """Wait up to `timeout` for any worker's message or death; take every message there."""
        by_handle: dict[Any, str] = {}
        for name, state in self._workers.items():
            by_handle[state.replies] = name
            by_handle[state.process.sentinel] = name
        if not by_handle:
            return []
        out: list[Report] = []
        for handle in wait(list(by_handle), timeout):
            name = by_handle[handle]
            if name not in self._workers:
                continue  # forgotten above (its pipe and its sentinel both woke)
            out.extend(self._drain(name))
        return out

    def _drain(self, name: str) -> list[Report]:
        state = self._workers[name]
        out: list[Report] = []
        try:
            while state.replies.poll():
                kind, body = state.replies.recv()
                if kind == "ready":
                    state.info = body
                    state.settings = (
                        self.settings_for(name, body) if self.settings_for else self.run
                    )
                    continue
                out.append(body)
                if isinstance(body, Done | Failed):
                    state.units.pop(body.unit_id, None)
        except (EOFError, OSError):
            pass
        if not state.process.is_alive():
            state.process.join(0.1)
            out.append(self._forget(name))
        return out

    def _forget(self, name: str) -> Report:
        """`name` died: its units go back to the coordinator, a new worker takes its place."""
        state = self._workers.pop(name)
        state.commands.close()
        state.replies.close()
        if state.info and self._replacements > 0:
            self._replacements -= 1
            self._spawn()
        return Lost(name)
