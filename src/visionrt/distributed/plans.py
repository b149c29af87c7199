"""Plan groups: a cluster's workers grouped by their machine's fingerprint (CPU, its features,
core count, runtime versions), each group running the plan tuned for that machine — a plan
tuned on the driver's machine is not its BF16-less neighbour's."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from visionrt.plans import fingerprint_key

# fingerprint → (the worker settings for machines like it, the lines saying which plan and why)
Resolve = Callable[[dict[str, Any]], tuple[dict[str, Any], str]]


@dataclass
class PlanGroup:
    """Workers whose machines share a fingerprint, and what they run."""

    fingerprint: dict[str, Any]
    settings: dict[str, Any]
    note: str
    workers: set[str] = field(default_factory=set)
    nodes: set[str] = field(default_factory=set)

    def to_json(self) -> dict[str, Any]:
        fp = self.fingerprint
        return {
            "cpu": fp.get("cpu", ""),
            "cpus": fp.get("cpus", 0),
            "features": fp.get("features", []),
            "plan": self.note,
            "model": self.settings.get("model", ""),
            "backend": self.settings.get("backend", ""),
            "workers": sorted(self.workers),
            "nodes": sorted(self.nodes),
        }


class GroupPlans:
    """The settings each worker runs, by its machine's fingerprint: `resolve` (the driver's
    plan resolution, as `visionrt run` does it, for that fingerprint) is asked once per
    group. `settings_for` is thread-safe (executors may ask from their own threads)."""

    def __init__(self, resolve: Resolve) -> None:
        self._resolve = resolve
        self._groups: dict[str, PlanGroup] = {}
        self._lock = threading.Lock()

    def settings_for(self, worker: str, info: Mapping[str, Any]) -> dict[str, Any]:
        """What `worker` (`info`: its `fingerprint` and `node`) runs."""
        fingerprint = dict(info.get("fingerprint") or {})
        key = fingerprint_key(fingerprint)
        with self._lock:
            group = self._groups.get(key)
            if group is None:
                settings, note = self._resolve(fingerprint)
                group = self._groups[key] = PlanGroup(fingerprint, settings, note)
            group.workers.add(worker)
            group.nodes.add(str(info.get("node", "")))
            return group.settings

    def report(self) -> dict[str, Any]:
        """summary.json `cluster.plan_groups`: per fingerprint key, its machine and plan."""
        with self._lock:
            return {key: group.to_json() for key, group in sorted(self._groups.items())}
