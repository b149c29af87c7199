"""The contract of where a cluster run's units run (Ray actors, worker processes, threads): the
`Executor` the coordinator hands groups of units to and hears reports from."""

from __future__ import annotations

from typing import Any, Protocol

from visionrt.distributed.units import Group, Report


class Executor(Protocol):
    """Where units run (Ray actors, threads): workers come and go; `reports` says what they did.
    A worker runs one group of units at a time, in one Pipeline, and reports Done or Failed
    for each unit of it."""

    def workers(self) -> set[str]: ...

    def info(self, worker: str) -> dict[str, Any]: ...

    def start(self, worker: str, units: Group) -> None: ...

    def reports(self, timeout: float) -> list[Report]: ...

    def stop(self, worker: str) -> bool:
        """Ask `worker` to end its group now: frames read are finished, then each unit
        reports Done. False where it cannot (nothing is asked then)."""
        ...

    def close(self) -> None: ...
