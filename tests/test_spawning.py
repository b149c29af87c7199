"""A worker's start (visionrt.spawning): the child holds Ctrl-C off from its first instruction
until it ignores it, from whatever thread it was started, and a Ctrl-C that comes while a worker
starts is still the parent's."""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
from multiprocessing.connection import Connection

import pytest
from conftest import HANG_SECONDS, sigint_state

from visionrt import spawning
from visionrt.spawning import ignore_interrupts, start_shielded


def _report(replies: Connection) -> None:
    """A worker: its SIGINT state as it starts, then after `ignore_interrupts`."""
    first = sigint_state()
    ignore_interrupts()
    replies.send((first, sigint_state()))


def _start_and_read(start_from_main: bool) -> tuple[tuple[bool, bool], tuple[bool, bool]]:
    context = multiprocessing.get_context("spawn")
    ours, theirs = context.Pipe(duplex=False)
    process = context.Process(target=_report, args=(theirs,), daemon=True)
    if start_from_main:
        start_shielded(process).join()
    else:  # a service adds a camera from its HTTP API's thread
        starter = threading.Thread(target=lambda: start_shielded(process).join())
        starter.start()
        starter.join()
    theirs.close()
    try:
        return ours.recv()
    finally:
        process.join()


@pytest.mark.parametrize("start_from_main", [True, False], ids=["main thread", "other thread"])
def test_a_worker_holds_ctrl_c_off_until_it_ignores_it(start_from_main: bool) -> None:
    first, after = _start_and_read(start_from_main)
    blocked, ignored = first
    assert blocked or ignored, "a Ctrl-C at the worker's first instruction would reach it"
    assert after == (False, True), "after ignore_interrupts: ignored, and no longer blocked"


class _InterruptedStart:
    """A process whose start is where a Ctrl-C lands: it signals the whole process (as the
    terminal's Ctrl-C does) from inside `start()`."""

    name = "interrupted"

    def __init__(self) -> None:
        self.started = threading.Event()

    def start(self) -> None:
        os.kill(os.getpid(), signal.SIGINT)
        self.started.set()


def _start_and_go_on(process: _InterruptedStart) -> None:
    start_shielded(process)  # type: ignore[arg-type]
    for _ in range(1000):  # a handler runs at the main thread's next instruction
        process.started.wait(0.01)


def test_a_ctrl_c_while_a_worker_starts_is_the_parents() -> None:
    # Python's own Ctrl-C, whatever this process was started with (a shell starts a command
    # it runs in the background with SIGINT ignored, and Python then leaves it so).
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        process = _InterruptedStart()
        with pytest.raises(KeyboardInterrupt):
            _start_and_go_on(process)
        assert process.started.wait(5), "the start went on regardless"
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        assert sigint_state() == (False, False), "the main thread's own mask is untouched"
    finally:
        signal.signal(signal.SIGINT, previous)


class _HeldStart:
    """A process whose start is under way until the test releases it."""

    name = "held"

    def __init__(self) -> None:
        self.entered, self.release = threading.Event(), threading.Event()
        self.done = False

    def start(self) -> None:
        self.entered.set()
        self.release.wait()
        self.done = True


def test_ending_the_starts_waits_for_one_under_way_and_refuses_new_ones(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A process leaving at once (the command line's exit_now) first lets a start under way
    finish: ended in the middle, its child read half its start-up data (an EOFError traceback
    on the run's terminal, once in a suite under load)."""
    monkeypatch.setattr(spawning, "_ending", False)  # put back after: this process goes on
    held = _HeldStart()
    starter = threading.Thread(target=lambda: spawning.start_shielded(held).join())  # type: ignore[arg-type]
    starter.start()
    assert held.entered.wait(HANG_SECONDS)
    seen: list[bool] = []
    ender = threading.Thread(
        target=lambda: (spawning.end_starts(HANG_SECONDS), seen.append(held.done))
    )
    ender.start()
    held.release.set()
    ender.join()
    starter.join()
    assert seen == [True], "end_starts returned before the start under way was done"
    with pytest.raises(RuntimeError, match="this process is ending"):
        spawning.start_shielded(_HeldStart())  # type: ignore[arg-type]
