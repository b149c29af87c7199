"""The doctor's system checklist on this machine and on built /proc and /sys trees."""

from __future__ import annotations

from pathlib import Path

from visionrt.system import WARN, Probe, system_findings


def _tree(root: Path, files: dict[str, str]) -> Path:
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def _by_name(findings):
    return {f.name: f for f in findings}


def test_this_machine_has_every_section() -> None:
    sections = {f.section for f in system_findings(versions={"numpy": "x"})}
    assert sections == {
        "cpu",
        "limits",
        "threads",
        "irq",
        "scheduling",
        "memory",
        "runtimes",
        "gpu",
    }


def test_a_constrained_machine_gets_warnings_with_fixes(tmp_path: Path) -> None:
    cpus = {f"sys/devices/system/cpu/cpu{i}/topology/thread_siblings_list": f"{i % 2}" for i in
            range(4)}  # fmt: skip
    root = _tree(
        tmp_path,
        {
            "proc/cpuinfo": "model name\t: Test CPU\ncpu family\t: 6\nmodel\t: 106\n"
            "flags\t\t: avx2 avx512f avx512_vnni\n",
            "proc/meminfo": "MemTotal: 4000000 kB\nMemAvailable: 1000000 kB\n"
            "SwapTotal: 2097152 kB\n",
            "proc/sys/vm/swappiness": "60",
            "sys/fs/cgroup/cpu.max": "150000 100000",
            "sys/devices/system/cpu/cpu0/cpufreq/scaling_governor": "powersave",
            "sys/kernel/mm/transparent_hugepage/enabled": "always [madvise] never",
            "sys/devices/system/node/node0/cpulist": "0-1",
            "sys/devices/system/node/node1/cpulist": "2-3",
            **cpus,
        },
    )
    probe = Probe(root, environ={"OMP_NUM_THREADS": "16"}, affinity={0, 1})
    found = _by_name(system_findings(probe, gpus=False))
    assert found["model"].value == "Test CPU (family 6 model 106)"
    assert found["bf16"].value == "no"
    assert "INT8" in found["bf16"].fix
    assert found["cores"].value == "2 physical cores, 4 logical CPUs"
    warned = {name for name, f in found.items() if f.severity == WARN}
    assert warned == {
        "frequency governor",
        "cgroup cpu quota",
        "affinity",
        "OMP_NUM_THREADS",
        "RAM",
    }
    assert "threads to 1" in found["cgroup cpu quota"].fix
    assert found["NUMA nodes"].value == "2"
    assert found["transparent hugepages"].value == "madvise"
    assert found["swap"].value == "2048 MiB, swappiness 60"


def test_a_tuned_machine_has_no_warnings(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "proc/cpuinfo": "model name\t: Fast\nflags\t\t: avx512_vnni avx512_bf16\n",
            "proc/meminfo": "MemTotal: 32000000 kB\nMemAvailable: 30000000 kB\nSwapTotal: 0 kB\n",
            "sys/devices/system/cpu/cpu0/cpufreq/scaling_governor": "performance",
            "sys/devices/system/cpu/cpu0/topology/thread_siblings_list": "0",
            "sys/devices/system/cpu/cpu1/topology/thread_siblings_list": "1",
        },
    )
    findings = system_findings(Probe(root, environ={}, affinity={0, 1}), gpus=False)
    assert [f.name for f in findings if f.severity == WARN] == []
