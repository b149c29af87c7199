"""The doctor's scheduling checks (thread variables, SMT, IRQs, real-time, core pinning) on
built /proc and /sys trees, and the real `visionrt doctor --json` on this machine."""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from visionrt.system import INFO, OK, WARN, Finding, Probe, system_findings
from visionrt.system_probe import (
    format_cpulist,
    format_cpumask,
    parse_cpulist,
    parse_cpumask,
    try_fifo,
)
from visionrt.system_scheduling import split_cores

NEW_FINDINGS = {
    "SMT",
    "thread variables",
    "IRQ default affinity",
    "device IRQs",
    "real-time scheduling",
    "core pinning",
}


def _tree(root: Path, files: dict[str, str]) -> Path:
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def _cpus(siblings: list[str], flags: str = "avx2") -> dict[str, str]:
    """A machine whose CPU i lists `siblings[i]` as its SMT siblings."""
    files = {
        f"sys/devices/system/cpu/cpu{i}/topology/thread_siblings_list": text
        for i, text in enumerate(siblings)
    }
    return {"proc/cpuinfo": f"model name\t: Test\nflags\t\t: {flags}\n", **files}


def _findings(root: Path, **probe: object) -> dict[str, Finding]:
    options: dict[str, object] = {
        "environ": {},
        "rtprio": (0, 0),
        "fifo_trial": lambda: False,
        **probe,
    }
    found = system_findings(Probe(root, **options), gpus=False)  # type: ignore[arg-type]
    return {finding.name: finding for finding in found}


# -- CPU lists -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "cpus"),
    [("0-3,8,10-11", {0, 1, 2, 3, 8, 10, 11}), ("1", {1}), ("", set()), ("x-y", set())],
)
def test_cpulists_parse_and_format_back(text: str, cpus: set[int]) -> None:
    assert parse_cpulist(text) == cpus
    assert parse_cpulist(format_cpulist(cpus)) == cpus


def test_cpumasks_in_32_bit_groups() -> None:
    assert parse_cpumask("3") == {0, 1}
    assert parse_cpumask("00000001,00000003") == {0, 1, 32}
    assert parse_cpumask("garbage") == set()
    assert format_cpumask({0, 1, 32}) == "1,00000003"
    assert format_cpumask({2, 3}) == "c"


# -- thread variables ----------------------------------------------------------------------

FOUR_CPUS = _cpus(["0", "1", "2", "3"])


@pytest.mark.parametrize(
    ("environ", "warned", "summary"),
    [
        ({}, set(), INFO),
        ({"OMP_NUM_THREADS": "4"}, set(), OK),
        ({"OMP_NUM_THREADS": "8"}, {"OMP_NUM_THREADS"}, OK),
        ({"OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "4"}, {"thread variables"}, WARN),
        ({"OMP_NUM_THREADS": "4", "OPENBLAS_NUM_THREADS": "1"}, set(), OK),  # a sound choice
        ({"ORT_INTRA_OP_NUM_THREADS": "abc"}, {"ORT_INTRA_OP_NUM_THREADS"}, OK),
        ({"ORT_INTRA_OP_NUM_THREADS": "0"}, set(), OK),  # 0: ONNX Runtime's own default
        ({"OMP_NUM_THREADS": "0"}, {"OMP_NUM_THREADS"}, OK),
        (
            {"MKL_NUM_THREADS": "16", "OMP_NUM_THREADS": "16"},
            {"MKL_NUM_THREADS", "OMP_NUM_THREADS"},
            OK,
        ),
    ],
)
def test_thread_variables_against_the_usable_cpus(
    tmp_path: Path, environ: dict[str, str], warned: set[str], summary: str
) -> None:
    found = _findings(_tree(tmp_path, FOUR_CPUS), environ=environ, affinity={0, 1, 2, 3})
    threads = {name: f for name, f in found.items() if f.section == "threads"}
    assert set(threads) == {"thread variables", *environ}
    assert {name for name, f in threads.items() if f.severity == WARN} == warned
    assert threads["thread variables"].severity == summary
    assert "4 usable CPUs" in threads["thread variables"].value


def test_unset_variables_say_what_threads_does(tmp_path: Path) -> None:
    found = _findings(_tree(tmp_path, FOUR_CPUS), affinity={0, 1, 2, 3})
    assert found["thread variables"].value.startswith("none set")
    assert "--threads N" in found["thread variables"].fix
    assert "INFERENCE_NUM_THREADS" in found["thread variables"].fix


def test_oversubscription_counts_the_cgroup_quota_and_names_the_fix(tmp_path: Path) -> None:
    root = _tree(tmp_path, {**FOUR_CPUS, "sys/fs/cgroup/cpu.max": "200000 100000"})
    found = _findings(root, environ={"OMP_NUM_THREADS": "4"}, affinity={0, 1, 2, 3})
    assert found["OMP_NUM_THREADS"].severity == WARN
    assert "export OMP_NUM_THREADS=2" in found["OMP_NUM_THREADS"].fix
    assert "--threads 2" in found["OMP_NUM_THREADS"].fix
    assert "cgroup quota 2" in found["thread variables"].value


def test_the_quota_of_a_nested_cgroup_counts(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            **FOUR_CPUS,
            "proc/self/cgroup": "0::/app.slice/run.scope\n",
            "sys/fs/cgroup/app.slice/cpu.max": "300000 100000",
            "sys/fs/cgroup/app.slice/run.scope/cpu.max": "max 100000",
        },
    )
    assert Probe(root, environ={}, affinity={0, 1, 2, 3}).cpu_quota() == 3
    v1 = _tree(
        tmp_path / "v1",
        {
            "sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us": "150000",
            "sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us": "100000",
        },
    )
    assert Probe(v1, environ={}, affinity={0}).cpu_quota() == 1.5


# -- SMT -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("siblings", "flags", "affinity", "severity", "value", "fix"),
    [
        (["0-1", "0-1"], "avx2 hypervisor", {0, 1}, INFO, "threads of one physical core",
         "--threads 1"),
        (["0,2", "1,3", "0,2", "1,3"], "avx2", {0, 1, 2, 3}, INFO, "2 cores x 2 threads",
         "usable physical cores (2)"),
        (["0", "1"], "avx2 hypervisor", {0, 1}, INFO, "not visible", "instance type"),
        (["0", "1"], "avx2", {0, 1}, OK, "off: 2 cores", ""),
    ],
)  # fmt: skip
def test_smt_from_the_sibling_lists(
    tmp_path: Path,
    siblings: list[str],
    flags: str,
    affinity: set[int],
    severity: str,
    value: str,
    fix: str,
) -> None:
    smt = _findings(_tree(tmp_path, _cpus(siblings, flags)), affinity=affinity)["SMT"]
    assert smt.severity == severity
    assert value in smt.value
    assert fix in smt.fix


def test_smt_is_unknown_without_topology(tmp_path: Path) -> None:
    smt = _findings(_tree(tmp_path, {"proc/cpuinfo": "flags\t: avx2\n"}), affinity={0})["SMT"]
    assert (smt.severity, smt.value.split()[0]) == (INFO, "unknown")


# -- IRQs ----------------------------------------------------------------------------------

INTERRUPTS = """\
          CPU0     CPU1     CPU2     CPU3
  1:         9        0        0        0  IO-APIC  1-edge  i8042
 38:         0     3929        0        0  PCI-MSIX-0000:00:03.0  1-edge  virtio2-input.0
 40:         0        0      500        0  PCI-MSIX-0000:00:04.0  0-edge  eth1-TxRx-0
 41:         0        0        0      700  PCI-MSI-0000:00:14.0  0-edge  xhci_hcd
NMI:         0        0        0        0  Non-maskable interrupts
"""


def _irq_machine(root: Path, routed: str) -> Path:
    """Four CPUs; a virtio NIC (eth0) found only through /sys, a NIC named in its IRQ (eth1),
    and a USB controller; every device IRQ routed to `routed`."""
    return _tree(
        root,
        {
            **FOUR_CPUS,
            "proc/interrupts": INTERRUPTS,
            "proc/irq/default_smp_affinity": "f",
            # eth0's vectors sit on the PCI device above its virtio device
            "sys/class/net/eth0/device/virtio2/.keep": "",
            "sys/class/net/eth0/device/msi_irqs/38": "msi",
            "sys/class/net/eth1/.keep": "",
            "sys/class/net/lo/.keep": "",
            **{f"proc/irq/{irq}/smp_affinity_list": routed for irq in (1, 38, 40, 41)},
        },
    )


def test_device_irqs_on_the_pinned_cpus_warn_with_the_commands(tmp_path: Path) -> None:
    found = _findings(_irq_machine(tmp_path, "2-3"), affinity={2, 3})
    irqs = found["device IRQs"]
    assert irqs.severity == WARN
    assert irqs.value.startswith("3 network/USB IRQs")  # i8042 is not one
    assert "routed to CPUs 2-3" in irqs.value
    assert "for n in 38 40 41; do echo 0-1 | sudo tee /proc/irq/$n/smp_affinity_list" in irqs.fix
    assert "IRQBALANCE_BANNED_CPULIST=2-3" in irqs.fix
    default = found["IRQ default affinity"]
    assert (default.value, default.severity) == ("CPUs 0-3", INFO)
    assert "echo 3 | sudo tee /proc/irq/default_smp_affinity" in default.fix


def test_device_irqs_away_from_the_pinned_cpus_are_fine(tmp_path: Path) -> None:
    found = _findings(_irq_machine(tmp_path, "0-1"), affinity={2, 3})
    assert found["device IRQs"].severity == OK


def test_device_irqs_on_an_unpinned_machine_point_at_the_decode_cores(tmp_path: Path) -> None:
    found = _findings(_irq_machine(tmp_path, "0-3"), affinity={0, 1, 2, 3})
    irqs = found["device IRQs"]
    assert irqs.severity == INFO
    assert "echo 0 | sudo tee" in irqs.fix  # the one decode core of four
    assert "CPU1 3,929, CPU2 500, CPU3 700" in irqs.value


def test_unreadable_routing_falls_back_to_where_irqs_landed(tmp_path: Path) -> None:
    root = _irq_machine(tmp_path, "")
    found = _findings(root, affinity={0})  # CPUs 1-3 took them; this process is on CPU 0
    assert "routed to CPUs 1-3" in found["device IRQs"].value
    assert found["device IRQs"].severity == OK


def test_unreadable_irq_files_give_unknown_not_a_crash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _irq_machine(tmp_path, "0-3")
    read_text = Path.read_text

    def refuse(path: Path, *args: object, **kwargs: object) -> str:
        if "irq" in path.parts or path.name == "interrupts":
            raise PermissionError(13, "Permission denied", str(path))
        return read_text(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "read_text", refuse)
    found = _findings(root, affinity={0, 1, 2, 3})
    for name in ("IRQ default affinity", "device IRQs"):
        assert found[name].severity == INFO
        assert found[name].value.startswith("unknown"), found[name]


def test_no_device_irqs_is_said(tmp_path: Path) -> None:
    root = _tree(tmp_path, {**FOUR_CPUS, "proc/interrupts": INTERRUPTS.splitlines()[0] + "\n"})
    found = _findings(root, affinity={0, 1, 2, 3})
    assert found["device IRQs"].value == "no network or USB IRQs found"


# -- real-time scheduling ------------------------------------------------------------------

NO_CAPS = {"proc/self/status": "Name:\tx\nCapEff:\t0000000000000000\n"}
SYS_NICE = {"proc/self/status": "Name:\tx\nCapEff:\t0000000000800000\n"}  # bit 23


@pytest.mark.parametrize(
    ("status", "rtprio", "trial", "severity", "value", "fix"),
    [
        (NO_CAPS, (0, 0), False, INFO, "not allowed", "hard limit is 0"),
        (NO_CAPS, (0, 50), False, INFO, "soft 0, hard 50", "`ulimit -r 20`"),
        (NO_CAPS, (0, -1), False, INFO, "hard unlimited", "`ulimit -r 20`"),
        (NO_CAPS, (10, 10), True, OK, "allowed", ""),
        (SYS_NICE, (0, 0), True, OK, "CAP_SYS_NICE yes", ""),
        (SYS_NICE, (0, 0), False, INFO, "refused although allowed", "real-time budget"),
        ({}, (0, 0), None, INFO, "untested", "limits.conf"),
    ],
)
def test_real_time_scheduling(
    tmp_path: Path,
    status: dict[str, str],
    rtprio: tuple[int, int],
    trial: bool | None,
    severity: str,
    value: str,
    fix: str,
) -> None:
    root = _tree(tmp_path, {**FOUR_CPUS, **status})
    found = _findings(root, affinity={0}, rtprio=rtprio, fifo_trial=lambda: trial)
    realtime = found["real-time scheduling"]
    assert realtime.severity == severity
    assert value in realtime.value
    assert fix in realtime.fix
    if severity == INFO and trial is not None:
        assert "chrt -f" in realtime.fix
        assert "limits.conf" in realtime.fix or "real-time budget" in realtime.fix


@pytest.mark.skipif(not hasattr(os, "sched_getscheduler"), reason="no POSIX scheduling calls")
def test_the_fifo_trial_leaves_this_thread_as_it_was() -> None:
    before = os.sched_getscheduler(0)
    assert try_fifo() in (True, False, None)
    assert os.sched_getscheduler(0) == before
    assert not [t for t in threading.enumerate() if t.name == "visionrt-fifo-trial"]


# -- core pinning --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("siblings", "extra", "cores", "inference", "decode", "threads"),
    [
        (["0-1", "0-1"], {}, 1, (0, 1), (), 1),  # 2 vCPUs, one core
        (["0", "1"], {}, 2, (0, 1), (), 2),
        ([str(i) for i in range(8)], {}, 8, (2, 3, 4, 5, 6, 7), (0, 1), 6),
        (["0,4", "1,5", "2,6", "3,7"] * 2, {}, 4, (1, 5, 2, 6, 3, 7), (0, 4), 3),
        ([str(i) for i in range(8)], {"sys/fs/cgroup/cpu.max": "400000 100000"}, 4,
         (1, 2, 3), (0,), 3),
        ([str(i) for i in range(8)], {"sys/devices/system/node/node0/cpulist": "0-3",
         "sys/devices/system/node/node1/cpulist": "4-7"}, 4, (1, 2, 3), (0,), 3),
    ],
)  # fmt: skip
def test_core_split(
    tmp_path: Path,
    siblings: list[str],
    extra: dict[str, str],
    cores: int,
    inference: tuple[int, ...],
    decode: tuple[int, ...],
    threads: int,
) -> None:
    root = _tree(tmp_path, {**_cpus(siblings), **extra})
    split = split_cores(Probe(root, environ={}, affinity=set(range(len(siblings)))))
    assert len(split.cores) == cores
    assert (split.inference, split.decode, split.threads) == (inference, decode, threads)


@pytest.mark.parametrize(
    ("siblings", "value", "fix"),
    [
        (["0-1", "0-1"], "1 core (CPUs 0-1)", "--threads 1"),
        (["0", "1"], "2 cores (CPUs 0-1)", "taskset -c 0 visionrt run … --threads 1"),
        ([str(i) for i in range(8)], "inference --threads 6 on CPUs 2-7",
         "taskset -c 2-7 visionrt run … --threads 6, then taskset -a -cp 0-1 <pid>"),
    ],
)  # fmt: skip
def test_core_pinning_advice(tmp_path: Path, siblings: list[str], value: str, fix: str) -> None:
    root = _tree(tmp_path, _cpus(siblings))
    pinning = _findings(root, affinity=set(range(len(siblings))))["core pinning"]
    assert pinning.severity == INFO
    assert value in pinning.value
    assert fix in pinning.fix


# -- this machine --------------------------------------------------------------------------


def test_doctor_json_on_this_machine_has_the_new_findings() -> None:
    command = [sys.executable, "-m", "visionrt.cli.main", "doctor", "--json"]
    run = subprocess.run(command, capture_output=True, text=True, timeout=180, check=True)
    report = json.loads(run.stdout)
    try:  # `visionrt run --ray` needs it: doctor says which, if any
        ray = importlib.metadata.version("ray")
    except importlib.metadata.PackageNotFoundError:
        ray = "not installed"
    assert report["packages"]["ray"] == ray
    system = report["system"]
    findings = system["findings"]
    names = {finding["name"] for finding in findings}
    assert names >= NEW_FINDINGS
    for finding in findings:
        assert finding["severity"] in (OK, INFO, WARN)
        assert set(finding) == {"section", "name", "value", "severity", "fix"}
        if finding["severity"] == WARN:
            assert finding["fix"], finding
    assert system["warnings"] == sum(finding["severity"] == WARN for finding in findings)


def test_a_gpu_machine_is_told_which_gpu_runtimes_it_can_use_and_how_to_add_the_others() -> None:
    """Issue #34, item 5 (the GPU faked: CI has none)."""
    from visionrt.system import gpu_runtime_findings

    only_torch = {
        f.name: f for f in gpu_runtime_findings(frozenset({("torch", "cuda")}), "cuda 13.0")
    }
    assert only_torch["torch CUDA"].value == "usable"
    assert only_torch["torch CUDA"].severity == OK
    ort = only_torch["ONNX Runtime CUDA provider"]
    assert (ort.severity, ort.fix) == (
        INFO,
        "pip uninstall -y onnxruntime && pip install 'visionrt[gpu]'",
    )
    assert only_torch["TensorRT"].fix == "pip install 'visionrt[tensorrt]'"
    cpu_torch = {f.name: f for f in gpu_runtime_findings(frozenset(), "cpu")}["torch CUDA"]
    assert cpu_torch.severity == WARN
    assert cpu_torch.value == "this torch is a cpu build and sees no GPU"
    assert "--force-reinstall" in cpu_torch.fix
    no_torch = {f.name: f for f in gpu_runtime_findings(frozenset(), "")}["torch CUDA"]
    assert (no_torch.value, no_torch.fix) == ("not installed", "pip install 'visionrt[torch]'")
