"""Ctrl-C and SIGTERM in the command line. Before a command's own handling starts (imports,
opening sources, loading and warming up models): the command stops at once with exit 130 and one
line, instead of a traceback or a silent SIGTERM death; a signal some library swallowed is still
honoured. While a pipeline runs (`run`, `serve`): the first stops reading and finishes what is in
flight, a second aborts."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from visionrt.errors import Interrupted

if TYPE_CHECKING:  # this module is imported before anything heavy
    from visionrt.pipeline import Pipeline

SIGNALS = (signal.SIGINT, signal.SIGTERM)
# How long leaving at once waits for worker starts under way (a spawn start takes milliseconds;
# a loaded machine stretches it).
START_SECONDS = 10.0


class StartupSignals:
    """Installed first thing by `visionrt`; `run` and `tune` replace it with their own once
    there is something to finish. `check()` raises if a signal came and was swallowed."""

    def __init__(self) -> None:
        self.received = ""
        # What an interruption means now, said after it (`run` sets it for its start-up).
        self.during = ""
        # A start-up left running in native code (`start_up`): the process must not finalize
        # the interpreter under it (runtimes abort or crash then), so it leaves with `exit_now`.
        self.abandoned = False

    def install(self) -> None:
        """Install the handlers. A signal may come as soon as the first is in place, and then
        raises KeyboardInterrupt from here: call it inside the block that handles that, with
        what to put back read before (`handlers`)."""
        self.received, self.during, self.abandoned = "", "", False
        if threading.current_thread() is not threading.main_thread():
            return  # Python's rule for handlers; an embedding caller keeps its own
        for sig in SIGNALS:
            signal.signal(sig, self._handle)

    @staticmethod
    def handlers() -> dict[int, Any]:
        """The handlers in place now (what `restore` puts back); {} off the main thread."""
        if threading.current_thread() is not threading.main_thread():
            return {}
        return {sig: signal.getsignal(sig) for sig in SIGNALS}

    @staticmethod
    def restore(previous: dict[int, Any]) -> None:
        for sig, handler in previous.items():
            signal.signal(sig, handler)

    def _handle(self, signum: int, _frame: Any) -> None:
        if not_ours(signum):
            return
        self.received = signal.Signals(signum).name
        # KeyboardInterrupt, not an Exception: the `except Exception` that wraps a runtime's
        # load errors must not turn it into a model error.
        raise KeyboardInterrupt(self.message())

    def message(self) -> str:
        return f"interrupted ({self.received}){self.during}"

    def check(self) -> None:
        if self.received:
            raise Interrupted(self.message())

    @staticmethod
    def exit_now(code: int) -> None:
        """Leave without finalizing the interpreter: the worker processes the abandoned start-up
        made are ended first (normally done at exit), the output streams flushed."""
        # Imported here: this module is imported before the handlers go in, and every import
        # before them widens the moment in which a Ctrl-C is a traceback.
        import multiprocessing

        from visionrt.spawning import end_starts

        end_starts(START_SECONDS)  # each child whole before it is ended, and no new one
        # The start-up, still running, may close a worker's process object meanwhile (its
        # source ending it): that one is no longer this exit's to end.
        for child in multiprocessing.active_children():
            with contextlib.suppress(ValueError):
                child.terminate()
        for child in multiprocessing.active_children():
            with contextlib.suppress(ValueError):
                child.join(1.0)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


STARTUP = StartupSignals()
T = TypeVar("T")


def start_up(build: Callable[[], T]) -> T:
    """`build()` (opening sources, loading and compiling models: native calls that hold the
    main thread for seconds, and Python runs a signal handler only between its own bytecodes)
    on a helper thread, while the main thread waits in steps of 50 ms: a signal then stops the
    start-up within a tenth of a second. An interrupted build is abandoned (its thread is a
    daemon; the worker processes it started end with the process); its error is raised here."""
    outcome: list[tuple[bool, Any]] = []
    done = threading.Event()

    def work() -> None:
        try:
            outcome.append((True, build()))
        except BaseException as err:  # handed to the main thread, which raises it
            outcome.append((False, err))
        finally:
            done.set()

    threading.Thread(target=work, name="start-up", daemon=True).start()
    try:
        while not done.wait(0.05):
            pass
    except BaseException:
        STARTUP.abandoned = not done.is_set()
        raise
    succeeded, value = outcome[0]
    if not succeeded:
        raise value
    return value


OWNER = os.getpid()  # the process whose handlers these are


def not_ours(signum: int) -> bool:
    """True in a process forked from visionrt's (a runtime's helper: OpenVINO forks one to send
    its telemetry), which inherits the handlers: there the signal does what it does by default,
    now, and the handler must do nothing else."""
    if os.getpid() == OWNER:
        return False
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)
    return True


def exit_at_once(signum: int, _frame: Any) -> None:
    """Before `main()` runs nothing is open or written: say so and leave (exit 130)."""
    if not_ours(signum):
        return
    name = signal.Signals(signum).name
    sys.stderr.write(f"visionrt: error: interrupted ({name}) while starting: nothing processed\n")
    os._exit(130)


def install_early() -> None:
    """For the command line only, before its imports (typer, the runtimes: seconds). Not in a
    worker process it spawned: spawn imports the console script again there, as `__mp_main__`,
    and with it this; a worker takes its signals as its start left them (visionrt.spawning).
    (Installed there, they said "interrupted (SIGTERM) while starting" on the run's terminal
    for each worker the run ended.)"""
    if threading.current_thread() is not threading.main_thread() or _importing_main_again():
        return
    signal.signal(signal.SIGINT, exit_at_once)
    signal.signal(signal.SIGTERM, exit_at_once)


def _importing_main_again() -> bool:
    """True while a spawned worker imports its parent's main module (as `__mp_main__`, beside
    its own `__main__`); importing multiprocessing in a parent makes `__mp_main__` its
    `__main__` again."""
    again = sys.modules.get("__mp_main__")
    return again is not None and again is not sys.modules.get("__main__")


def install_signal_handlers(pipeline: Pipeline) -> None:
    """Ctrl-C or SIGTERM: stop reading and finish what is in flight; a second: abort."""

    def handle(signum: int, _frame: Any) -> None:
        if not_ours(signum):
            return
        if pipeline.interrupted:  # a second signal: the user really wants out, now
            pipeline.abort()
            raise KeyboardInterrupt
        print(
            f"\nvisionrt: {signal.Signals(signum).name}: stopping, finishing frames in flight"
            " (again to abort)",
            file=sys.stderr,
        )
        pipeline.stop()

    if threading.current_thread() is threading.main_thread():  # Python's rule for handlers
        signal.signal(signal.SIGINT, handle)
        signal.signal(signal.SIGTERM, handle)
