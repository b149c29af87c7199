"""What this machine's CPU can do, read once from /proc/cpuinfo, and the checks built on it; and
the calling thread's share of it (Linux threads have their own priority)."""

from __future__ import annotations

import functools
import os
import threading
from pathlib import Path

from visionrt.errors import BackendUnavailable

CPUINFO = Path("/proc/cpuinfo")
# Either gives native bf16 arithmetic; without them runtimes emulate it (torch, slower and less
# accurate) or refuse it (OpenVINO), so visionrt refuses it for every runtime alike.
BF16_FEATURES = frozenset({"avx512_bf16", "amx_bf16"})
# Flags to treat as absent ("avx512_bf16,amx_bf16"): makes this CPU stand in for one without
# them in tune, plans and benchmarks (the runtimes are told too where they would use them).
HIDE_VARIABLE = "VISIONRT_HIDE_CPU_FEATURES"


def hidden_features() -> frozenset[str]:
    """The flags `VISIONRT_HIDE_CPU_FEATURES` hides, lower-case."""
    raw = os.environ.get(HIDE_VARIABLE, "")
    return frozenset(f.strip().lower() for f in raw.split(",") if f.strip())


@functools.cache
def cpu_features() -> frozenset[str]:
    """The CPU's feature flags ('avx2', 'avx512_bf16', …) less those `VISIONRT_HIDE_CPU_FEATURES`
    hides, or an empty set when /proc/cpuinfo cannot be read (not Linux)."""
    try:
        with CPUINFO.open(encoding="utf-8") as handle:
            for line in handle:
                key, _, value = line.partition(":")
                if key.strip() == "flags":
                    return frozenset(value.split()) - hidden_features()
    except OSError:
        pass
    return frozenset()


def cpu_has_bf16() -> bool:
    """True when the CPU has bf16 instructions (AVX512_BF16 or AMX-BF16)."""
    return bool(BF16_FEATURES & cpu_features())


def require_cpu_bf16(runtime: str) -> None:
    """Refuse bf16 on a CPU without bf16 instructions, with the same message for every runtime."""
    if not cpu_has_bf16():
        raise BackendUnavailable(
            f"{runtime} bf16 on cpu needs BF16 instructions (AVX512_BF16 or AMX); this CPU has"
            " none: use fp32, or int8 via `visionrt export`"
        )


@functools.cache
def cpu_model() -> str:
    """The CPU's name with its family and model numbers ('AMD EPYC (family 25 model 17)'): some
    virtual machines report only the vendor's brand, the numbers still tell the kinds apart.
    "" when /proc/cpuinfo cannot be read."""
    fields: dict[str, str] = {}
    try:
        with CPUINFO.open(encoding="utf-8") as handle:
            for line in handle:
                key, sep, value = line.partition(":")
                if not sep:
                    break  # the end of the first processor's block
                fields.setdefault(key.strip(), value.strip())
    except OSError:
        return ""
    name = fields.get("model name", "")
    if "cpu family" in fields:
        name += f" (family {fields['cpu family']} model {fields.get('model', '?')})"
    return name.strip()


def lower_priority(nice: int) -> None:
    """Raise the calling thread's niceness by `nice` (at most 19); the threads it starts inherit
    it. Not Linux, or not allowed: it runs at normal priority."""
    try:
        current = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), min(19, current + nice))
    except (AttributeError, OSError):
        pass


def normal_priority() -> bool:
    """Bring the calling thread (and the threads it starts) back to niceness 0 where it runs
    higher and that is allowed (root, CAP_SYS_NICE or RLIMIT_NICE): a Ray worker starts at 15,
    where the live audit's SCHED_IDLE lane weighs 8 % beside each stage, not 0.3 %. True when
    the thread runs at niceness 0 after."""
    try:
        tid = threading.get_native_id()
        if os.getpriority(os.PRIO_PROCESS, tid) > 0:
            os.setpriority(os.PRIO_PROCESS, tid, 0)
        return os.getpriority(os.PRIO_PROCESS, tid) == 0
    except (AttributeError, OSError):
        return False


def wake_idle_threads() -> int:
    """Bring this process's SCHED_IDLE threads (the live audit's lane and the runtime threads
    it started) back to the normal policy, where that is allowed: a run that ends waits for
    the lane's last call, which beside busy cores would get ~0.3 % of one (the kernel's weight
    3 against 1024) and could outlast the process — an exit with a runtime's threads inside a
    call aborts (std::terminate). Linux; elsewhere nothing. How many it woke."""
    woken = 0
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return 0
    for task in tasks:
        try:
            tid = int(task)
            if os.sched_getscheduler(tid) == os.SCHED_IDLE:
                os.sched_setscheduler(tid, os.SCHED_OTHER, os.sched_param(0))
                woken += 1
        except (AttributeError, OSError, ValueError):
            continue  # gone meanwhile, or not allowed
    return woken


def idle_priority() -> None:
    """Run the calling thread (and the threads it starts) only on cycles no other thread wants:
    Linux's SCHED_IDLE, which any user may choose, else niceness 19. Niceness is relative to the
    process's own: beside a busy thread of a process at niceness 15 (a Ray worker) a nice-19
    thread still gets 29 % of the core, a SCHED_IDLE one 8 % (the kernel's weights)."""
    tid = threading.get_native_id()
    try:
        os.sched_setscheduler(tid, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):
        lower_priority(19)
