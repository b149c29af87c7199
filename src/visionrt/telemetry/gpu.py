"""NVIDIA GPU readings through NVML (nvidia-ml-py, where it and a GPU are there): busy share,
memory, clocks, power and throttle reasons, sampled while a run lasts, so a run says whether
the GPU or the host was its limit (summary.json `gpu`, the per-second telemetry, Prometheus)."""

from __future__ import annotations

import statistics
import threading
from collections import Counter, deque
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

# NVML's clock event ("throttle") reason bits, by the names it gives them.
THROTTLE_REASONS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal",
    0x40: "hw_thermal",
    0x80: "hw_power_brake",
    0x100: "display_clocks",
}
# A run whose GPU was busy at least this share of its samples was GPU-bound: work waited for
# the GPU. Below it the GPU waited for work: the host (decoding, feeding, results) was the limit.
GPU_BOUND = 0.85
SAMPLE_SECONDS = 0.2
# Medians are over the most recent samples (10 minutes at 5 a second); means, peaks and
# throttle shares over the whole run: a service runs for weeks in bounded memory.
RECENT = 3000


@dataclass(frozen=True, slots=True)
class GpuReading:
    """One GPU at one moment: `busy` the share of NVML's last sample period with a kernel
    running (0-1), memory in MiB, clocks in MHz, power in W, throttle reasons by name."""

    index: int
    name: str
    busy: float
    memory_used_mb: float
    memory_total_mb: float
    sm_clock_mhz: float
    sm_clock_max_mhz: float
    memory_clock_mhz: float
    power_w: float
    temperature_c: float
    throttle: tuple[str, ...]


def open_nvml() -> Any:
    """The pynvml module, initialised, or None (no package, no driver, no GPU)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        if pynvml.nvmlDeviceGetCount() < 1:
            return None
        return pynvml
    except Exception:
        return None


def read_gpus(nvml: Any) -> list[GpuReading]:
    """Every GPU NVML sees, now; a figure it cannot give is 0, a GPU that fails is left out."""
    readings = []
    for index in range(nvml.nvmlDeviceGetCount()):
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            readings.append(_read(nvml, index, handle))
        except Exception:  # a GPU that went away mid-run: telemetry must not end the run
            continue
    return readings


def _figure(read: Any, *args: Any, scale: float = 1.0) -> float:
    try:
        return float(read(*args)) * scale
    except Exception:  # not supported on this GPU or driver
        return 0.0


def _read(nvml: Any, index: int, handle: Any) -> GpuReading:
    name = nvml.nvmlDeviceGetName(handle)
    memory = nvml.nvmlDeviceGetMemoryInfo(handle)
    reasons_of = (
        getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
        or nvml.nvmlDeviceGetCurrentClocksThrottleReasons
    )
    try:
        bits = int(reasons_of(handle))
    except Exception:
        bits = 0
    sm, mem = getattr(nvml, "NVML_CLOCK_SM", 1), getattr(nvml, "NVML_CLOCK_MEM", 2)
    return GpuReading(
        index=index,
        name=name.decode() if isinstance(name, bytes) else str(name),
        busy=nvml.nvmlDeviceGetUtilizationRates(handle).gpu / 100,
        memory_used_mb=memory.used / 2**20,
        memory_total_mb=memory.total / 2**20,
        sm_clock_mhz=_figure(nvml.nvmlDeviceGetClockInfo, handle, sm),
        sm_clock_max_mhz=_figure(nvml.nvmlDeviceGetMaxClockInfo, handle, sm),
        memory_clock_mhz=_figure(nvml.nvmlDeviceGetClockInfo, handle, mem),
        power_w=_figure(nvml.nvmlDeviceGetPowerUsage, handle, scale=1e-3),
        temperature_c=_figure(nvml.nvmlDeviceGetTemperature, handle, 0),
        throttle=tuple(name for bit, name in THROTTLE_REASONS.items() if bits & bit),
    )


class GpuMonitor:
    """Samples every GPU every `interval` seconds on a daemon thread between `start` and `stop`:
    `latest()` for the per-second telemetry, `summary()` for the run's."""

    def __init__(self, nvml: Any, interval: float = SAMPLE_SECONDS) -> None:
        self._nvml, self._interval = nvml, interval
        self._samples: dict[int, _Totals] = {}
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, daemon=True, name="gpu-telemetry")
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def sample(self) -> None:
        """Take one reading of every GPU (the thread's step; tests call it directly)."""
        readings = read_gpus(self._nvml)
        with self._lock:
            for reading in readings:
                self._samples.setdefault(reading.index, _Totals()).add(reading)

    def _loop(self) -> None:
        while not self._stopped.wait(self._interval):
            self.sample()

    def latest(self) -> dict[str, dict[str, Any]]:
        with self._lock:
            return {str(i): asdict(t.recent[-1]) for i, t in self._samples.items()}

    def summary(self) -> dict[str, Any]:
        """Per GPU over the run: mean and median busy share, clocks, peak memory, power, and
        the share of samples each throttle reason was on; `limit` gpu or host (GPU_BOUND)."""
        with self._lock:
            gpus = {str(i): totals.summary() for i, totals in self._samples.items()}
        if not gpus:
            return {}
        busiest = max(g["busy"] for g in gpus.values())
        return {"gpus": gpus, "limit": "gpu" if busiest >= GPU_BOUND else "host"}


@dataclass
class _Totals:
    """One GPU's readings over a run, in bounded memory."""

    count: int = 0
    busy: float = 0.0
    sm_clock: float = 0.0
    power: float = 0.0
    memory_peak: float = 0.0
    temperature_max: float = 0.0
    reasons: Counter[str] = field(default_factory=Counter)
    recent: deque[GpuReading] = field(default_factory=lambda: deque(maxlen=RECENT))

    def add(self, reading: GpuReading) -> None:
        self.count += 1
        self.busy += reading.busy
        self.sm_clock += reading.sm_clock_mhz
        self.power += reading.power_w
        self.memory_peak = max(self.memory_peak, reading.memory_used_mb)
        self.temperature_max = max(self.temperature_max, reading.temperature_c)
        self.reasons.update(reading.throttle)
        self.recent.append(reading)

    def summary(self) -> dict[str, Any]:
        last, count = self.recent[-1], self.count
        return {
            "name": last.name,
            "samples": count,
            "busy": round(self.busy / count, 3),
            "busy_p50_recent": round(statistics.median(r.busy for r in self.recent), 3),
            "sm_clock_mhz": round(self.sm_clock / count),
            "sm_clock_max_mhz": round(last.sm_clock_max_mhz),
            "memory_used_mb_peak": round(self.memory_peak),
            "memory_total_mb": round(last.memory_total_mb),
            "power_w": round(self.power / count, 1),
            "temperature_c_max": round(self.temperature_max),
            "throttle": {r: round(n / count, 3) for r, n in sorted(self.reasons.items())},
        }


def prometheus_families(readings: list[GpuReading]) -> Iterator[Any]:
    """Gauges of the readings, labelled by GPU index (throttle reasons 1 while on)."""
    from prometheus_client.core import GaugeMetricFamily

    def gauge(name: str, text: str, labels: tuple[str, ...] = ("gpu",)) -> Any:
        return GaugeMetricFamily(name, text, labels=list(labels))

    busy = gauge(
        "visionrt_gpu_utilization_ratio", "GPU busy: share of NVML's sample period with a kernel"
    )
    used = gauge("visionrt_gpu_memory_used_bytes", "GPU memory used")
    sm = gauge("visionrt_gpu_sm_clock_hertz", "GPU SM clock")
    sm_max = gauge("visionrt_gpu_sm_clock_max_hertz", "GPU SM clock, its maximum")
    power = gauge("visionrt_gpu_power_watts", "GPU power draw")
    throttle = gauge(
        "visionrt_gpu_throttle",
        "GPU clock reduced for this reason (1) or not (0)",
        ("gpu", "reason"),
    )
    for reading in readings:
        label = [str(reading.index)]
        busy.add_metric(label, reading.busy)
        used.add_metric(label, reading.memory_used_mb * 2**20)
        sm.add_metric(label, reading.sm_clock_mhz * 1e6)
        sm_max.add_metric(label, reading.sm_clock_max_mhz * 1e6)
        power.add_metric(label, reading.power_w)
        for reason in THROTTLE_REASONS.values():
            throttle.add_metric([*label, reason], float(reason in reading.throttle))
    yield from (busy, used, sm, sm_max, power, throttle)
