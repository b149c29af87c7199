"""Joining a Ray cluster that is not there: one line naming the address, at once (Ray itself
retries for minutes, or prints a traceback)."""

from __future__ import annotations

import signal
import socket
import sys
from typing import Any

import pytest

from visionrt.distributed.ray_start import init_ray
from visionrt.errors import ConfigError


class NoCluster:
    """Stands in for the `ray` module: what `ray.init` raises when nothing runs there."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def init(self, **options: Any) -> None:
        self.calls.append(options)
        raise ConnectionError("Could not find any running Ray instance.")


def test_an_address_where_nothing_listens_fails_in_one_line_without_asking_ray() -> None:
    with socket.socket() as probe:  # a port that was free a moment ago: nothing listens
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    ray = NoCluster()
    with pytest.raises(ConfigError, match=rf"^--ray 127.0.0.1:{port}: no Ray head answers there"):
        init_ray(ray, f"127.0.0.1:{port}", 0, 0.0, 0.0)
    assert ray.calls == []


@pytest.mark.parametrize(
    ("address", "said"),
    [
        ("auto", "--ray auto: no Ray cluster is running on this machine"),
        ("ray://head:10001", "--ray ray://head:10001: ConnectionError"),
    ],
)
def test_a_cluster_ray_cannot_find_is_one_line(address: str, said: str) -> None:
    ray = NoCluster()
    with pytest.raises(ConfigError, match=f"^{said}"):
        init_ray(ray, address, 0, 0.0, 0.0)
    assert [call["address"] for call in ray.calls] == [address]


class Starting:
    """Stands in for the `ray` module starting an embedded Ray: its init puts in Ray's
    SIGTERM handler (`sys.exit`), as Ray's does, and a Ctrl-C comes in the middle."""

    def __init__(self) -> None:
        import types

        def set_sigterm_handler(handler: Any) -> None:
            signal.signal(signal.SIGTERM, handler)

        self._private = types.SimpleNamespace(
            utils=types.SimpleNamespace(set_sigterm_handler=set_sigterm_handler)
        )
        self.interrupted_inside = False

    def init(self, **options: Any) -> None:
        self._private.utils.set_sigterm_handler(lambda signum, _frame: sys.exit(signum))
        try:
            signal.raise_signal(signal.SIGINT)  # while Ray starts its processes
        except KeyboardInterrupt:
            self.interrupted_inside = True  # Ray half-started: its processes outlive the run
            raise

    def cluster_resources(self) -> dict[str, float]:
        return {"CPU": 2.0}

    def shutdown(self) -> None:
        pass


def test_an_embedded_ray_starts_whole_and_the_callers_signal_handling_is_kept() -> None:
    """Ctrl-C while the embedded Ray starts is held until it has, then handed to the caller's
    handler; Ray's SIGTERM handler does not stay."""
    told: list[int] = []

    def caller(signum: int, _frame: Any) -> None:
        told.append(signum)
        raise KeyboardInterrupt

    previous = {sig: signal.signal(sig, caller) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        ray = Starting()
        with pytest.raises(KeyboardInterrupt):
            init_ray(ray, None, 1, 2.0, 0.0)
        assert not ray.interrupted_inside
        assert told == [signal.SIGINT]
        assert signal.getsignal(signal.SIGTERM) is caller
        assert signal.getsignal(signal.SIGINT) is caller
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
