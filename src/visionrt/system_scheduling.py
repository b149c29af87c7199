"""The doctor's checks on where inference threads run: thread variables against the usable
CPUs, SMT siblings, interrupt affinity, real-time scheduling, and a core split for cameras."""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass

from visionrt.system_probe import (
    INFO,
    OK,
    WARN,
    Finding,
    Probe,
    format_cpulist,
    format_cpumask,
    parse_cpulist,
    parse_cpumask,
)

# Who reads each variable. OpenVINO reads none: its TBB pool is sized by INFERENCE_NUM_THREADS
# (what --threads sets). ONNX Runtime has no OpenMP build any more, so OMP_NUM_THREADS does not
# reach it; it reads its own ORT_* pair when no count is set in code (microsoft/onnxruntime#29688)
# and refuses to create a session when they are not whole numbers.
THREAD_VARIABLES = {
    "OMP_NUM_THREADS": "PyTorch, OpenMP libraries",
    "MKL_NUM_THREADS": "MKL; PyTorch takes it over OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS": "NumPy's OpenBLAS, not inference",
    "ORT_INTRA_OP_NUM_THREADS": "ONNX Runtime when --threads is 0",
    "ORT_INTER_OP_NUM_THREADS": "ONNX Runtime's parallel executor",
}
# The variables that size an inference pool: different values give each runtime a different
# pool. OPENBLAS_NUM_THREADS=1 next to OMP_NUM_THREADS=4 is a sound choice, not a mismatch.
POOL_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "ORT_INTRA_OP_NUM_THREADS")
THREADS_FLAG = (
    "visionrt --threads N sets the inference runtime's own pool (ONNX Runtime"
    " intra_op_num_threads, OpenVINO INFERENCE_NUM_THREADS, torch.set_num_threads), which wins"
    " over these variables; 0 (the default) leaves each runtime its own choice"
)
# Network and USB controllers: the IRQs that carry camera frames (RTSP, USB/UVC).
USB_IRQ = re.compile(r"xhci|ehci|uhci|ohci|uvc", re.IGNORECASE)


def _parse_count(value: str) -> int | None:
    first = value.split(",")[0].strip()  # OpenMP allows one count per nesting level: "4,2"
    return int(first) if first.isdigit() else None


def _variable_finding(variable: str, raw: str, usable: int) -> Finding:
    count, ort = _parse_count(raw), variable.startswith("ORT_")
    value = f"{raw} ({THREAD_VARIABLES[variable]})"
    if count is None or (count == 0 and not ort):
        effect = "ONNX Runtime refuses to create a session" if ort else "runtimes ignore it"
        fix = f"expected a whole number {'>= 0' if ort else '> 0'}: {effect}; unset it"
        return Finding("threads", variable, value, WARN, fix)
    if count > usable:
        fix = (
            f"{count} threads on {usable} usable CPUs oversubscribe them (threads wait on each"
            f" other): export {variable}={usable}, or unset it and pass --threads {usable}"
        )
        return Finding("threads", variable, value, WARN, fix)
    return Finding("threads", variable, value)


def _threads(probe: Probe) -> list[Finding]:
    usable, quota = probe.usable_count(), probe.cpu_quota()
    where = f"{len(probe.usable())} in the affinity" + (
        f", cgroup quota {quota:g}" if quota else ""
    )
    present = {name: probe.environ[name] for name in THREAD_VARIABLES if name in probe.environ}
    found = [_variable_finding(name, raw, usable) for name, raw in present.items()]
    shown = ", ".join(f"{name}={raw}" for name, raw in present.items()) or "none set"
    value = f"{shown}; {usable} usable CPUs ({where})"
    counts = {
        name: count
        for name in POOL_VARIABLES
        if name in present and (count := _parse_count(present[name]))
    }
    if len(set(counts.values())) > 1:
        fix = (
            "inference pools disagree: PyTorch takes MKL_NUM_THREADS over OMP_NUM_THREADS, ONNX"
            " Runtime reads only ORT_INTRA_OP_NUM_THREADS; give them one value"
            f" (<= {usable}) or unset them and pass --threads"
        )
        found.append(Finding("threads", "thread variables", value, WARN, fix))
    elif not present:
        fix = (
            "each runtime sizes its pool from the cores it detects (a cgroup quota may go"
            f" unseen); {THREADS_FLAG}"
        )
        found.append(Finding("threads", "thread variables", value, INFO, fix))
    else:
        found.append(Finding("threads", "thread variables", value))
    return found


def smt_finding(probe: Probe, flags: set[str]) -> Finding:
    """SMT from the siblings each CPU lists; a guest is told what the hypervisor shows it."""
    if not any(probe.topology().values()):
        return Finding("cpu", "SMT", "unknown (no thread_siblings_list in /sys)", INFO)
    cores, usable = probe.cores(), set(probe.usable())
    logical, width = len(probe.topology()), max(len(core) for core in cores)
    usable_cores = [core for core in cores if usable & set(core)]
    if width > 1 and len(usable_cores) == 1 and len(usable) > 1:
        value = f"on: CPUs {format_cpulist(usable)} are {len(usable)} threads of one physical core"
        fix = (
            "a second inference thread on the same core adds little: compare `visionrt bench"
            " --variant onnxruntime+threads=1 --variant onnxruntime+threads=2`; --threads 1"
            " leaves the sibling to decode"
        )
        return Finding("cpu", "SMT", value, INFO, fix)
    if width > 1:
        value = f"on: {len(cores)} cores x {width} threads ({logical} logical CPUs)"
        fix = (
            f"inference threads = usable physical cores ({len(usable_cores)}), not logical CPUs:"
            " siblings share one core's vector units; leave them to decode"
        )
        return Finding("cpu", "SMT", value, INFO, fix)
    control = probe.read("sys/devices/system/cpu/smt/control") or "unknown"
    if "hypervisor" in flags:
        value = f"not visible: each of {logical} vCPUs reports its own core (control {control})"
        fix = (
            "a guest cannot see whether its vCPUs are hyperthreads of one host core (cloud vCPUs"
            " often are): check the instance type, or bench +threads=1 against +threads=2; if"
            " two threads barely beat one, they likely share a core"
        )
        return Finding("cpu", "SMT", value, INFO, fix)
    return Finding("cpu", "SMT", f"off: {logical} cores, 1 thread each (control {control})")


@dataclass(frozen=True, slots=True)
class CoreSplit:
    """A starting split of the usable cores for a multi-camera run: each core a tuple of its
    logical CPUs (SMT siblings stay together); the first `decode_cores` go to decode."""

    cores: tuple[tuple[int, ...], ...]
    decode_cores: int

    @property
    def decode(self) -> tuple[int, ...]:
        return tuple(cpu for core in self.cores[: self.decode_cores] for cpu in core)

    @property
    def inference(self) -> tuple[int, ...]:
        return tuple(cpu for core in self.cores[self.decode_cores :] for cpu in core)

    @property
    def threads(self) -> int:
        """Inference threads: one per inference core, since SMT siblings add little."""
        return len(self.cores) - self.decode_cores


def split_cores(probe: Probe) -> CoreSplit:
    usable = set(probe.usable())
    cores = [kept for core in probe.cores() if (kept := tuple(c for c in core if c in usable))]
    cores = cores or [(cpu,) for cpu in sorted(usable)]
    nodes = [parse_cpulist(probe.read(str(path.relative_to(probe.root) / "cpulist")))
             for path in probe.glob("sys/devices/system/node/node[0-9]*")]  # fmt: skip
    if len(nodes) > 1:  # one pipeline per NUMA node: keep the split on the fullest
        fullest = max(nodes, key=lambda node: sum(set(core) <= node for core in cores))
        cores = [core for core in cores if set(core) <= fullest] or cores
    quota = probe.cpu_quota()
    while quota and len(cores) > 1 and sum(map(len, cores)) > max(1, math.floor(quota)):
        cores.pop()  # a quota caps CPU time; pinning to that many CPUs keeps caches warm
    # Decode takes the first cores (CPU 0's side, where housekeeping and most IRQs land); with
    # two cores or fewer a decode core would take half of inference or more.
    decode_cores = max(1, len(cores) // 4) if len(cores) > 2 else 0
    return CoreSplit(tuple(cores), decode_cores)


def _pinning(probe: Probe) -> Finding:
    split = split_cores(probe)
    every = format_cpulist(split.inference + split.decode)
    move = "taskset -a -cp {cpus} <pid> for each decode worker (pgrep -P <visionrt pid>)"
    if len(split.cores) == 1:
        value = f"1 core (CPUs {every}): nothing to split"
        fix = (
            "--threads 1; decode and preprocessing share the core at niceness +10"
            " (pipeline.helper_nice), so inference goes first; for more cameras add cores"
        )
    elif len(split.cores) == 2:
        first, second = (format_cpulist(core) for core in split.cores)
        value = f"2 cores (CPUs {every}): a decode core would halve inference"
        fix = (
            "one camera: --threads 2, decode unpinned at niceness +10 fills inference's gaps;"
            f" several: also try `taskset -c {first} visionrt run … --threads 1` and "
            + move.format(cpus=second)
            + ", keep what `visionrt profile` shows faster"
        )
    else:
        inference, decode = format_cpulist(split.inference), format_cpulist(split.decode)
        value = (
            f"{len(split.cores)} cores: inference --threads {split.threads} on CPUs {inference};"
            f" decode (one worker process per camera, source.workers=process) on CPUs {decode}"
        )
        fix = (
            f"taskset -c {inference} visionrt run … --threads {split.threads}, then "
            + move.format(cpus=decode)
            + "; a starting split (a quarter for decode): move a core to the side"
            " `visionrt profile` names as the bottleneck"
        )
    return Finding("scheduling", "core pinning", value, INFO, fix)


def _device_irqs(probe: Probe) -> set[int]:
    """IRQs of network interfaces and video devices found through /sys (MSI vectors or a legacy
    line, on the device or the bus device above it)."""
    found: set[int] = set()
    devices = [p for p in probe.glob("sys/class/net/*") if p.name != "lo"]
    for path in [*devices, *probe.glob("sys/class/video4linux/*")]:
        device = (path / "device").resolve()
        for _ in range(8):  # virtio and USB put the vectors on a parent device
            if device == probe.root or not device.is_relative_to(probe.root):
                break
            try:
                vectors = [int(p.name) for p in (device / "msi_irqs").iterdir() if p.name.isdigit()]
            except OSError:
                vectors = []
            legacy = probe.read(str(device.relative_to(probe.root) / "irq")) or ""
            vectors += [int(legacy)] if legacy.isdigit() and int(legacy) else []
            if vectors:
                found.update(vectors)
                break
            device = device.parent
    return found


def _interrupts(probe: Probe) -> tuple[list[int], dict[int, tuple[list[int], str]]] | None:
    """/proc/interrupts: the CPU columns and, per numbered IRQ, its counts and description."""
    text = probe.read("proc/interrupts")
    if not text:
        return None
    lines = text.splitlines()
    columns = [int(name[3:]) for name in lines[0].split() if name[3:].isdigit()]
    rows: dict[int, tuple[list[int], str]] = {}
    for line in lines[1:]:
        label, _, rest = line.partition(":")
        fields = rest.split()
        if label.strip().isdigit():
            counts = [int(f) for f in fields[: len(columns)] if f.isdigit()]
            rows[int(label)] = (counts, " ".join(fields[len(counts) :]))
    return columns, rows


def _default_affinity(probe: Probe, usable: set[int], spare: set[int]) -> Finding:
    default = parse_cpumask(probe.read("proc/irq/default_smp_affinity"))
    if not default:
        return Finding("irq", "IRQ default affinity", "unknown (not readable)", INFO)
    value = f"CPUs {format_cpulist(default)}"
    if spare and default & usable:
        fix = (
            "new IRQs may land on this process's CPUs:"
            f" echo {format_cpumask(spare)} | sudo tee /proc/irq/default_smp_affinity"
        )
        return Finding("irq", "IRQ default affinity", value, INFO, fix)
    return Finding("irq", "IRQ default affinity", value)


def _steer(numbers: str, cpus: str, banned: str) -> str:
    return (
        f"for n in {numbers}; do echo {cpus} | sudo tee /proc/irq/$n/smp_affinity_list; done"
        f" (with irqbalance: IRQBALANCE_BANNED_CPULIST={banned})"
    )


def _irqs(probe: Probe) -> list[Finding]:
    usable, every = set(probe.usable()), set(probe.cpus())
    spare = every - usable  # CPUs this process is kept off: where interrupts could go
    found = [_default_affinity(probe, usable, spare)]
    table = _interrupts(probe)
    if table is None:
        unknown = "unknown (/proc/interrupts not readable)"
        return [*found, Finding("irq", "device IRQs", unknown, INFO)]
    columns, rows = table
    names = sorted(p.name for p in probe.glob("sys/class/net/*") if p.name != "lo")
    named = re.compile(rf"\b({'|'.join(map(re.escape, names))})\b") if names else None
    relevant = _device_irqs(probe)
    for irq, (_, description) in rows.items():
        if USB_IRQ.search(description) or (named and named.search(description)):
            relevant.add(irq)
    relevant &= set(rows)
    if not relevant:
        return [*found, Finding("irq", "device IRQs", "no network or USB IRQs found", INFO)]
    landed: dict[int, int] = {}
    targets: set[int] = set()
    for irq in relevant:
        counts = rows[irq][0]
        for cpu, count in zip(columns, counts, strict=False):
            landed[cpu] = landed.get(cpu, 0) + count
        routed = probe.read(f"proc/irq/{irq}/effective_affinity_list")
        routed = routed or probe.read(f"proc/irq/{irq}/smp_affinity_list")
        # unreadable routing: where they have landed so far is the next best evidence
        hit = {cpu for cpu, count in zip(columns, counts, strict=False) if count}
        targets |= parse_cpulist(routed) or hit
    labels = sorted({(rows[irq][1].split() or [str(irq)])[-1] for irq in relevant})
    shown = ", ".join(labels[:3]) + (", …" if len(labels) > 3 else "")
    so_far = ", ".join(f"CPU{cpu} {count:,}" for cpu, count in sorted(landed.items()) if count)
    value = (
        f"{len(relevant)} network/USB IRQs ({shown}) routed to CPUs {format_cpulist(targets)}"
        f" ({so_far or 'none yet'}); inference may run on CPUs {format_cpulist(usable)}"
    )
    numbers = " ".join(str(irq) for irq in sorted(relevant))
    if not targets & usable:
        return [*found, Finding("irq", "device IRQs", value)]
    if spare:  # the process was pinned, yet its CPUs still take the interrupts
        fix = f"steer them off: {_steer(numbers, format_cpulist(spare), format_cpulist(usable))}"
        return [*found, Finding("irq", "device IRQs", value, WARN, fix)]
    split = split_cores(probe)
    if split.decode:
        decode, inference = format_cpulist(split.decode), format_cpulist(split.inference)
        fix = f"once inference is pinned (core pinning): {_steer(numbers, decode, inference)}"
    else:
        fix = (
            f"{len(split.cores)} core{'s' if len(split.cores) > 1 else ''}: none spare to move them"
            " to; they take a little time from inference"
        )
    return [*found, Finding("irq", "device IRQs", value, INFO, fix)]


def _realtime(probe: Probe) -> Finding:
    allowed, capable = probe.fifo_trial(), probe.cap_sys_nice()
    soft, hard = probe.rtprio or (None, None)

    def limit(number: int | None) -> str:
        return "unknown" if number is None else "unlimited" if number < 0 else str(number)

    top = os.sched_get_priority_max(os.SCHED_FIFO) if hasattr(os, "SCHED_FIFO") else 99
    facts = (
        f"CAP_SYS_NICE {'unknown' if capable is None else 'yes' if capable else 'no'};"
        f" RLIMIT_RTPRIO soft {limit(soft)}, hard {limit(hard)}"
    )
    caveat = (
        "keep it below 50 (threaded IRQ handlers) and leave a core free: spinning runtime"
        " workers at FIFO starve the rest, niceness (pipeline.helper_nice) no longer ranks them"
    )
    if allowed:
        value = f"SCHED_FIFO allowed up to priority {top} ({facts}): `chrt -f 10 visionrt run …`"
        return Finding("scheduling", "real-time scheduling", value, OK)
    granted = bool(capable) or (soft is not None and soft != 0)
    if allowed is False and granted:
        value = f"SCHED_FIFO refused although allowed ({facts})"
        fix = (
            "the kernel refused it all the same: a cgroup with no real-time budget (RT group"
            " scheduling, cpu.rt_runtime_us 0) or a security policy; give it one, then"
            " `chrt -f 10 visionrt run …`; " + caveat
        )
        return Finding("scheduling", "real-time scheduling", value, INFO, fix)
    state = "not allowed" if allowed is False else "untested (no sched_setscheduler)"
    if hard:  # an unprivileged process may raise its soft limit up to the hard one
        raise_limit = f"`ulimit -r {20 if hard < 0 else min(hard, 20)}`, or"
    else:
        raise_limit = "(the hard limit is 0, so ulimit -r cannot help)"
    fix = (
        "to keep inference ahead of other work (visionrt does not ask for it itself):"
        f" {raise_limit} '<user> - rtprio 20' in /etc/security/limits.conf (log in again),"
        " or CAP_SYS_NICE (docker --cap-add SYS_NICE); then `chrt -f 10 visionrt run …`; " + caveat
    )
    value = f"SCHED_FIFO {state} ({facts})"
    return Finding("scheduling", "real-time scheduling", value, INFO, fix)


def _scheduling(probe: Probe) -> list[Finding]:
    return [_realtime(probe), _pinning(probe)]


SCHEDULING_SECTIONS: dict[str, Callable[[Probe], list[Finding]]] = {
    "threads": _threads,
    "irq": _irqs,
    "scheduling": _scheduling,
}
