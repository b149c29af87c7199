"""The system checklist behind `visionrt doctor`: what in the OS and hardware decides inference
speed, read from /proc and /sys (no root needed), each finding with a severity and its fix."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from visionrt.system_probe import INFO, OK, WARN, Finding, Probe
from visionrt.system_scheduling import SCHEDULING_SECTIONS, smt_finding

__all__ = ["INFO", "OK", "WARN", "Finding", "Probe", "summarize", "system_findings"]


def _cpuinfo(probe: Probe) -> dict[str, str]:
    info: dict[str, str] = {}
    for line in (probe.read("proc/cpuinfo") or "").splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() not in info:
            info[key.strip()] = value.strip()
    return info


def _cpu(probe: Probe) -> list[Finding]:
    info = _cpuinfo(probe)
    flags = set(info.get("flags", "").split())
    model = info.get("model name", "unknown")
    if "cpu family" in info:
        model += f" (family {info['cpu family']} model {info.get('model', '?')})"
    isa = [f for f in ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile") if f in flags]
    found = [Finding("cpu", "model", model), Finding("cpu", "instruction sets", ", ".join(isa))]
    if "avx512_bf16" in flags or "amx_bf16" in flags:
        found.append(Finding("cpu", "bf16", "yes: bf16 runs at about 2× fp32"))
    else:
        found.append(
            Finding("cpu", "bf16", "no", INFO, "use INT8 (visionrt export / tune), not bf16")
        )
    if not ({"avx512_vnni", "avx_vnni", "amx_int8"} & flags):
        found.append(
            Finding("cpu", "int8", "no VNNI: INT8 gains little", INFO, "fp32/bf16 plans only")
        )
    logical, physical = len(probe.topology()), len(probe.cores())
    found.append(Finding("cpu", "cores", f"{physical} physical cores, {logical} logical CPUs"))
    found.append(smt_finding(probe, flags))
    governor = probe.read("sys/devices/system/cpu/cpu0/cpufreq/scaling_governor")
    if governor is None:
        found.append(Finding("cpu", "frequency governor", "not exposed (virtual machine?)", INFO))
    elif governor != "performance":
        found.append(
            Finding(
                "cpu",
                "frequency governor",
                governor,
                WARN,
                "for steady latency: cpupower frequency-set -g performance (root)",
            )
        )
    else:
        found.append(Finding("cpu", "frequency governor", governor))
    return found


def _limits(probe: Probe) -> list[Finding]:
    found = []
    logical = len(probe.cpus())
    cpus = probe.cpu_quota()
    if cpus is not None:
        severity = WARN if cpus < logical else OK
        fix = f"set inference threads to {max(1, int(cpus))}: the cgroup allows {cpus:g} CPUs"
        found.append(Finding("limits", "cgroup cpu quota", f"{cpus:g} CPUs", severity, fix))
    else:
        found.append(Finding("limits", "cgroup cpu quota", "none"))
    if probe.affinity and len(probe.affinity) < logical:
        found.append(
            Finding(
                "limits",
                "affinity",
                f"{len(probe.affinity)} of {logical} CPUs",
                WARN,
                "the process is pinned to fewer CPUs than the machine has (taskset/numactl)",
            )
        )
    else:
        found.append(Finding("limits", "affinity", f"{len(probe.affinity) or logical} CPUs"))
    nodes = len(probe.glob("sys/devices/system/node/node[0-9]*"))
    found.append(
        Finding(
            "limits",
            "NUMA nodes",
            str(nodes or 1),
            INFO if nodes > 1 else OK,
            "pin each pipeline to one node (numactl --cpunodebind)" if nodes > 1 else "",
        )
    )
    return found


def _memory(probe: Probe) -> list[Finding]:
    meminfo = {}
    for line in (probe.read("proc/meminfo") or "").splitlines():
        match = re.match(r"(\w+):\s+(\d+)", line)
        if match:
            meminfo[match.group(1)] = int(match.group(2)) // 1024  # MiB
    total, available = meminfo.get("MemTotal", 0), meminfo.get("MemAvailable", 0)
    found = [
        Finding(
            "memory",
            "RAM",
            f"{available} MiB available of {total} MiB",
            WARN if total and available < 2048 else OK,
            "under 2 GiB free: models and frame queues may swap" if available < 2048 else "",
        )
    ]
    swap = meminfo.get("SwapTotal", 0)
    swappiness = probe.read("proc/sys/vm/swappiness") or "?"
    swap_fix = "lower vm.swappiness (e.g. 10) so model weights are not swapped out"
    high = swap and swappiness.isdigit() and int(swappiness) > 30
    found.append(
        Finding(
            "memory",
            "swap",
            f"{swap} MiB, swappiness {swappiness}",
            INFO if high else OK,
            swap_fix if high else "",
        )
    )
    thp = probe.read("sys/kernel/mm/transparent_hugepage/enabled") or ""
    mode = re.search(r"\[(\w+)\]", thp)
    found.append(Finding("memory", "transparent hugepages", mode.group(1) if mode else "unknown"))
    return found


def _runtimes(versions: Mapping[str, str]) -> list[Finding]:
    found = [Finding("runtimes", name, version) for name, version in versions.items()]
    try:
        import onnxruntime as ort

        found.append(
            Finding("runtimes", "onnxruntime providers", ", ".join(ort.get_available_providers()))
        )
    except ImportError:
        pass
    try:
        import openvino as ov

        found.append(
            Finding("runtimes", "openvino devices", ", ".join(ov.Core().available_devices))
        )
    except (ImportError, RuntimeError):
        pass
    return found


def _gpus() -> list[Finding]:
    try:
        import pynvml
    except ImportError:
        return [Finding("gpu", "NVIDIA", "nvidia-ml-py not installed (no GPU checks)", INFO)]
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as err:
        return [Finding("gpu", "NVIDIA", f"no driver or GPU ({err})", INFO)]
    found = [Finding("gpu", "driver", str(pynvml.nvmlSystemGetDriverVersion()))]
    for index in range(pynvml.nvmlDeviceGetCount()):
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
        clocks = pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)
        reasons = pynvml.nvmlDeviceGetCurrentClocksThrottleReasons(handle)
        idle = getattr(pynvml, "nvmlClocksThrottleReasonGpuIdle", 1)
        throttled = reasons & ~idle
        found.append(
            Finding(
                "gpu",
                f"cuda:{index}",
                f"{pynvml.nvmlDeviceGetName(handle)}, {memory.free >> 20} of"
                f" {memory.total >> 20} MiB free, SM {clocks} MHz",
                WARN if throttled else OK,
                f"clocks throttled (reasons 0x{throttled:x}): check cooling and power limits"
                if throttled
                else "",
            )
        )
        try:
            decoder = pynvml.nvmlDeviceGetDecoderUtilization(handle)[0]
            found.append(Finding("gpu", f"cuda:{index} NVDEC", f"{decoder}% busy"))
        except pynvml.NVMLError:
            pass
    pynvml.nvmlShutdown()
    return found


# What each GPU runtime is, and the command that adds it: PyPI's Linux torch wheel carries
# CUDA; ONNX Runtime's CUDA and TensorRT providers come with onnxruntime-gpu, which replaces
# onnxruntime (both installed, Python imports whichever came last).
GPU_RUNTIMES = (
    (("torch", "cuda"), "torch CUDA", "pip install 'visionrt[torch]'"),
    (
        ("onnxruntime", "cuda"),
        "ONNX Runtime CUDA provider",
        "pip uninstall -y onnxruntime && pip install 'visionrt[gpu]'",
    ),
    (
        ("onnxruntime", "tensorrt"),
        "ONNX Runtime TensorRT provider",
        "pip uninstall -y onnxruntime && pip install 'visionrt[gpu,tensorrt]'",
    ),
    (("tensorrt", "cuda"), "TensorRT", "pip install 'visionrt[tensorrt]'"),
)


def gpu_runtime_findings(pairs: frozenset[tuple[str, str]], torch_build: str) -> list[Finding]:
    """On a machine with an NVIDIA GPU: which GPU runtimes this install can use (`pairs`, as
    `backends.gpus.gpu_runtimes` finds them) and the command that adds each one it cannot.
    torch is what runs by default on the GPU: its absence warns, the others' is information."""
    found = []
    for pair, name, fix in GPU_RUNTIMES:
        if pair in pairs:
            found.append(Finding("gpu", name, "usable", OK))
            continue
        value = "not installed"
        if pair[0] == "torch" and torch_build:
            value = f"this torch is a {torch_build} build and sees no GPU"
            if torch_build == "cpu":
                fix = "pip install --force-reinstall 'torch' (PyPI's Linux wheel carries CUDA)"
            else:
                fix = "check the driver (nvidia-smi) against the CUDA this torch was built for"
        elif pair[0] == "onnxruntime":
            value = "not in this onnxruntime's providers"
        severity = WARN if pair[0] == "torch" else INFO
        found.append(Finding("gpu", name, value, severity, fix))
    return found


def _gpu_runtimes() -> list[Finding]:
    from visionrt.backends.gpus import gpu_runtimes, gpu_seen, torch_build

    if not gpu_seen():
        return []
    return gpu_runtime_findings(gpu_runtimes(), torch_build())


SECTIONS: dict[str, Callable[[Probe], list[Finding]]] = {
    "cpu": _cpu,
    "limits": _limits,
    **SCHEDULING_SECTIONS,
    "memory": _memory,
}


def system_findings(
    probe: Probe | None = None, versions: Mapping[str, str] | None = None, gpus: bool = True
) -> list[Finding]:
    """Every finding, section by section: cpu, limits, threads, irq, scheduling, memory,
    runtimes, gpu."""
    probe = probe or Probe()
    found = [finding for section in SECTIONS.values() for finding in section(probe)]
    found += _runtimes(versions or {})
    if gpus:
        found += _gpus() + _gpu_runtimes()
    return found


def summarize(findings: list[Finding]) -> dict[str, Any]:
    return {
        "warnings": sum(f.severity == WARN for f in findings),
        "findings": [f.to_json() for f in findings],
    }
