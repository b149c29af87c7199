"""Signals at every phase: Ctrl-C and SIGTERM while `run` starts up (imports, a stream that will
not open, models loading) and while `tune` searches stop it without waiting for what it was
doing, exit 130 with one line, and leave nothing behind — no traceback, no worker process, no
cached plan."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import HANG_SECONDS, until


@pytest.fixture
def silent_server() -> Iterator[tuple[str, list[socket.socket]]]:
    """An HTTP address that accepts connections and never answers: opening it stalls, so a run
    pointed at it stays in start-up for as long as the test likes; and the connections it
    accepted."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    held: list[socket.socket] = []
    done = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not done.is_set():
            try:
                held.append(listener.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}/stream.mp4", held
    done.set()
    thread.join(2)
    for conn in held:
        conn.close()
    listener.close()


def _start(args: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "visionrt.cli.main", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
        start_new_session=True,  # the signal goes to visionrt alone, as `kill PID` sends it
    )


def _running(pid: int) -> bool:
    """Alive and not a zombie (an orphan's exit status waits for a PID 1 that may not reap)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def _children(pid: int) -> list[int]:
    found = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True)
    return [int(p) for p in found.stdout.split()]


def _catches(pid: int, sig: signal.Signals) -> bool:
    """Whether process `pid` has a handler in for `sig` now (its SigCgt mask)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    mask = next(line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:"))
    return bool(int(mask, 16) >> (sig - 1) & 1)


def _until(condition: Any, what: str, proc: subprocess.Popen[str]) -> None:
    """Wait for `condition()`: the timeout only turns a hang into a failure."""

    def holds() -> bool:
        if condition():
            return True
        assert proc.poll() is None, f"visionrt ended before {what}: {proc.communicate()[1]}"
        return False

    until(holds, what)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("phase", ["importing", "opening"])
def test_a_signal_during_start_up_stops_the_run(
    silent_server: tuple[str, list[socket.socket]],
    tiny_model: Path,
    tmp_path: Path,
    sig: signal.Signals,
    phase: str,
) -> None:
    """The signal comes as soon as visionrt's handlers are in (the commands still importing),
    or once the first stream is being opened. The streams never answer and may take an hour to
    time out: only the signal can end the run before the guard gives up."""
    url, accepted = silent_server
    # Two streams: each is opened in a worker process of its own, the slow start-up the
    # sweep found ignoring Ctrl-C.
    proc = _start(
        ["run", f"a={url}", f"b={url}", "-m", str(tiny_model), "-o", str(tmp_path / "out"),
         "--no-video", "--set", "source.read_timeout=3600"],
    )  # fmt: skip
    if phase == "importing":  # SIGTERM's handler goes in right after SIGINT's, first thing
        _until(lambda: _catches(proc.pid, signal.SIGTERM), "had its handlers in", proc)
    else:
        _until(lambda: accepted, "opened a stream", proc)
    workers = _children(proc.pid)
    proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=HANG_SECONDS)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    assert stderr.strip().splitlines()[-1].startswith("visionrt: error: interrupted"), stderr
    if phase == "opening":
        assert workers, "the streams are opened in worker processes"
    # A worker left behind would wait out its hour-long open: ended ones are gone at once.
    until(lambda: not [pid for pid in workers if _running(pid)], "no worker process left")
    assert not list(tmp_path.rglob("*.partial*"))


@pytest.mark.slow
def test_ctrl_c_stops_tune_and_caches_nothing(
    demo_model: Path, small_video: Path, tmp_path: Path
) -> None:
    plans = tmp_path / "plans"
    proc = _start(
        ["tune", str(small_video), "--model", str(demo_model)], env={"VISIONRT_PLANS": str(plans)}
    )
    assert proc.stderr is not None
    lines: list[str] = []
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:  # the reference's first round: the search is under way
        line = proc.stderr.readline()
        lines.append(line)
        if "frames:" in line or not line:
            break
    assert any("frames:" in line for line in lines), "".join(lines)
    proc.send_signal(signal.SIGINT)
    # Tune's search goes on for minutes: stopped by the signal, it ends with no plan cached.
    _, rest = proc.communicate(timeout=HANG_SECONDS)
    assert proc.returncode == 130, "".join(lines) + rest
    assert "Traceback" not in rest, rest
    assert "no plan cached" in rest, rest
    assert not plans.exists() or not any(plans.iterdir())


def _run_module(tmp_path: Path, source: str) -> subprocess.CompletedProcess[str]:
    """`source` run as `python -m` in a process of its own, as `python -m visionrt.cli.main` runs
    (the interpreter's way out differs for scripts): a signal the test sends itself can never
    reach the test session."""
    (tmp_path / "signalled_cli.py").write_text(source, encoding="utf-8")
    path = os.pathsep.join([str(tmp_path), *sys.path])
    return subprocess.run(
        [sys.executable, "-m", "signalled_cli"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": path},
        timeout=HANG_SECONDS,
    )


def test_a_signal_as_the_handlers_go_in_is_one_line_and_exit_130(tmp_path: Path) -> None:
    """Ctrl-C the moment `visionrt` puts its SIGINT handler in (a full test run once caught
    it there: a traceback, the process killed by SIGINT): one line, exit 130, and the
    caller's handlers back."""
    proc = _run_module(
        tmp_path,
        """
import os
import signal

from visionrt.cli.main import main
from visionrt.cli.signals import STARTUP

install = signal.signal
before = signal.getsignal(signal.SIGINT)


def install_then_interrupt(sig, handler):
    previous = install(sig, handler)
    if sig == signal.SIGINT and handler == STARTUP._handle:
        os.kill(os.getpid(), signal.SIGINT)  # handled at the next bytecode: in install()
    return previous


signal.signal = install_then_interrupt
try:
    main(["doctor"])
finally:
    signal.signal = install
    print("restored" if signal.getsignal(signal.SIGINT) == before else "not restored")
""",
    )
    assert proc.returncode == 130, proc.stderr
    assert proc.stderr.strip() == "visionrt: error: interrupted (SIGINT)"
    assert proc.stdout.strip() == "restored"


def test_a_signal_inside_code_made_from_a_string_still_exits_130(tmp_path: Path) -> None:
    """The commands' imports make functions from strings (dataclasses, namedtuple): a Ctrl-C
    that lands there was caught and said in one line, and then CPython ended the process by
    SIGINT (-2) instead of 130, as if no one had handled it (test_a_signal_during_start_up's
    importing-SIGINT, about one run in four)."""
    proc = _run_module(
        tmp_path,
        """
import os
import signal

import visionrt.cli.main as cli


def load(name):  # as a command's imports make a dataclass's methods
    code = "os.kill(os.getpid(), signal.SIGINT)\\nfor _ in range(10**7): pass"
    exec(code, {"os": os, "signal": signal})


cli._load = load
cli.main(["doctor"])
""",
    )
    assert proc.returncode == 130, proc.stderr
    assert proc.stderr.strip() == "visionrt: error: interrupted (SIGINT)"


def test_a_signal_inside_a_native_import_is_one_line_and_exit_130(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """tune's handler raises KeyboardInterrupt where the signal lands; inside `import openvino`
    that became "ImportError: initialization failed" and a traceback, exit 1 (SIGTERM during a
    demo's tune, once in a loaded full test run). It is a signal: one line, exit 130."""
    from visionrt.cli import main as cli_main

    class App:
        def __call__(self, **_: object) -> int:
            try:
                raise KeyboardInterrupt
            except KeyboardInterrupt as interrupt:
                raise ImportError("initialization failed") from interrupt

    monkeypatch.setattr(cli_main, "app", App())
    with pytest.raises(SystemExit) as exit_:
        cli_main.main(["tune"])
    assert exit_.value.code == 130
    assert capsys.readouterr().err.strip().splitlines() == ["visionrt: error: interrupted"]


def test_a_worker_the_console_script_spawns_takes_no_command_line_handlers(
    tmp_path: Path,
) -> None:
    """spawn imports the console script again in each worker process (as `__mp_main__`), and
    with it `visionrt.cli.entry`: its early handlers must not go in there. (They did: each
    worker a run ended with SIGTERM said "interrupted (SIGTERM) while starting: nothing
    processed" on the run's terminal, after the run's own line.)"""
    script = tmp_path / "visionrt"  # what pip writes for the console script, less the shebang
    script.write_text(
        textwrap.dedent(
            """
            import multiprocessing
            import signal
            from visionrt.cli.entry import main

            def report(replies):
                replies.send([signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)])

            if __name__ == "__main__":
                print([signal.getsignal(s).__name__ for s in (signal.SIGINT, signal.SIGTERM)])
                context = multiprocessing.get_context("spawn")
                ours, theirs = context.Pipe(duplex=False)
                worker = context.Process(target=report, args=(theirs,))
                worker.start()
                print(ours.recv())
                worker.join()
            """
        )
    )
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=HANG_SECONDS
    )
    assert done.returncode == 0, done.stderr
    ours, theirs = done.stdout.splitlines()
    assert ours == "['exit_at_once', 'exit_at_once']"  # the command line's own, early
    assert "exit_at_once" not in theirs, theirs


def test_leaving_at_once_passes_over_a_worker_its_start_up_closed_meanwhile(
    tmp_path: Path,
) -> None:
    """`exit_now` ends the workers an abandoned start-up made while that start-up still runs:
    a worker it closed meanwhile is passed over (it was a ValueError traceback and exit 1 after
    a Ctrl-C, in 2 of 8 runs of two process-decoded files)."""
    script = tmp_path / "leave.py"
    script.write_text(
        textwrap.dedent(
            """
            import multiprocessing
            import time
            from visionrt.cli.signals import STARTUP

            if __name__ == "__main__":
                worker = multiprocessing.get_context("spawn").Process(target=time.sleep, args=(0,))
                worker.start()
                worker.join()
                worker.close()  # as a source ending its worker does, on the start-up's thread
                multiprocessing.active_children = lambda: [worker]  # listed a moment before
                STARTUP.exit_now(130)
            """
        )
    )
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=HANG_SECONDS
    )
    assert (done.returncode, done.stderr) == (130, "")
