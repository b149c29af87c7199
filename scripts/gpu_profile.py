"""Where the time goes on the GPU machine: the steps `profile` and `profile_depth` of
scripts/gpu_check.py (`--steps profile`), run there in the check's step process.

- `profile_streams`: 32 copies of the clip through `visionrt run` (torch fp16, CUDA graphs, the
  frames path) in this process, with every thread's Python stack sampled every 2 ms: per
  thread, the share of samples in each innermost project frame (waits included: a thread
  blocked on a queue shows there). Then the same run under torch.profiler: the top CPU ops
  and CUDA kernels by their own time.
- `profile_depth`: the converted Depth Anything module in fp16 at 518, eager, under
  torch.profiler: the top CUDA kernels, how many a forward launches, and its time.
"""

from __future__ import annotations

import collections
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

SAMPLE_S = 0.002


class StackSampler:
    """Every thread's innermost frames, counted, every SAMPLE_S on a thread of its own."""

    def __init__(self, depth: int = 3) -> None:
        self.depth = depth
        self.counts: dict[str, collections.Counter[str]] = collections.defaultdict(
            collections.Counter
        )
        self.samples: collections.Counter[str] = collections.Counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sampler", daemon=True)

    def __enter__(self) -> StackSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        own = threading.get_ident()
        while not self._stop.wait(SAMPLE_S):
            names = {t.ident: t.name for t in threading.enumerate()}
            for ident, frame in sys._current_frames().items():
                if ident == own:
                    continue
                name = _kind(names.get(ident, "?"))
                chain = []
                walk: Any = frame
                while walk is not None and len(chain) < self.depth:
                    code = walk.f_code
                    where = Path(code.co_filename)
                    chain.append(f"{where.parent.name}/{where.name}:{code.co_name}:{walk.f_lineno}")
                    walk = walk.f_back
                self.counts[name][" < ".join(chain)] += 1
                self.samples[name] += 1

    def top(self, rows: int = 12) -> dict[str, Any]:
        return {
            name: {
                "samples": total,
                "top": [
                    [round(count / total, 3), chain]
                    for chain, count in self.counts[name].most_common(rows)
                ],
            }
            for name, total in self.samples.most_common()
        }


def _kind(name: str) -> str:
    """A thread's name without its number (decode-3 → decode), so like threads add up."""
    return name.rstrip("0123456789").rstrip("-_ ") or name


def _cli(args: list[str]) -> None:
    from visionrt.cli.entry import main

    sys.argv = ["visionrt", *args]
    try:
        main()
    except SystemExit as done:
        if done.code not in (0, None):
            raise RuntimeError(f"visionrt {' '.join(args[:3])} … exited {done.code}") from None


def _torch_tables(run: Callable[[], None], rows: int = 25) -> dict[str, Any]:
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        run()
    averages = prof.key_averages()
    return {
        "cpu": averages.table(sort_by="self_cpu_time_total", row_limit=rows).splitlines(),
        "cuda": averages.table(sort_by="self_cuda_time_total", row_limit=rows).splitlines(),
        "kernels": sum(1 for e in prof.events() if e.device_type == DeviceType.CUDA),
    }


def profile_streams(video: Path, count: int = 32, frames: int = 100) -> dict[str, Any]:
    sources = [f"s{i}={video}" for i in range(count)]
    args = [*sources, "--no-video", "--no-jsonl", "-q", "--no-plan", "--max-frames", str(frames)]
    args += ["--backend", "torch", "--device", "cuda", "--precision", "fp16", "--batch", str(count)]
    args += ["--set", "inference.settings.cuda_graphs=true"]
    out = Path("/tmp/gpu_profile_runs")
    _cli(["run", *args, "-o", str(out / "warm")])  # graphs, cudnn and caches warm
    started = time.perf_counter()
    with StackSampler() as sampler:
        _cli(["run", *args, "-o", str(out / "sampled")])
    result: dict[str, Any] = {"sampled_wall_s": time.perf_counter() - started}
    result["threads"] = sampler.top()
    result["torch"] = _torch_tables(lambda: _cli(["run", *args, "-o", str(out / "profiled")]))
    return result


def profile_depth(model: Path, video: Path, side: int = 518) -> dict[str, Any]:
    import numpy as np
    import torch

    from visionrt.backends import BackendOptions
    from visionrt.export.depth import depth_export_size
    from visionrt.tasks.depth import DepthTask

    hw = depth_export_size(model, side, video)
    options = BackendOptions(device="cuda", precision="fp16", input_size=hw)
    task = DepthTask(model, "torch", options)
    feed = {task.input_name: np.random.default_rng(0).random(task.new_buffer().shape, "float32")}

    def forwards(n: int) -> None:
        for _ in range(n):
            task.backend.infer(feed)
        torch.cuda.synchronize()

    forwards(5)
    started = time.perf_counter()
    forwards(20)
    result: dict[str, Any] = {"hw": list(hw)}
    result["eager_ms"] = (time.perf_counter() - started) / 20 * 1e3
    result["torch"] = _torch_tables(lambda: forwards(5))
    result["torch"]["kernels_per_forward"] = result["torch"]["kernels"] / 5
    task.close()
    return result
