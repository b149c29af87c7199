"""Starting a spawned worker process so that Ctrl-C neither cuts its start short nor reaches it
before it has said how it takes one: the parent decides what ends its workers.

Ctrl-C at a terminal goes to the whole process group. A child still importing when it came died
with a KeyboardInterrupt traceback on the run's terminal, and a parent whose exception was
raised inside `Process.start()` left its child half its start-up data (an EOFError traceback).
So the start runs on a thread of its own (a signal's exception is raised in the main thread,
never there) and, from the main thread, with SIGINT ignored for the few milliseconds of the
fork and exec: an ignored signal stays ignored across exec, and Python leaves a SIGINT it finds
ignored so (the `signal` module's documentation), so the child ignores Ctrl-C from its first
instruction. A Ctrl-C in those milliseconds is lost; one a moment later is the parent's."""

from __future__ import annotations

import signal
import threading
from multiprocessing.process import BaseProcess


def start_shielded(process: BaseProcess) -> threading.Thread:
    """Start `process` as described above. The returned thread has ended when the start has;
    a caller whose wait for it a signal interrupted joins it before ending the process."""
    thread = threading.Thread(target=process.start, name=f"start-{process.name}", daemon=True)
    if threading.current_thread() is not threading.main_thread():
        thread.start()  # (signal dispositions are the main thread's to change)
        return thread
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        thread.start()
        while thread.is_alive():  # SIGTERM's handler may still raise here: the start goes on
            thread.join(0.05)
    finally:
        signal.signal(signal.SIGINT, previous)
    return thread


def ignore_interrupts() -> None:
    """In a worker: ignore SIGINT (as a worker started by `start_shielded` already does)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
