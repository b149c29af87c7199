"""The driver's Ray: an embedded one started for the run (and everything it started ended with
it), or a running cluster joined, the process's signal handling kept either way."""

from __future__ import annotations

import contextlib
import logging
import math
import os
import signal
import socket
import threading
from typing import Any

import psutil

from visionrt.distributed.actor import error_line
from visionrt.errors import BackendUnavailable, ConfigError


def connect(address: str) -> Any:
    """Ray, connected to the running cluster at `address` ("auto", "host:port"), unless this
    process is connected already."""
    ray = import_ray()
    if not ray.is_initialized():
        init_ray(ray, address, 0, 0.0, 0.0)
    return ray


def _check_reachable(address: str, timeout: float = 5.0) -> None:
    """A ConfigError when nothing listens at a HOST:PORT address: Ray itself would retry for
    minutes, saying nothing."""
    host, _, port = address.rpartition(":")
    if "://" in address or not host or not port.isdigit():
        return  # `auto`, or a form Ray reads itself
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as err:
        why = err.strerror or type(err).__name__
        raise ConfigError(
            f"--ray {address}: no Ray head answers there ({why}); is `ray start --head`"
            " running on that machine, and its port open to this one?"
        ) from err


def import_ray() -> Any:
    try:
        import ray
    except ImportError as err:
        raise BackendUnavailable(
            "Ray is not installed: pip install 'visionrt[ray]' to run on a cluster"
        ) from err
    return ray


def children() -> set[int]:
    """This process's descendants: taken before an embedded Ray starts (see stop_embedded)."""
    return {p.pid for p in psutil.Process().children(recursive=True)}


def stop_embedded(ray: Any, before: set[int]) -> None:
    """Shut the embedded Ray down, and end what `ray.shutdown()` leaves of the processes
    started since `before` (`children()`): the raylet's agents, when it stops soon after it
    started them, outlive it (measured: a Ctrl-C in the first seconds left two, for good)."""
    started = [p for p in psutil.Process().children(recursive=True) if p.pid not in before]
    if ray.is_initialized():
        _stop_monitor(ray)
        ray.shutdown()
    for process in started:
        with contextlib.suppress(psutil.Error):
            process.kill()


def _stop_monitor(ray: Any) -> None:
    """Kill the embedded Ray's autoscaler monitor ahead of `ray.shutdown()`, which waits a
    full second for it to answer SIGTERM (it does not; measured: 1.0 of 1.1 s). It has
    nothing to scale on a fixed local cluster. Ray's internals: where they differ, nothing."""
    node = getattr(getattr(getattr(ray, "_private", None), "worker", None), "_global_node", None)
    processes = getattr(node, "all_processes", None)
    for info in processes.get("monitor", []) if isinstance(processes, dict) else []:
        with contextlib.suppress(Exception):
            info.process.kill()


def init_ray(ray: Any, address: str | None, workers: int, cpus: float, gpus: float) -> None:
    """`ray.init`, the caller's signal handling kept. Ray replaces the process's SIGTERM
    handler with `sys.exit`: a run stopped by SIGTERM (systemd, Kubernetes) would leave its
    outputs unfinalized. And an embedded Ray interrupted while it starts its processes never
    learns of those it started: the raylet's agents outlive the run. So while it starts,
    Ctrl-C and SIGTERM are held, and handed to the caller's handlers once it has."""
    if threading.current_thread() is not threading.main_thread():  # Python's rule
        _start_ray(ray, address, workers, cpus, gpus)
        return
    kept = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    held: list[int] = []
    utils: Any = getattr(getattr(ray, "_private", None), "utils", None)  # Ray's, or None
    setter = getattr(utils, "set_sigterm_handler", None)
    if address is None:
        for sig in kept:
            signal.signal(sig, lambda signum, _frame: held.append(signum))
    if setter is not None:  # Ray's internals: where they differ, its handler is undone after
        utils.set_sigterm_handler = lambda _handler: None
    try:
        _start_ray(ray, address, workers, cpus, gpus)
    finally:
        if setter is not None:
            utils.set_sigterm_handler = setter
        for sig, handler in kept.items():
            if handler is not None:
                signal.signal(sig, handler)
    for signum in held[:1]:
        signal.raise_signal(signum)


def _start_ray(ray: Any, address: str | None, workers: int, cpus: float, gpus: float) -> None:
    # Ray reads this at init: no usage report leaves the machine (the issue asks it off).
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if address is not None:
        _check_reachable(address)
        try:
            ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING)
        except ConnectionError as err:  # `auto` and none running; a head gone since
            if address == "auto":
                raise ConfigError(
                    "--ray auto: no Ray cluster is running on this machine (`ray start --head`"
                    " starts one; --ray local runs an embedded one)"
                ) from err
            raise ConfigError(f"--ray {address}: {error_line(err)}") from err
        return
    # An embedded Ray is this run's alone: since Ray 2.59 a local init would turn token auth on
    # and write ~/.ray/auth_token, which a head node the user starts later picks up while the
    # nodes joining it do not (a cluster that cannot form). Off unless the user chose.
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    # Enough CPUs that every worker fits; GPUs as Ray finds them (claiming more would place a
    # GPU worker on a machine without one).
    ray.init(
        # "local", not None: Ray would otherwise join the cluster RAY_ADDRESS or the file a
        # `ray start` (or a killed run's head) left in /tmp/ray names, and refuse num_cpus.
        address="local",
        num_cpus=max(1, math.ceil(workers * cpus)) if workers else os.cpu_count() or 1,
        include_dashboard=False,
        log_to_driver=False,
        logging_level=logging.WARNING,  # "Started a local Ray instance" is ours to say
        # Ray runs its workers at niceness 15; the live audit's lane (SCHED_IDLE) then takes
        # 8 % of a core beside each stage, not 0.3 %, and a live stream dropped frames at each
        # audited one (docs/benchmarks.md). This Ray runs nothing but the run's workers.
        _system_config={"worker_niceness": 0},
    )
    found = ray.cluster_resources().get("GPU", 0.0)
    if gpus > found:
        ray.shutdown()
        raise ConfigError(
            f"cluster.worker_gpus: {gpus:g} per worker asked, this machine has {found:g}"
        )
