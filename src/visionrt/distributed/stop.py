"""`RunStop`: the handle that ends a cluster run early, from a signal handler or another
thread."""

from __future__ import annotations

import threading


class RunStop:
    """Ends a cluster run early, from a signal handler or another thread. `ask()`: no unit
    starts after it, and each running group is told to end: the frames its worker read are
    finished and committed, its files finalized. `ask()` again (or `abort()`): the run ends
    now with what was committed. `started` is set once the coordinator runs; before it, there
    is nothing to finish."""

    def __init__(self) -> None:
        self.asked = threading.Event()
        self.aborted = threading.Event()
        self.started = threading.Event()

    def ask(self) -> None:
        if self.asked.is_set():
            self.aborted.set()
        self.asked.set()

    def abort(self) -> None:
        self.asked.set()
        self.aborted.set()
