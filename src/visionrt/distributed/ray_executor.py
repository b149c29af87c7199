"""Run work units on Ray actors, each running one visionrt Pipeline and streaming its results back
to the driver in bounded batches."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from visionrt.config import load_config
from visionrt.distributed.actor import UnitRunner, error_line, group_key
from visionrt.distributed.files import Manifest, manifest
from visionrt.distributed.ray_start import children, import_ray, init_ray, stop_embedded
from visionrt.distributed.units import Done, Failed, Group, Lost, Report
from visionrt.errors import ConfigError

log = logging.getLogger("visionrt")

# Batches an actor may run ahead of the driver before its generator blocks: bounds the object
# store's share of a slow driver to a few hundred JSONL lines per actor.
AHEAD_BATCHES = 4
STARTUP_GRACE = 5.0  # seconds the other workers get once the first one is up


@dataclass
class _Worker:
    """A worker actor as the driver tracks it."""

    actor: Any
    ready: Any = None  # the pending describe() call; None once the actor answered
    settings: Mapping[str, Any] = field(default_factory=dict)  # what its plan group runs
    files: Manifest = field(default_factory=dict)  # the model files those settings name
    running: Any = None  # the group's ObjectRefGenerator while one runs
    units: dict[int, int] = field(default_factory=dict)  # unit id → attempt, not yet ended
    key: tuple[tuple[int, int], ...] = ()  # the running group's name (`group_key`)
    info: dict[str, Any] = field(default_factory=dict)


class RayExecutor:
    """Workers as Ray actors (`num_cpus=worker_cpus`, `num_gpus=worker_gpus` each) over an
    embedded local Ray (`address` None) or the cluster at `address` ("auto", "host:port").

    `run`: the Pipeline's configuration, RunConfig's sections as a plain dict (its plan settled
    on the driver; `distributed.run.worker_settings`, see `worker.group_batches`). An actor
    that dies is reported as `Lost` and replaced by a new worker (a new id), `replacements`
    times in all (None: `workers` times) so that a unit that kills its worker cannot spawn
    actors forever.
    Waits up to `startup_timeout` seconds for the first worker, then raises ConfigError: the
    cluster cannot place such an actor (no GPU, fewer CPUs than asked). `workers` 0: as many as
    the cluster holds (its GPUs / `worker_gpus` when a worker asks for GPUs, else its CPUs /
    `worker_cpus`; an embedded Ray has this machine's CPUs). `settings_for(worker, info)`,
    when given, picks a worker's configuration once it has described itself (its machine's
    fingerprint: `distributed.plans.GroupPlans`); else every worker runs `run`. With
    `metrics` (host, token) each worker serves its Prometheus metrics there on a free port
    (`info(worker)["metrics"]`: where Prometheus reaches it)."""

    def __init__(
        self,
        address: str | None,
        workers: int,
        worker_cpus: float = 1.0,
        worker_gpus: float = 0.0,
        run: Mapping[str, Any] | None = None,
        *,
        replacements: int | None = None,
        startup_timeout: float = 60.0,
        settings_for: Callable[[str, Mapping[str, Any]], Mapping[str, Any]] | None = None,
        metrics: tuple[str, str] | None = None,
    ) -> None:
        if workers < 0:
            raise ConfigError(f"cluster.workers: expected >= 0 (0: auto), got {workers}")
        self.run = dict(run or {})
        load_config(values=self.run)  # a bad option fails here, before any actor starts
        self.settings_for, self._metrics = settings_for, metrics
        self.ray = import_ray()
        self._lost_errors = self.lost_errors(self.ray)
        self._owns_ray = not self.ray.is_initialized()
        self._workers: dict[str, _Worker] = {}
        self._before: set[int] = set()  # this process's children before Ray (see close)
        try:
            self._start(address, workers, worker_cpus, worker_gpus, replacements, startup_timeout)
        except BaseException:  # a signal too: what was started ends with this run
            self.close()
            raise

    def _start(
        self,
        address: str | None,
        workers: int,
        worker_cpus: float,
        worker_gpus: float,
        replacements: int | None,
        startup_timeout: float,
    ) -> None:
        if self._owns_ray:
            self._before = children()
            init_ray(self.ray, address, workers, worker_cpus, worker_gpus)
        if workers == 0:
            workers = _fitting(self.ray.cluster_resources(), worker_cpus, worker_gpus)
        self._driver_node = self.ray.get_runtime_context().get_node_id()
        self._manifests: dict[str, Manifest] = {}
        # No runtime_env: Ray sets OMP_NUM_THREADS to an actor's CPUs itself, and a runtime
        # env keeps the actor off the worker processes Ray started ahead (0.65 s more each).
        self._actor_class = self.ray.remote(UnitRunner).options(
            num_cpus=worker_cpus,
            num_gpus=worker_gpus,
            # Restarts are ours (a new worker id): a restarted actor under its old id could
            # still be answering for an attempt the coordinator already gave to another worker.
            max_restarts=0,
            # A second thread: `stop` is answered while `run_group` streams.
            max_concurrency=2,
        )
        self._cpus = worker_cpus
        self._count = 0
        self._replacements = workers if replacements is None else replacements
        self._lost: list[Report] = []
        for _ in range(workers):
            self._spawn()
        # The first worker may wait on a cluster scaling up; the rest, started together, get a
        # few seconds more (one that never fits must not hold the run back).
        deadline = time.monotonic() + startup_timeout
        while len(self.workers()) < len(self._workers) and time.monotonic() < deadline:
            if self.workers():
                deadline = min(deadline, time.monotonic() + STARTUP_GRACE)
            self._settle(min(1.0, max(0.0, deadline - time.monotonic())))
        if not self.workers():
            raise ConfigError(
                f"no Ray worker started within {startup_timeout:g} s: each asks for"
                f" {worker_cpus:g} CPU and {worker_gpus:g} GPU; the cluster has"
                f" {self.ray.cluster_resources() if self.ray.is_initialized() else {}}"
            )

    # -- the executor protocol ----------------------------------------------------------------
    def workers(self) -> set[str]:
        """Ids of the workers alive and ready now."""
        return {name for name, w in self._workers.items() if w.ready is None}

    def running(self, worker: str) -> set[int]:
        """The ids of the units `worker` runs now (none when idle)."""
        state = self._workers.get(worker)
        return set(state.units) if state is not None and state.running is not None else set()

    def info(self, worker: str) -> dict[str, Any]:
        """What a ready worker said of itself (node, pid, threads, resources)."""
        return dict(self._workers[worker].info)

    def start(self, worker: str, units: Group) -> None:
        """Begin `units` on the idle, ready `worker` (returns at once)."""
        state = self._workers[worker]
        if state.ready is not None or state.running is not None:
            raise RuntimeError(f"worker {worker} is not idle: cannot start {len(units)} unit(s)")
        state.units = {unit.unit_id: unit.attempt for unit in units}
        state.key = group_key(state.units)
        state.running = state.actor.run_group.options(
            num_returns="streaming", _generator_backpressure_num_objects=AHEAD_BATCHES
        ).remote(units, state.settings, state.files, self._driver_node)

    @staticmethod
    def lost_errors(ray: Any) -> tuple[type[BaseException], ...]:
        """How a worker's death reaches its generator: the actor's own error or, when its node
        went, the node's, or the loss of a report held in that node's object store (which one
        depends on timing). Each is a lost worker whose units go elsewhere, not a failure of
        those units."""
        errors = ray.exceptions
        return (
            errors.RayActorError, errors.NodeDiedError, errors.ObjectLostError,
            errors.WorkerCrashedError, errors.LocalRayletDiedError,
        )  # fmt: skip

    def reports(self, timeout: float) -> list[Report]:
        """What happened since the last call, waiting up to `timeout` seconds for the first
        report; returns early (possibly empty) when a worker became ready."""
        out, self._lost = self._lost, []
        if out:
            timeout = 0.0
        out.extend(self._settle(timeout))
        return out

    def stop(self, worker: str) -> bool:
        """Ask `worker` to end its group (its Pipeline stops reading; each unit then reports
        Done); False when it runs none."""
        state = self._workers.get(worker)
        if state is None or state.running is None:
            return False
        state.actor.stop.remote(state.key)  # that group only, not a later one
        return True

    def close(self) -> None:
        """Stop every worker; shut the embedded Ray down when this executor started it."""
        for state in self._workers.values():
            self.ray.kill(state.actor)
        self._workers.clear()
        if self._owns_ray:
            stop_embedded(self.ray, self._before)
        self._owns_ray = False

    # -- internals ------------------------------------------------------------------------
    def _spawn(self) -> None:
        self._count += 1
        name = f"w{self._count}"
        actor = self._actor_class.remote(name, self._cpus, self._metrics)
        self._workers[name] = _Worker(actor, ready=actor.describe.remote())

    def _settle(self, timeout: float) -> list[Report]:
        """Wait up to `timeout` for any worker's next report or readiness; collect every one
        that is there."""
        waiting = {}
        for name, state in self._workers.items():
            pending = state.ready if state.ready is not None else state.running
            if pending is not None:
                waiting[pending] = name
        if not waiting:
            return []
        done, _ = self.ray.wait(list(waiting), num_returns=1, timeout=timeout)
        if done:  # take whatever else is there too
            done, _ = self.ray.wait(list(waiting), num_returns=len(waiting), timeout=0)
        out: list[Report] = []
        for pending in done:
            name = waiting[pending]
            state = self._workers[name]
            if state.ready is not None:
                self._answered(name, state)
            else:
                out.extend(self._drain(name, state))
        return out

    def _answered(self, name: str, state: _Worker) -> None:
        try:
            state.info = self.ray.get(state.ready)
        except self.ray.exceptions.RayError as err:
            # It never ran: not replaced (the cause would repeat), reported so the caller
            # can tell a shrinking pool.
            log.warning("Ray worker %s did not start: %s", name, err)
            del self._workers[name]
            self._lost.append(Lost(name))
            return
        state.settings = self.settings_for(name, state.info) if self.settings_for else self.run
        state.files = self._manifest(state.settings)
        state.ready = None

    def _drain(self, name: str, state: _Worker) -> list[Report]:
        """Every report of `name`'s group that has arrived (a Lost when the actor died)."""
        out: list[Report] = []
        generator = state.running
        while True:
            ready, _ = self.ray.wait([generator], timeout=0)
            if not ready:
                return out
            try:
                report = self.ray.get(next(generator))
            except StopIteration:
                state.running = None
                return out
            except self._lost_errors:
                self._forget(name)
                return [*out, Lost(name)]
            except self.ray.exceptions.RayError as err:  # the task itself broke (not a unit)
                ended, state.running, state.units = state.units, None, {}
                failed = [
                    Failed(name, uid, n, error_line(err), retry=True) for uid, n in ended.items()
                ]
                return [*out, *failed]
            out.append(report)
            if isinstance(report, Done | Failed):
                state.units.pop(report.unit_id, None)
                if not state.units:
                    state.running = None  # the generator ends after its last report
                    return out

    def _manifest(self, settings: Mapping[str, Any]) -> Manifest:
        """The model files `settings` name, hashed once per set of models (not per worker)."""
        key = json.dumps([settings.get("model"), (settings.get("depth") or {}).get("model")])
        if key not in self._manifests:
            self._manifests[key] = manifest(settings)
        return self._manifests[key]

    def _forget(self, name: str) -> None:
        self.ray.kill(self._workers.pop(name).actor)
        if self._replacements > 0:
            self._replacements -= 1
            self._spawn()


def _fitting(resources: Mapping[str, float], cpus: float, gpus: float) -> int:
    """Workers the cluster's `resources` hold, each `cpus` CPUs and `gpus` GPUs (at least 1)."""
    if gpus:
        return max(1, int(resources.get("GPU", 0.0) // gpus))
    return max(1, int(resources.get("CPU", 1.0) // cpus))
