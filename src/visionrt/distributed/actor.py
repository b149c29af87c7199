"""The body of a worker actor: one group of units at a time as a Pipeline on this node, its
results streamed back as reports; the model files it names fetched from the driver's node when
this one lacks them."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Mapping
from typing import Any

from visionrt.distributed.files import Bundle, Manifest, bundle, localized
from visionrt.distributed.units import Batch, Done, Failed, Group, Report, Sample
from visionrt.distributed.worker import USER_ERRORS, KeptDetector, group_batches
from visionrt.hardware import normal_priority
from visionrt.plans import machine_fingerprint
from visionrt.telemetry.metrics import MetricsServer

BATCH_FRAMES = 32  # frames per Batch report, at most


class UnitRunner:
    """The body of a worker actor (RayExecutor wraps it with `ray.remote`; a ProcessExecutor's
    worker process runs it with `node` "local"): runs one group of units at a time as a fresh
    Pipeline over that group's sources."""

    def __init__(
        self,
        worker: str,
        cpus: float,
        metrics: tuple[str, str] | None = None,
        node: str | None = None,
    ) -> None:
        self.worker = worker
        if node is None:  # a Ray actor
            import ray

            self.resources = ray.get_runtime_context().get_assigned_resources()
            self.node = ray.get_runtime_context().get_node_id()
        else:
            self.resources, self.node = {"CPU": cpus}, node
        # Ray reserves CPUs but pins no threads: size the runtimes to the reservation.
        self.threads = max(1, int(self.resources.get("CPU", cpus)))
        self.metrics: MetricsServer | None = None
        self.metrics_at = ""
        self.pipeline: Any = None  # the group's Pipeline while it runs (`stop` ends it)
        self._group: tuple[tuple[int, int], ...] = ()  # the running group's `group_key`
        self._stop_asked = False  # before its Pipeline was built: it stops once it is
        self._lock = threading.Lock()
        self.kept = KeptDetector()  # the last group's detector, for the next one
        if metrics is not None:  # (host, token): this worker's Prometheus endpoint
            host, token = metrics
            info = {"worker": worker, "node": self.node}
            self.metrics = MetricsServer(0, host, info, token).start()
            # Prometheus reaches a wildcard-bound worker at its node's address.
            reach = ray.util.get_node_ip_address() if host in ("0.0.0.0", "::") else host
            reach = f"[{reach}]" if ":" in reach else reach
            self.metrics_at = f"{reach}:{self.metrics.port}"

    def describe(self) -> dict[str, Any]:
        """Where this worker runs and with what: its node, its machine's fingerprint (its plan
        group), `pid` (to kill it in a test) and memory."""
        import psutil

        return {
            "worker": self.worker,
            "node": self.node,
            "pid": os.getpid(),
            "threads": self.threads,
            "resources": dict(self.resources),
            "fingerprint": machine_fingerprint(),
            "metrics": self.metrics_at,
            "rss_mb": round(psutil.Process().memory_info().rss / 2**20, 1),
        }

    def run_group(
        self, units: Group, run: Mapping[str, Any], files: Manifest, driver: str
    ) -> Iterator[Report]:
        """Batch reports of the units' frames (each unit's in order) with the configuration
        `run`, then Done for each unit, or Failed for each on an error (a unit whose source
        alone cannot be opened fails at once; the others run on). The model `files` it names
        are read here when this node has them, else fetched from the `driver`'s node."""
        # Ray starts its workers at niceness 15 (a cluster's own Ray too; the embedded one at
        # 0): the stages this thread starts run at 0 where allowed, as in a plain run.
        normal_priority()
        running = {unit.unit_id: unit.attempt for unit in units}
        with self._lock:
            self._group, self._stop_asked = group_key(running), False
        summaries: dict[int, dict[str, Any]] = {}
        failed: dict[int, str] = {}  # sources of the group that could not be opened
        samples: list[dict[str, Any]] = []  # telemetry lines, from the sampler's thread

        def sampled() -> Iterator[Report]:
            while samples:
                yield Sample(self.worker, samples.pop(0))

        def fail_opened() -> Iterator[Report]:
            for unit_id in list(failed):
                error = failed.pop(unit_id)
                attempt = running.pop(unit_id)
                yield Failed(self.worker, unit_id, attempt, error, retry=False, own=True)

        try:
            run = localized(run, files, lambda: fetch(driver, files))
            batches = group_batches(
                units,
                run,
                self.threads,
                BATCH_FRAMES,
                summaries=summaries,
                on_pipeline=self._follow,
                failed=failed,
                on_sample=samples.append,  # list.append: one step, safe across threads
                kept=self.kept,
            )
            for unit_id, frames, checkpoint in batches:
                yield from fail_opened()
                yield from sampled()
                yield Batch(self.worker, unit_id, running[unit_id], frames, checkpoint)
            yield from fail_opened()
            yield from sampled()
        except USER_ERRORS as err:
            for unit_id, attempt in running.items():
                yield Failed(self.worker, unit_id, attempt, str(err), retry=False)
            return
        except Exception as err:
            for unit_id, attempt in running.items():
                yield Failed(self.worker, unit_id, attempt, error_line(err), retry=True)
            return
        finally:
            self.pipeline = None
        worker = self.describe()
        for unit_id, attempt in running.items():
            summary = {**summaries.get(unit_id, {}), "worker": worker}
            yield Done(self.worker, unit_id, attempt, summary)

    def stop(self, key: tuple[tuple[int, int], ...]) -> None:
        """End the running group early when it is the group `key` names (the coordinator
        regroups live streams; a stop that comes late must not end the next group): reading
        stops, frames read are finished, and each unit reports Done."""
        with self._lock:
            if key != self._group:
                return
            self._stop_asked = True
            if self.pipeline is not None:
                self.pipeline.stop()

    def _follow(self, pipeline: Any) -> None:
        """Keep the group's Pipeline (`stop`); the worker's metrics count its frames too
        (counters add up across groups)."""
        with self._lock:
            self.pipeline = pipeline
            if self._stop_asked:
                pipeline.stop()
        if self.metrics is not None:
            self.metrics.follow(pipeline)
            pipeline.telemetry.add_listener(self.metrics)


def group_key(units: Mapping[int, int]) -> tuple[tuple[int, int], ...]:
    """A group's name across driver and actor: its (unit id, attempt) pairs, sorted."""
    return tuple(sorted(units.items()))


def fetch(node: str, files: Manifest) -> Bundle:
    """The model files' bytes, read on `node` (the driver's) by a task placed there."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    read = ray.remote(bundle).options(
        num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)
    )
    read_files: dict[str, bytes] = ray.get(read.remote(files))
    return dict(read_files)


def error_line(err: BaseException) -> str:
    return f"{type(err).__name__}: {err}"
