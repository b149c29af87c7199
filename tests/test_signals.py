"""Signals at every phase: Ctrl-C and SIGTERM while `run` starts up (imports, a stream that will
not open, models loading) and while `tune` searches stop within about a second, exit 130 with one
line, and leave nothing behind — no traceback, no worker process, no cached plan."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture
def silent_server() -> Iterator[str]:
    """An HTTP address that accepts connections and never answers: opening it stalls, so a run
    pointed at it stays in start-up for as long as the test likes."""
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
    yield f"http://127.0.0.1:{listener.getsockname()[1]}/stream.mp4"
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


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("delay", [0.05, 2.0], ids=["importing", "opening"])
def test_a_signal_during_start_up_stops_the_run(
    silent_server: str, tiny_model: Path, tmp_path: Path, sig: signal.Signals, delay: float
) -> None:
    # Two streams: each is opened in a worker process of its own, the slow start-up the
    # sweep found ignoring Ctrl-C.
    proc = _start(
        ["run", f"a={silent_server}", f"b={silent_server}", "-m", str(tiny_model), "-o",
         str(tmp_path / "out"), "--no-video"],
    )  # fmt: skip
    time.sleep(delay)
    workers = _children(proc.pid)
    sent = time.monotonic()
    proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=30)
    took = time.monotonic() - sent
    assert proc.returncode == 130, stderr
    assert took < 5, f"{took:.1f} s to stop"  # about a second; slack for a loaded CI machine
    assert "Traceback" not in stderr
    assert stderr.strip().splitlines()[-1].startswith("visionrt: error: interrupted"), stderr
    time.sleep(0.5)
    alive = [pid for pid in workers if _running(pid)]
    assert not alive, f"worker processes left: {alive}"
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
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    _, rest = proc.communicate(timeout=120)
    took = time.monotonic() - sent
    assert proc.returncode == 130, "".join(lines) + rest
    assert took < 15, f"{took:.1f} s to stop: {rest}"  # the frame in flight, then out
    assert "Traceback" not in rest, rest
    assert "no plan cached" in rest, rest
    assert not plans.exists() or not any(plans.iterdir())


def test_a_signal_as_the_handlers_go_in_is_one_line_and_exit_130(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Ctrl-C the moment `visionrt` puts its SIGINT handler in (a full test run once caught
    it there: a traceback, the process killed by SIGINT): one line, exit 130, and the
    caller's handlers back."""
    from conftest import run_cli

    from visionrt.cli.signals import STARTUP

    install = signal.signal
    before = signal.getsignal(signal.SIGINT)

    def install_then_interrupt(sig: int, handler: Any) -> Any:
        previous = install(sig, handler)
        if sig == signal.SIGINT and handler == STARTUP._handle:
            os.kill(os.getpid(), signal.SIGINT)  # handled at the next bytecode: in install()
        return previous

    monkeypatch.setattr(signal, "signal", install_then_interrupt)
    code, err = run_cli(["doctor"], capsys)
    monkeypatch.undo()
    assert code == 130
    assert err.strip() == "visionrt: error: interrupted (SIGINT)"
    assert signal.getsignal(signal.SIGINT) == before
