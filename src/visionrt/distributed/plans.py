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
        self._tell: Callable[[str], None] | None = None

    def settings_for(self, worker: str, info: Mapping[str, Any]) -> dict[str, Any]:
        """What `worker` (`info`: its `fingerprint` and `node`) runs."""
        fingerprint = dict(info.get("fingerprint") or {})
        key = fingerprint_key(fingerprint)
        with self._lock:
            group = self._groups.get(key)
            new = group is None
            if group is None:
                settings, note = self._resolve(fingerprint)
                group = self._groups[key] = PlanGroup(fingerprint, settings, note)
            group.workers.add(worker)
            group.nodes.add(str(info.get("node", "")))
            tell, joined = self._tell, group.to_json()
        if new and tell is not None:  # a kind of machine that joined the running cluster
            for line in group_lines(key, joined):
                tell(line)
        return group.settings

    def announce(self, tell: Callable[[str], None]) -> None:
        """Say which plan each kind of machine runs: the kinds there now, then each kind whose
        first worker joins later, as it joins (a node slower to join than the run's start)."""
        with self._lock:
            self._tell = tell
            groups = {key: group.to_json() for key, group in sorted(self._groups.items())}
        for key, group in groups.items():
            for line in group_lines(key, group):
                tell(line)

    def report(self) -> dict[str, Any]:
        """summary.json `cluster.plan_groups`: per fingerprint key, its machine and plan."""
        with self._lock:
            return {key: group.to_json() for key, group in sorted(self._groups.items())}


def group_lines(key: str, group: Mapping[str, Any]) -> list[str]:
    """The lines saying what a plan group (`report()`'s entry) runs."""
    lines = [f"plan group {key} ({len(group['workers'])} worker(s), {group['cpu']}):"]
    plan = str(group["plan"]).splitlines() or ["no plan: the configuration as given"]
    return lines + [f"  {line}" for line in plan]
