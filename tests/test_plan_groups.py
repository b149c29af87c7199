"""A cluster's plan groups (distributed/plans): each kind of machine's plan resolved once, and
said at the start and, for a kind whose first worker joins later, as it joins."""

from __future__ import annotations

from typing import Any

from visionrt.distributed.plans import GroupPlans
from visionrt.plans import fingerprint_key


def _kind(cpu: str) -> dict[str, Any]:
    return {"cpu": cpu, "cpus": 2, "features": ["avx512f"]}


def test_each_kind_is_said_once_at_the_start_or_as_its_first_worker_joins() -> None:
    resolved: list[str] = []

    def resolve(fingerprint: dict[str, Any]) -> tuple[dict[str, Any], str]:
        resolved.append(fingerprint["cpu"])
        return {"model": f"{fingerprint['cpu']}.xml"}, f"plan for {fingerprint['cpu']}"

    plans = GroupPlans(resolve)
    here, late = _kind("here"), _kind("late")
    plans.settings_for("w1", {"fingerprint": here, "node": "a"})
    said: list[str] = []
    plans.announce(said.append)
    assert said == [f"plan group {fingerprint_key(here)} (1 worker(s), here):", "  plan for here"]
    said.clear()
    plans.settings_for("w2", {"fingerprint": here, "node": "a"})  # a kind already said
    assert said == []
    assert plans.settings_for("w3", {"fingerprint": late, "node": "b"}) == {"model": "late.xml"}
    assert said == [f"plan group {fingerprint_key(late)} (1 worker(s), late):", "  plan for late"]
    assert resolved == ["here", "late"]
    assert plans.report()[fingerprint_key(here)]["workers"] == ["w1", "w2"]
