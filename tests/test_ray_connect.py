"""Joining a Ray cluster that is not there: one line naming the address, at once (Ray itself
retries for minutes, or prints a traceback)."""

from __future__ import annotations

import socket
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
