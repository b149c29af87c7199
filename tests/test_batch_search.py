"""The batch search: doubling, out-of-memory recovery and bisection, the stop when a larger batch
stops paying — on fake devices with a known memory limit and throughput curve — and one real
search on the CPU through `visionrt bench --find-batch`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from visionrt.tune.batch import is_out_of_memory, search_batch


class FakeDevice:
    """Fits batches up to `limit`; throughput saturates at `knee` frames per call."""

    def __init__(self, limit: int, knee: int = 10_000, per_frame: float = 100.0) -> None:
        self.limit, self.knee, self.per_frame = limit, knee, per_frame
        self.tried: list[int] = []
        self.recovered = 0

    def measure(self, batch: int) -> float:
        self.tried.append(batch)
        if batch > self.limit:
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return self.per_frame * min(batch, self.knee) / (1 + 0.001 * batch)

    def recover(self) -> None:
        self.recovered += 1


def test_out_of_memory_stops_doubling_and_bisects_to_the_limit() -> None:
    device = FakeDevice(limit=40)
    search = search_batch(device.measure, max_batch=256, recover=device.recover)
    assert device.tried[:7] == [1, 2, 4, 8, 16, 32, 64]
    assert device.recovered == sum(b > 40 for b in device.tried)  # after every failure
    # Bisection between 32 (fits) and 64 (does not) to within 12.5 %: 48 ✗, 40 ✓, 44 ✗.
    assert device.tried[7:] == [48, 40, 44]
    assert search.largest_fit == 40
    assert search.best == 40  # throughput still grows with the batch here
    assert search.stopped == "batch 64 does not fit"
    assert [p.batch for p in search.points if not p.fits] == [64, 48, 44]


def test_doubling_stops_once_a_larger_batch_no_longer_pays() -> None:
    device = FakeDevice(limit=1024, knee=8)
    search = search_batch(device.measure, max_batch=256, recover=device.recover)
    assert device.tried == [1, 2, 4, 8, 16]  # 16 gains nothing over 8: stop, no OOM
    assert search.best == 8
    assert search.largest_fit == 16
    assert "gains less than 1.05×" in search.stopped


def test_nothing_fits_and_other_errors_are_raised() -> None:
    search = search_batch(FakeDevice(limit=0).measure, recover=lambda: None)
    assert (search.best, search.largest_fit, search.stopped) == (0, 0, "not even batch 1 fits")

    def broken(batch: int) -> float:
        raise ValueError("model has no input named images")

    with pytest.raises(ValueError, match="no input named"):
        search_batch(broken, recover=lambda: None)


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (RuntimeError("CUDA out of memory. Tried to allocate 20.00 MiB"), True),
        (RuntimeError("[ONNXRuntimeError] : 6 : Failed to allocate memory for buffer"), True),
        (MemoryError(), True),
        (RuntimeError("std::bad_alloc"), True),
        (RuntimeError("shape mismatch"), False),
    ],
)  # fmt: skip
def test_out_of_memory_is_recognised(error: BaseException, expected: bool) -> None:
    assert is_out_of_memory(error) is expected


def test_bench_find_batch_on_a_model_that_cannot_batch(
    tmp_path: Path, tiny_model: Path, small_video: Path
) -> None:
    """The tiny test model reduces over its batch axis: batch 2 cannot run, so batch 1 is the
    answer and the reason is given (the demo model's search is in docs/benchmarks.md)."""
    out = tmp_path / "batch.json"
    run = subprocess.run(
        [sys.executable, "-m", "visionrt.cli.main", "bench", str(small_video), "-m",
         str(tiny_model), "--find-batch", "4", "--calls", "30", "--json", str(out)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    found = json.loads(out.read_text())["onnxruntime:fp32"]
    assert [p["batch"] for p in found["points"]] == [1, 2]
    assert found["points"][0]["fps"] > 0
    assert found["points"][1]["error"].startswith("cannot run: inference.batch")
    assert (found["best"], found["largest_fit"]) == (1, 1)
    assert "onnxruntime:fp32: batch 1" in run.stderr
