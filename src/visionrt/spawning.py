"""Starting a spawned worker process so that Ctrl-C neither cuts its start short nor reaches it
before it has said how it takes one, while the parent still gets every Ctrl-C: the parent decides
what ends its workers.

Ctrl-C at a terminal goes to the whole process group. A child still importing when it came died
with a KeyboardInterrupt traceback on the run's terminal, and a parent whose exception was
raised inside `Process.start()` left its child half its start-up data (an EOFError traceback).
So the start runs on a thread of its own (a signal's exception is raised in the main thread,
never there) with SIGINT blocked in that thread alone: a child inherits its parent thread's
signal mask across fork and exec (CPython's own resource tracker starts so, bpo-33613), so the
child holds any Ctrl-C pending from its first instruction until `ignore_interrupts` discards
it, while the parent's other threads take a Ctrl-C as ever. (Ignoring SIGINT process-wide for
the fork, as this did before, lost a Ctrl-C that came in those milliseconds.)"""

from __future__ import annotations

import signal
import threading
import time
from multiprocessing import resource_tracker
from multiprocessing.process import BaseProcess

HAVE_SIGMASK = hasattr(signal, "pthread_sigmask")  # POSIX (Windows has no signal masks)
# The starts under way in this process, and whether it is ending (`end_starts`).
_starting: set[threading.Thread] = set()
_starting_lock = threading.Lock()
_ending = False


def start_shielded(process: BaseProcess) -> threading.Thread:
    """Start `process` as described above, from any thread. The returned thread has ended when
    the start has; a caller whose wait for it a signal interrupted joins it before ending the
    process."""
    thread = threading.Thread(
        target=_start_blocked, args=(process,), name=f"start-{process.name}", daemon=True
    )
    with _starting_lock:
        if _ending:
            raise RuntimeError(f"not starting {process.name}: this process is ending")
        _starting.add(thread)
    thread.start()
    if threading.current_thread() is threading.main_thread():
        while thread.is_alive():  # a signal's handler may raise here: the start goes on
            thread.join(0.05)
    return thread


def _start_blocked(process: BaseProcess) -> None:
    # A spawn start launches the resource tracker when none runs, and unblocks SIGINT in this
    # thread after doing so: it runs first, so that nothing unblocks it during the start.
    try:
        if HAVE_SIGMASK:
            resource_tracker.ensure_running()
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        process.start()
    finally:
        with _starting_lock:
            _starting.discard(threading.current_thread())


def end_starts(timeout: float) -> None:
    """For a process about to end at once: start no worker from now on, and wait up to
    `timeout` seconds for the starts under way. A process that ends while a start writes its
    child's start-up data leaves that child an EOFError traceback; a start done is a child in
    `multiprocessing.active_children`, which the process can then end."""
    global _ending
    deadline = time.monotonic() + timeout
    with _starting_lock:
        _ending = True
        starting = list(_starting)
    for thread in starting:
        if thread.is_alive():  # (one whose thread could not start never will)
            thread.join(max(0.0, deadline - time.monotonic()))


def ignore_interrupts() -> None:
    """In a worker: ignore SIGINT from now on (a Ctrl-C held pending since its start, by
    `start_shielded`, is discarded) and take it out of the blocked mask its start gave it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if HAVE_SIGMASK:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
