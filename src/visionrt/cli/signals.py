"""Ctrl-C and SIGTERM before a command's own handling starts (imports, opening sources, loading
and warming up models): the command stops at once with exit 130 and one line, instead of a
traceback or a silent SIGTERM death; a signal some library swallowed is still honoured."""

from __future__ import annotations

import os
import signal
import sys
import threading
from typing import Any

from visionrt.errors import Interrupted


class StartupSignals:
    """Installed first thing by `visionrt`; `run` and `tune` replace it with their own once
    there is something to finish. `check()` raises if a signal came and was swallowed."""

    def __init__(self) -> None:
        self.received = ""

    def install(self) -> dict[int, Any]:
        """Install the handlers; returns the previous ones (for `restore`)."""
        self.received = ""
        if threading.current_thread() is not threading.main_thread():
            return {}  # Python's rule for handlers; an embedding caller keeps its own
        return {sig: signal.signal(sig, self._handle) for sig in (signal.SIGINT, signal.SIGTERM)}

    @staticmethod
    def restore(previous: dict[int, Any]) -> None:
        for sig, handler in previous.items():
            signal.signal(sig, handler)

    def _handle(self, signum: int, _frame: Any) -> None:
        self.received = signal.Signals(signum).name
        # KeyboardInterrupt, not an Exception: the `except Exception` that wraps a runtime's
        # load errors must not turn it into a model error.
        raise KeyboardInterrupt(self.message())

    def message(self) -> str:
        return f"interrupted ({self.received}) while starting: nothing processed"

    def check(self) -> None:
        if self.received:
            raise Interrupted(self.message())


STARTUP = StartupSignals()


def exit_at_once(signum: int, _frame: Any) -> None:
    """Before `main()` runs nothing is open or written: say so and leave (exit 130)."""
    name = signal.Signals(signum).name
    sys.stderr.write(f"visionrt: error: interrupted ({name}) while starting: nothing processed\n")
    os._exit(130)


def install_early() -> None:
    """For the command line only, before its imports (typer, the runtimes: seconds)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, exit_at_once)
        signal.signal(signal.SIGTERM, exit_at_once)
