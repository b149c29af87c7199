"""GPU telemetry through NVML, on a fake NVML: readings, the run's summary and its verdict,
the per-second snapshot and the Prometheus gauges."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from visionrt import Pipeline
from visionrt.bench.profile import gpu_verdict
from visionrt.telemetry import gpu as gpu_telemetry
from visionrt.telemetry.gpu import GPU_BOUND, GpuMonitor, prometheus_families, read_gpus
from visionrt.telemetry.report import gpu_caption


class FakeNvml:
    """Two GPUs whose utilisation follows a script, one sample after another; GPU 1 fails."""

    NVML_CLOCK_SM, NVML_CLOCK_MEM = 1, 2

    def __init__(self, busy: list[int], reasons: int = 0, count: int = 1) -> None:
        self.busy, self.reasons, self.count, self.calls = list(busy), reasons, count, 0

    def nvmlDeviceGetCount(self) -> int:
        return self.count

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        if index == 1:
            raise RuntimeError("GPU is lost")
        return index

    def nvmlDeviceGetName(self, handle: int) -> bytes:
        return b"NVIDIA H200"

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> Any:
        return SimpleNamespace(used=3 * 2**30, total=141 * 2**30)

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> Any:
        value = self.busy[min(self.calls, len(self.busy) - 1)]
        self.calls += 1
        return SimpleNamespace(gpu=value, memory=10)

    def nvmlDeviceGetClockInfo(self, handle: int, clock: int) -> int:
        return 1980 if clock == self.NVML_CLOCK_SM else 3201

    def nvmlDeviceGetMaxClockInfo(self, handle: int, clock: int) -> int:
        return 1980

    def nvmlDeviceGetPowerUsage(self, handle: int) -> int:
        return 350_000

    def nvmlDeviceGetTemperature(self, handle: int, sensor: int) -> int:
        raise RuntimeError("not supported")  # a figure a GPU cannot give is 0

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: int) -> int:
        return self.reasons


def test_a_reading_names_clocks_power_and_throttle_reasons() -> None:
    (reading,) = read_gpus(FakeNvml([40], reasons=0x4 | 0x40, count=2))  # GPU 1 is left out
    assert reading.name == "NVIDIA H200"
    assert reading.busy == 0.4
    assert (reading.sm_clock_mhz, reading.sm_clock_max_mhz) == (1980, 1980)
    assert reading.power_w == 350
    assert reading.temperature_c == 0
    assert reading.throttle == ("sw_power_cap", "hw_thermal")


@pytest.mark.parametrize(("busy", "limit"), [([95, 90, 93, 99], "gpu"), ([30, 35, 20, 95], "host")])
def test_the_summary_says_whether_the_gpu_or_the_host_was_the_limit(
    busy: list[int], limit: str
) -> None:
    monitor = GpuMonitor(FakeNvml(busy, reasons=0x1))
    for _ in busy:
        monitor.sample()
    summary = monitor.summary()
    assert summary["limit"] == limit
    figures = summary["gpus"]["0"]
    assert figures["samples"] == 4
    assert figures["busy"] == pytest.approx(sum(busy) / 400, abs=1e-3)
    assert figures["throttle"] == {"gpu_idle": 1.0}
    assert (figures["busy"] >= GPU_BOUND) == (limit == "gpu")
    assert monitor.latest()["0"]["busy"] == busy[-1] / 100


def test_no_nvml_means_no_gpu_figures(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(__import__("sys").modules, "pynvml", None)  # import fails
    assert gpu_telemetry.open_nvml() is None
    assert GpuMonitor(FakeNvml([])).summary() == {}  # nothing sampled


def test_a_run_samples_the_gpu_into_its_summary_and_snapshots(
    monkeypatch: pytest.MonkeyPatch, small_video: Path, tiny_model: Path
) -> None:
    monkeypatch.setattr(gpu_telemetry, "open_nvml", lambda: FakeNvml([20]))
    pipeline = Pipeline([str(small_video)], tiny_model, "null", plan=False)
    try:
        list(pipeline)
        snapshot = pipeline.telemetry.snapshot()
        summary = pipeline.summary()
    finally:
        pipeline.close()
    assert summary.gpu["limit"] == "host"
    assert summary.gpu["gpus"]["0"]["samples"] >= 2  # one at the start, one at the end
    assert summary.to_json()["gpu"] == summary.gpu
    assert snapshot["gpu"]["0"]["sm_clock_mhz"] == 1980
    assert "GPU 0 busy 20% (host-bound), SM 1980 MHz" in gpu_caption(summary.gpu)


def test_prometheus_gauges_carry_every_reading() -> None:
    families = {f.name: f for f in prometheus_families(read_gpus(FakeNvml([50], reasons=0x4)))}
    assert families["visionrt_gpu_utilization_ratio"].samples[0].value == 0.5
    assert families["visionrt_gpu_sm_clock_hertz"].samples[0].value == 1980e6
    throttled = {s.labels["reason"]: s.value for s in families["visionrt_gpu_throttle"].samples}
    assert throttled["sw_power_cap"] == 1.0
    assert throttled["hw_thermal"] == 0.0


def test_profile_names_the_limit_only_for_a_gpu_run() -> None:
    monitor = GpuMonitor(FakeNvml([30, 30], reasons=0x4))
    monitor.sample()
    monitor.sample()
    figures = monitor.summary()
    said = gpu_verdict(figures, "cuda:0")
    assert "busy only 30%" in said
    assert "host is the limit" in said
    assert "sw_power_cap" in said
    assert gpu_verdict(figures, "cpu") == ""
    busy = GpuMonitor(FakeNvml([97, 98]))
    busy.sample()
    busy.sample()
    assert "GPU-bound" in gpu_verdict(busy.summary(), "cuda")
