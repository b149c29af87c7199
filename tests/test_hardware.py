"""CPU features from /proc/cpuinfo (a written copy here), the bf16 decision, and doctor's line."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from visionrt import hardware
from visionrt.errors import BackendUnavailable

# Two logical CPUs, as the kernel writes them (x86): the flags line repeats per CPU.
CPUINFO = """processor\t: {index}
vendor_id\t: GenuineIntel
cpu family\t: 6
model\t\t: 106
model name\t: Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz
flags\t\t: fpu sse2 avx2 avx512f avx512_vnni {extra}
bugs\t\t: spectre_v1

"""


@pytest.fixture
def cpuinfo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str], None]]:
    """Point hardware at a written cpuinfo whose flags end in the given extra ones."""
    path = tmp_path / "cpuinfo"

    def write(extra: str) -> None:
        path.write_text("".join(CPUINFO.format(index=i, extra=extra) for i in range(2)))
        _clear_caches()

    monkeypatch.setattr(hardware, "CPUINFO", path)
    # The written flags are the machine here, also in a run that hides this machine's BF16.
    monkeypatch.delenv(hardware.HIDE_VARIABLE, raising=False)
    yield write
    _clear_caches()  # the next reader sees this machine again


def _clear_caches() -> None:
    hardware.cpu_features.cache_clear()
    hardware.cpu_model.cache_clear()


def test_flags_are_read(cpuinfo: Callable[[str], None]) -> None:
    cpuinfo("avx512_bf16 amx_tile")
    assert hardware.cpu_features() == {
        "fpu", "sse2", "avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile"
    }  # fmt: skip


def test_hidden_flags_are_absent(
    cpuinfo: Callable[[str], None], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(hardware.HIDE_VARIABLE, " AVX512_BF16, amx_bf16 ,")
    cpuinfo("avx512_bf16 amx_bf16")
    assert hardware.hidden_features() == {"avx512_bf16", "amx_bf16"}
    assert "avx512_bf16" not in hardware.cpu_features()
    assert "avx512_vnni" in hardware.cpu_features()
    assert not hardware.cpu_has_bf16()


def test_flags_are_read_once(cpuinfo: Callable[[str], None]) -> None:
    cpuinfo("")
    first = hardware.cpu_features()
    hardware.CPUINFO.write_text("flags : something else\n")
    assert hardware.cpu_features() is first


def test_unreadable_cpuinfo_gives_no_features(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(hardware, "CPUINFO", tmp_path / "absent")  # as on macOS or Windows
    _clear_caches()
    try:
        assert hardware.cpu_features() == frozenset()
        assert not hardware.cpu_has_bf16()
        assert hardware.cpu_model() == ""
    finally:
        _clear_caches()


def test_model_name_carries_family_and_model(cpuinfo: Callable[[str], None]) -> None:
    cpuinfo("")
    assert hardware.cpu_model() == (
        "Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz (family 6 model 106)"
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # A VM that reports only the brand: the numbers still tell Zen 3 from Zen 4.
        (
            "cpu family\t: 25\nmodel\t\t: 17\nmodel name\t: AMD EPYC\n",
            "AMD EPYC (family 25 model 17)",
        ),
        ("model name\t: Some CPU\n\nprocessor\t: 1\ncpu family\t: 6\n", "Some CPU"),
        ("processor\t: 0\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd\n", ""),  # arm64
    ],
    ids=["brand-only-vm", "first-cpu-only", "no-model-name"],
)
def test_model_name_from_odd_cpuinfo(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, expected: str
) -> None:
    path = tmp_path / "cpuinfo"
    path.write_text(text)
    monkeypatch.setattr(hardware, "CPUINFO", path)
    _clear_caches()
    try:
        assert hardware.cpu_model() == expected
    finally:
        _clear_caches()


def test_bf16_follows_patched_features(monkeypatch: pytest.MonkeyPatch) -> None:
    # Tests force a CPU kind by patching the module, so cpu_has_bf16 must look it up there.
    monkeypatch.setattr(hardware, "cpu_features", lambda: frozenset({"avx512f", "avx512_vnni"}))
    assert not hardware.cpu_has_bf16()
    monkeypatch.setattr(hardware, "cpu_features", lambda: frozenset({"amx_bf16"}))
    assert hardware.cpu_has_bf16()


@pytest.mark.parametrize(
    ("extra", "has_bf16"),
    [
        ("avx512_bf16", True),  # Zen 4/5, Cooper Lake
        ("amx_tile amx_bf16", True),  # Sapphire Rapids and later
        ("", False),  # Ice Lake: AVX-512 and VNNI, no bf16
        ("avx512_fp16", False),
    ],
)
def test_bf16_needs_avx512_bf16_or_amx(
    cpuinfo: Callable[[str], None], extra: str, has_bf16: bool
) -> None:
    cpuinfo(extra)
    assert hardware.cpu_has_bf16() is has_bf16


def test_refusal_is_one_line_with_the_way_out(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hardware, "cpu_has_bf16", lambda: False)
    with pytest.raises(BackendUnavailable) as caught:
        hardware.require_cpu_bf16("torch")
    message = str(caught.value)
    assert message.startswith("torch bf16 on cpu needs BF16 instructions (AVX512_BF16 or AMX)")
    assert "use fp32, or int8 via `visionrt export`" in message
    assert "\n" not in message
    assert caught.value.exit_code == 5


def test_bf16_cpu_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hardware, "cpu_has_bf16", lambda: True)
    hardware.require_cpu_bf16("openvino")


def test_doctor_reports_the_features_hardware_read(cpuinfo: Callable[[str], None]) -> None:
    from visionrt.cli.doctor import doctor_report

    cpuinfo("avx512_bf16 amx_tile amx_bf16")
    report = doctor_report()
    assert report["cpu"] == "Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz (family 6 model 106)"
    assert report["cpu_flags"] == [
        "avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16"
    ]  # fmt: skip
    assert report["cpu_flags_hidden"] == []


def test_doctor_names_the_hidden_flags(
    cpuinfo: Callable[[str], None], monkeypatch: pytest.MonkeyPatch
) -> None:
    from visionrt.cli.doctor import doctor_report

    monkeypatch.setenv(hardware.HIDE_VARIABLE, "avx512_bf16,amx_bf16")
    cpuinfo("avx512_bf16 amx_tile amx_bf16")
    report = doctor_report()
    assert report["cpu_flags"] == ["avx2", "avx512f", "avx512_vnni", "amx_tile"]
    assert report["cpu_flags_hidden"] == ["amx_bf16", "avx512_bf16"]


@pytest.mark.skipif(not hasattr(os, "SCHED_IDLE"), reason="SCHED_IDLE is Linux's")
def test_idle_priority_holds_for_the_thread_and_the_threads_it_starts() -> None:
    """The audit lane's reference runtime starts its threads after the lane lowered itself:
    they must inherit it, and the caller's other threads must not."""
    seen: dict[str, int] = {}

    def lane() -> None:
        hardware.idle_priority()
        seen["lane"] = os.sched_getscheduler(threading.get_native_id())
        child = threading.Thread(
            target=lambda: seen.update(child=os.sched_getscheduler(threading.get_native_id()))
        )
        child.start()
        child.join()

    thread = threading.Thread(target=lane)
    thread.start()
    thread.join()
    assert seen == {"lane": os.SCHED_IDLE, "child": os.SCHED_IDLE}
    assert os.sched_getscheduler(threading.get_native_id()) != os.SCHED_IDLE


def test_normal_priority_brings_a_raised_thread_back_where_allowed() -> None:
    """A Ray worker's thread starts at niceness 15: it and the stage threads it starts come
    back to 0 where the process may raise its priority, and say whether they did."""
    seen: dict[str, object] = {}

    def worker() -> None:
        hardware.lower_priority(15)
        seen["before"] = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
        seen["done"] = hardware.normal_priority()
        seen["after"] = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
        child = threading.Thread(
            target=lambda: seen.update(
                child=os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
            )
        )
        child.start()
        child.join()

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    mine = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    assert seen["before"] == min(19, mine + 15)
    assert seen["done"] == (seen["after"] == 0)
    assert seen["child"] == seen["after"]
    assert seen["after"] == (0 if _may_raise_priority() else seen["before"])


def _may_raise_priority() -> bool:
    """CAP_SYS_NICE (bit 23 of the effective capabilities), or a nice limit that allows 0."""
    import resource

    status = Path("/proc/self/status").read_text()
    caps = int(
        next(line.split()[1] for line in status.splitlines() if line.startswith("CapEff")), 16
    )
    limit = resource.getrlimit(resource.RLIMIT_NICE)[0]
    return bool(caps >> 23 & 1) or limit == resource.RLIM_INFINITY or limit >= 20
