"""Which queued units idle workers start together: live streams spread over the workers by
cost, files grouped so that one Pipeline batches across them."""

from __future__ import annotations

import math
from collections import deque

from visionrt.distributed.units import Group, WorkUnit


def group_units(
    queue: deque[WorkUnit], idle: int, group: int
) -> tuple[list[Group], deque[WorkUnit]]:
    """What `idle` workers start now: every live stream, spread by cost (longest first
    onto the lightest worker); then files, `group` or fewer to a worker. Returns the groups and
    the units left in the queue."""
    if not idle or not queue:
        return [], queue
    live = [u for u in queue if u.live and not u.alone]
    loads: list[list[WorkUnit]] = [[] for _ in range(min(idle, len(live)))]
    for unit in sorted(live, key=lambda u: -u.cost):
        min(loads, key=lambda units: sum(u.cost for u in units)).append(unit)
    groups = [tuple(units) for units in loads]
    rest = deque(u for u in queue if not u.live or u.alone)
    while rest and len(groups) < idle:
        first = rest.popleft()
        if first.alone or first.live:
            groups.append((first,))
            continue
        size = min(group, math.ceil((len(rest) + 1) / (idle - len(groups))))
        units = [first]
        for unit in list(rest):
            if len(units) >= size:
                break
            # Two ranges of one file in a Pipeline would share its name (and outputs).
            if not (unit.alone or unit.live or any(u.name == unit.name for u in units)):
                rest.remove(unit)
                units.append(unit)
        groups.append(tuple(units))
    return groups, rest
