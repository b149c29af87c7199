"""What the doctor's checks read the machine through: a `Probe` over /proc and /sys (a built
tree in tests), the `Finding` value they return, and CPU-list and topology helpers."""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

OK, INFO, WARN = "ok", "info", "warn"
CAP_SYS_NICE = 23  # bit in /proc/<pid>/status CapEff (linux/capability.h)


@dataclass(frozen=True, slots=True)
class Finding:
    """One line of the checklist: `section` groups it, `fix` says what to do when it warns."""

    section: str
    name: str
    value: str
    severity: str = OK
    fix: str = ""

    def to_json(self) -> dict[str, str]:
        return {k: getattr(self, k) for k in ("section", "name", "value", "severity", "fix")}


def parse_cpulist(text: str | None) -> set[int]:
    """`0-3,8,10-11` (the kernel's list format) as a set; empty when missing or malformed."""
    cpus: set[int] = set()
    for part in (text or "").replace("\n", ",").split(","):
        first, _, last = part.strip().partition("-")
        if not first.isdigit() or (last and not last.isdigit()):
            continue
        cpus.update(range(int(first), int(last or first) + 1))
    return cpus


def format_cpulist(cpus: Iterable[int]) -> str:
    """The inverse of `parse_cpulist`: runs collapsed to `a-b`, as taskset -c takes them."""
    ordered, runs = sorted(set(cpus)), []
    start = previous = None
    for cpu in [*ordered, None]:
        if cpu is not None and previous is not None and cpu == previous + 1:
            previous = cpu
            continue
        if start is not None:
            runs.append(str(start) if start == previous else f"{start}-{previous}")
        start = previous = cpu
    return ",".join(runs)


def parse_cpumask(text: str | None) -> set[int]:
    """A hex mask in comma-separated 32-bit groups (`ff,00000003`), as /proc/irq/* writes it."""
    digits = (text or "").replace(",", "").strip()
    if not re.fullmatch(r"[0-9a-fA-F]+", digits):
        return set()
    value = int(digits, 16)
    return {bit for bit in range(value.bit_length()) if value >> bit & 1}


def format_cpumask(cpus: Iterable[int]) -> str:
    value = sum(1 << cpu for cpu in set(cpus))
    text = f"{value:x}"
    groups = [text[max(0, end - 8) : end] for end in range(len(text), 0, -8)]
    return ",".join(reversed(groups))


def try_fifo() -> bool | None:
    """Whether this process may put a thread in SCHED_FIFO: tried on a thread of its own that
    returns to SCHED_OTHER at once and ends, so no thread that does work changes policy (Linux
    applies the policy per thread). None where the OS has no such call."""
    if not hasattr(os, "sched_setscheduler"):
        return None
    outcome: list[bool] = []

    def attempt() -> None:
        lowest = os.sched_param(os.sched_get_priority_min(os.SCHED_FIFO))
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, lowest)
        except PermissionError:
            outcome.append(False)
            return
        except OSError:
            return
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
        outcome.append(True)

    trial = threading.Thread(target=attempt, name="visionrt-fifo-trial", daemon=True)
    trial.start()
    trial.join()
    return outcome[0] if outcome else None


def _rtprio_limit() -> tuple[int, int] | None:
    try:
        import resource

        return resource.getrlimit(resource.RLIMIT_RTPRIO)
    except (ImportError, AttributeError, OSError):
        return None


def _ratio(limit: str, period: str) -> float | None:
    # "max" (v2) and -1 (v1) mean no quota; both fail isdigit
    if limit.isdigit() and period.isdigit() and int(period):
        return int(limit) / int(period)
    return None


class Probe:
    """Reads the machine under `root` (a fake tree in tests), with the environment, the
    process's affinity, its RLIMIT_RTPRIO (soft, hard; -1 unlimited) and a SCHED_FIFO trial
    given explicitly."""

    def __init__(
        self,
        root: Path = Path("/"),
        environ: Mapping[str, str] | None = None,
        affinity: set[int] | None = None,
        rtprio: tuple[int, int] | None = None,
        fifo_trial: Callable[[], bool | None] = try_fifo,
    ) -> None:
        self.root = root
        self.environ = dict(os.environ if environ is None else environ)
        if affinity is None:
            affinity = set(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else set()
        self.affinity = affinity
        self.rtprio = rtprio if rtprio is not None else _rtprio_limit()
        self.fifo_trial = fifo_trial

    def read(self, relative: str) -> str | None:
        try:
            return (self.root / relative).read_text(encoding="utf-8", errors="replace").strip()
        except OSError:
            return None

    def glob(self, pattern: str) -> list[Path]:
        return sorted(self.root.glob(pattern))

    def topology(self) -> dict[int, frozenset[int]]:
        """Each logical CPU with its SMT siblings as the kernel lists them (empty: unreadable)."""
        found = {}
        for path in self.glob("sys/devices/system/cpu/cpu[0-9]*/topology"):
            cpu = int(path.parent.name[3:])
            siblings = self.read(str(path.relative_to(self.root) / "thread_siblings_list"))
            found[cpu] = frozenset(parse_cpulist(siblings))
        return found

    def cores(self) -> list[tuple[int, ...]]:
        """Logical CPUs grouped by the sibling list they report, one group per physical core,
        ordered by their first CPU; a CPU with no readable list is a core of its own."""
        groups: dict[frozenset[int], list[int]] = {}
        for cpu, siblings in sorted(self.topology().items()):
            groups.setdefault(siblings or frozenset({cpu}), []).append(cpu)
        return sorted(tuple(group) for group in groups.values())

    def cpus(self) -> list[int]:
        """Every logical CPU the machine shows (os.cpu_count when /sys has no topology)."""
        return sorted(self.topology()) or list(range(os.cpu_count() or 1))

    def usable(self) -> list[int]:
        """The CPUs this process may run on: its affinity within the machine's CPUs."""
        cpus = self.cpus()
        return sorted(self.affinity & set(cpus)) or sorted(self.affinity) or cpus

    def cpu_quota(self) -> float | None:
        """The tightest cgroup CPU quota over this process's cgroup and its parents, in CPUs
        (cgroup v2 cpu.max, v1 cpu.cfs_quota_us); None when there is none."""
        v2, v1 = [""], [""]  # the mount's own top, seen alone inside a container
        for line in (self.read("proc/self/cgroup") or "").splitlines():
            hierarchy, _, rest = line.partition(":")
            controllers, _, path = rest.partition(":")
            parts = [part for part in path.split("/") if part]
            nested = ["/".join(parts[:end]) + "/" for end in range(1, len(parts) + 1)]
            if hierarchy == "0" and not controllers:
                v2 += nested
            elif "cpu" in controllers.split(","):
                v1 += nested
        quotas = [self._quota_v2(f"sys/fs/cgroup/{prefix}") for prefix in v2]
        for mount in ("cpu", "cpu,cpuacct", "cpuacct,cpu"):
            quotas += [self._quota_v1(f"sys/fs/cgroup/{mount}/{prefix}") for prefix in v1]
        known = [quota for quota in quotas if quota is not None]
        return min(known) if known else None

    def _quota_v2(self, folder: str) -> float | None:
        limit, _, period = (self.read(folder + "cpu.max") or "").partition(" ")
        return _ratio(limit, period)

    def _quota_v1(self, folder: str) -> float | None:
        limit = self.read(folder + "cpu.cfs_quota_us") or ""
        return _ratio(limit, self.read(folder + "cpu.cfs_period_us") or "")

    def usable_count(self) -> int:
        """How many threads can run at once: the affinity, capped by a cgroup quota."""
        quota = self.cpu_quota()
        count = len(self.usable())
        return min(count, max(1, int(quota))) if quota else count

    def cap_sys_nice(self) -> bool | None:
        """Whether this process holds CAP_SYS_NICE (root normally does; a container may not)."""
        match = re.search(r"^CapEff:\s*([0-9a-fA-F]+)", self.read("proc/self/status") or "", re.M)
        return bool(int(match.group(1), 16) >> CAP_SYS_NICE & 1) if match else None
