"""The GPU check: on a fresh CUDA machine with no internet, install what `.gpu/` brought
(scripts/gpu_bundle.py), run the CUDA tests and every GPU measurement, print one table.

Usage (there): python3 scripts/gpu_check.py [--out DIR] [--steps a,b,... | detector | depth |
profile]
`--steps detector` (issue #33's figures, ~7 min) and `--steps depth` (issue #34's: the depth
model built there, depth model-only and through DepthTask, the seed scenario, a live camera with
depth, `tune --depth`, ~6 min) each fit one call of the device tool; the default runs both, in
order; `profile` (scripts/gpu_profile.py) says where the time goes; `planned` (tune and
`tune --depth`, then the seed scenario as typed on those plans, ~4 min) is #34's target as the
issue words it; `unmeasured` (~6 min) is what was built since the last GPU call. Machines
of one kind differ on the host side (1.4–3× on 2026-11-28): a bundle made with
`gpu_bundle.py --before COMMIT` brings that commit's src/, and the streams steps run it beside
the checkout in the same call.
Each step runs as its own process under its own time limit, so a step that hangs or is cut off
still leaves what the others measured; results go to DIR/gpu_check.json as they come, the log to
DIR/gpu_check.log, the table last on stdout. `--steps` picks steps (default: all, in order).

Here, before a GPU call: `.venv/bin/python scripts/gpu_check.py --smoke --steps unmeasured`
runs the same steps on this machine's CPU (device cpu, fp32, no CUDA graphs, 2 streams of 2
frames): no figure, but a renamed flag or setting, a broken import or a test selection that
finds nothing fails here, not in the GPU machine's few minutes (tests/test_gpu_check.py).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BUNDLE = ROOT / ".gpu"
SITE = Path("/tmp/site")
VIDEO = Path("/usr/share/doc/opencv-doc/examples/data/vtest.avi")
PY = sys.executable
CLI = [PY, "-c", "from visionrt.cli.entry import main; main()"]
# `--smoke`: every step on this machine's CPU, in seconds (the steps' processes inherit it).
SMOKE = os.environ.get("GPU_CHECK_SMOKE") == "1"
DEVICE = "cpu" if SMOKE else "cuda"
SMOKE_STREAMS, SMOKE_FRAMES = 2, 2
WARM, TIMES = (1, 1) if SMOKE else (3, 20)  # in-process timings: warm-up calls, timed calls


def cli(*args: str) -> list[str]:
    """A `visionrt` command line; under `--smoke`, the same on the CPU, small (`on_cpu`)."""
    return [*CLI, *(on_cpu(list(args)) if SMOKE else args)]


def smoke_counts(counts: Sequence[int]) -> list[int]:
    """`counts` (of streams, of threads), or under `--smoke` the distinct ones up to
    SMOKE_STREAMS."""
    return sorted({min(n, SMOKE_STREAMS) for n in counts}) if SMOKE else list(counts)


def on_cpu(args: list[str]) -> list[str]:
    """`args` with every CUDA choice made for the CPU (device cpu, fp32, no CUDA graphs), at
    most SMOKE_FRAMES frames and batches of SMOKE_STREAMS: the same flags and settings,
    checked by a real run here."""
    out: list[str] = []
    for flag, value in zip(["", *args], args, strict=False):
        if flag == "--device" and value.startswith("cuda"):
            value = "cpu"
        elif flag == "--precision" and value == "fp16":
            value = "fp32"
        elif flag == "--max-frames":
            value = str(min(int(value), SMOKE_FRAMES))
        elif flag == "--batch":  # a CPU's batch of 32 at 640 takes half a minute
            value = str(min(int(value), SMOKE_STREAMS))
        elif flag == "--set" and "=" in value:
            key, setting = value.split("=", 1)
            if key.endswith("cuda_graphs"):
                setting = "false"
            elif key.endswith(".device") and setting.startswith("cuda"):
                setting = "cpu"
            elif key.endswith(".precision") and setting == "fp16":
                setting = "fp32"
            value = f"{key}={setting}"
        out.append(value)
    return out


BEFORE = BUNDLE / "before" / "src"  # scripts/gpu_bundle.py --before: the baseline's code
BASELINE = BEFORE.is_dir() and not SMOKE


def env(src: Path = ROOT / "src") -> dict[str, str]:
    paths = [str(src), str(SITE), os.environ.get("PYTHONPATH", "")]
    return {**os.environ, "PYTHONPATH": ":".join(p for p in paths if p), "PYTHONUNBUFFERED": "1"}


def install() -> dict[str, Any]:
    """PyAV from its wheel, the demo model restored to float32, the clip where tests look."""
    import numpy as np
    import onnx
    from onnx import numpy_helper

    wheels = sorted(str(p) for p in (BUNDLE / "whl").glob("*.whl"))
    if wheels:
        subprocess.run(
            [PY, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
             "--target", str(SITE), *wheels],
            check=True,
        )  # fmt: skip
    models = SITE / "fall_detection" / "models"
    models.mkdir(parents=True, exist_ok=True)
    proto = onnx.load(str(BUNDLE / "demo_fp16_weights.onnx"))
    for init in proto.graph.initializer:
        if init.name.endswith("__fp16"):
            array = numpy_helper.to_array(init).astype(np.float32)
            init.CopyFrom(numpy_helper.from_array(array, init.name.removesuffix("__fp16")))
    onnx.save(proto, str(models / "best_fp16.onnx"))
    VIDEO.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(BUNDLE / "vtest.avi", VIDEO)
    return {"wheels": [Path(w).name for w in wheels], "model": str(models / "best_fp16.onnx")}


def machine() -> dict[str, Any]:
    import torch

    if shutil.which("nvidia-smi") is None:
        return {"gpu": "no nvidia-smi", "torch": torch.__version__}
    smi = subprocess.run(
        ["nvidia-smi", "--query-gpu=name,driver_version,memory.total,clocks.max.sm",
         "--format=csv,noheader"],
        capture_output=True, text=True,
    )  # fmt: skip
    cpu = next(
        (line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
         if line.startswith("model name")),
        "?",
    )  # fmt: skip
    return {
        "gpu": smi.stdout.strip(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cores": os.cpu_count(),
        # The host differs between machines of one kind (2026-11-28: 1.4–3× on host stages):
        # its CPU and how loaded it was, so figures of two calls are read for what they are.
        "cpu": cpu,
        "load_average": list(os.getloadavg()),
        "python": sys.version.split()[0],
        # What ran: the checkout (where it came with its .git) and the bundle's baseline.
        "checkout": _commit(),
        "before": _before_commit(),
    }


def _before_commit() -> str | None:
    """The baseline's commit, as the bundle wrote it ("unknown": a bundle from before it did)."""
    if not BEFORE.is_dir():
        return None
    marker = BEFORE.parent / "COMMIT"
    return marker.read_text().strip() if marker.exists() else "unknown"


def _commit() -> str | None:
    found = subprocess.run(
        ["git", "describe", "--always", "--dirty"], capture_output=True, text=True, cwd=ROOT
    )
    return found.stdout.strip() or None


def tests(marker: str) -> dict[str, Any]:
    """The selected tests' run (under `--smoke`, their collection: a selection that finds no
    test fails here rather than on the GPU machine)."""
    args = shlex.split(marker)
    if SMOKE:
        args.append("--collect-only")
        if importlib.util.find_spec("pytest_timeout") is None:  # the GPU machine has it
            at = args.index("--timeout") if "--timeout" in args else len(args)
            del args[at : at + 2]
    proc = subprocess.run(
        [PY, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", *args],
        capture_output=True, text=True, env=env(), cwd=ROOT,
    )  # fmt: skip
    tail = proc.stdout.strip().splitlines()[-30:]
    return {"rc": proc.returncode, "tail": tail, "summary": tail[-1] if tail else ""}


def ceiling(batches: list[int]) -> dict[str, Any]:
    """The detector module alone (ONNX→torch, fp16, channels_last, one CUDA graph per batch),
    input already on the device: the most the pipeline can reach."""
    import onnx
    import torch

    from visionrt.backends.onnx_to_torch import convert_onnx
    from visionrt.backends.torch_device import capture_graph
    from visionrt.models import demo_model_path

    module = convert_onnx(onnx.load(str(demo_model_path())))
    if SMOKE:  # the module converts and runs once, eagerly on the CPU: not a figure
        with torch.inference_mode():
            start = time.perf_counter()
            module.eval()(torch.rand(1, 3, 640, 640))
            ms = (time.perf_counter() - start) * 1e3
        return {"b1": {"ms": ms, "fps": 1e3 / ms, "spread_ms": [ms, ms]}}
    module = module.cuda().half().eval().to(memory_format=torch.channels_last)
    torch.backends.cudnn.benchmark = True
    result: dict[str, Any] = {}
    with torch.inference_mode():
        for batch in batches:
            static = torch.rand(batch, 3, 640, 640, device="cuda", dtype=torch.half)
            static = static.contiguous(memory_format=torch.channels_last)
            graph, _ = capture_graph(lambda x: list(module(x)), static)
            times = []
            for _ in range(5):
                start, end = torch.cuda.Event(True), torch.cuda.Event(True)
                start.record()
                for _ in range(20):
                    graph.replay()
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end) / 20)
            ms = statistics.median(times)
            result[f"b{batch}"] = {
                "ms": ms,
                "fps": batch * 1000 / ms,
                "spread_ms": [min(times), max(times)],
            }
    return result


def run_streams(
    count: int,
    frames: int,
    extra: list[str],
    tag: str = "",
    src: Path = ROOT / "src",
    plan: bool = False,
) -> dict[str, Any]:
    """`count` named copies of the clip through `visionrt run` (with `--no-plan` unless
    `plan`: the run then takes what a user's would, the cached plan or the GPU reference)."""
    out = Path("/tmp/gpu_check_runs") / f"{tag or 'run'}_s{count}"
    shutil.rmtree(out, ignore_errors=True)
    count = min(count, SMOKE_STREAMS) if SMOKE else count
    sources = [f"s{i}={VIDEO}" for i in range(count)]
    args = ["run", *sources, "--no-video", "--no-jsonl", "-q", "--json"]
    args += [] if plan else ["--no-plan"]
    command = cli(*args, "-o", str(out), "--max-frames", str(frames), *extra)
    started = time.perf_counter()
    proc = subprocess.run(command, capture_output=True, text=True, env=env(src), cwd=ROOT)
    if proc.returncode:
        return {"rc": proc.returncode, "error": proc.stderr.strip().splitlines()[-6:]}
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    stages = {k: round(v["p50"], 3) for k, v in summary.get("stages", {}).items()}
    gpu = summary.get("gpu") or {}
    first = next(iter(gpu.get("gpus", {}).values()), {})
    backend = summary["backend"]
    return {
        "streams": count,
        "fps": summary["fps"],
        "frames_out": summary["frames_out"],
        "accounted": summary.get("accounted"),
        "stage_p50_ms": stages,
        "latency_p50_ms": summary["latency"]["p50"],
        "latency_p99_ms": summary["latency"]["p99"],
        "cpu_percent": summary.get("cpu_percent"),
        # The pipeline process's own CPU per frame over the run's window (issue #48's figure;
        # scripts/bench_process_cpu.py takes it as a marginal between two lengths).
        "cpu_ms_per_frame": _cpu_per_frame(summary),
        "backend": {
            k: backend.get(k)
            for k in ("runtime", "device", "precision", "batch", "streams", "cuda_graphs")
        },
        "gpu_busy": first.get("busy"),
        "gpu_limit": gpu.get("limit"),
        "gpu_sm_mhz": first.get("sm_clock_mhz"),
        "gpu_throttle": first.get("throttle"),
        "wall_s": time.perf_counter() - started,
    }


TORCH = ["--backend", "torch", "--device", "cuda", "--precision", "fp16",
         "--set", "inference.settings.cuda_graphs=true"]  # fmt: skip


def streams(kind: str, counts: list[int]) -> dict[str, Any]:
    """`kind`: torch (the frames path), arrays (torch, the host float32 path: the baseline),
    null-float32 / null-frames (no model: the host's ceiling of each path, frames on CUDA)."""
    base = {
        "torch": TORCH,
        "arrays": [*TORCH, "--set", "inference.settings.input=arrays"],
        "frames": [*TORCH, "--set", "inference.settings.input=frames"],
        "null-float32": ["--backend", "null"],
        "null-frames": [
            "--backend",
            "null",
            "--device",
            "cuda",
            "--set",
            "inference.settings.input=frames",
        ],
    }[kind]
    result = {}
    for count in smoke_counts(counts):
        batch = min(count, 64)
        frames = 300 if count <= 8 else 100
        extra = [*base, "--batch", str(batch)]
        if BASELINE:  # the baseline first, then the checkout, each count in turn
            result[f"{count} before"] = run_streams(count, frames, extra, kind, BEFORE)
            print(kind, count, "before", json.dumps(result[f"{count} before"]), flush=True)
        result[f"{count}"] = run_streams(count, frames, extra, kind)
        print(kind, count, json.dumps(result[f"{count}"]), flush=True)
    return result


def _cpu_per_frame(summary: dict[str, Any]) -> float | None:
    cpu, seconds, frames = summary.get("cpu_percent"), summary.get("seconds"), summary["frames_out"]
    if cpu is None or not seconds or not frames:
        return None
    return round(10 * cpu * seconds / frames, 4)


def process_cpu(counts: list[int]) -> dict[str, Any]:
    """scripts/bench_process_cpu.py on the null frames path on the device: the pipeline
    process's CPU per frame (marginal between 30 and 150 frames a stream) and FPS, one round."""
    out = Path("/tmp/gpu_check_runs") / "process_cpu.json"
    counts = smoke_counts(counts)
    short, long = (1, 2) if SMOKE else (30, 150)
    command = [PY, str(ROOT / "scripts" / "bench_process_cpu.py"), "--runs", "1"]
    command += ["--streams", ",".join(map(str, counts)), "--device", DEVICE]
    command += ["--short", str(short), "--long", str(long), "--json", str(out)]
    proc = subprocess.run(command, capture_output=True, text=True, env=env(ROOT / "src"), cwd=ROOT)
    if proc.returncode:
        return {"rc": proc.returncode, "error": proc.stderr.strip().splitlines()[-6:]}
    data: dict[str, Any] = json.loads(out.read_text())
    return data


def processes(workers: list[int], count: int = 64) -> dict[str, Any]:
    """`count` streams over N worker processes of this machine (`--ray processes`), each a
    pipeline of its share batched together: past one process's GIL. The FPS counts the
    workers' start (imports, CUDA, graphs) in the run's time."""
    result: dict[str, Any] = {}
    cores = os.cpu_count() or 1
    if SMOKE:
        count, workers = SMOKE_STREAMS, [min(n, SMOKE_STREAMS) for n in workers[:1]]
    for n in workers:
        share = -(-count // n)
        extra = [*TORCH, "--batch", str(min(share, 64)), "--ray", "processes"]
        extra += ["--workers", str(n), "--set", f"cluster.worker_cpus={max(1, cores // n)}"]
        extra += ["--set", f"cluster.files_per_worker={share}"]
        out = Path("/tmp/gpu_check_runs") / f"processes{n}"
        shutil.rmtree(out, ignore_errors=True)
        sources = [f"s{i}={VIDEO}" for i in range(count)]
        command = cli(
            "run", *sources, "--no-video", "--no-jsonl", "-q", "--json", "--no-plan",
            "-o", str(out), "--max-frames", "300", *extra,
        )  # fmt: skip
        started = time.perf_counter()
        proc = subprocess.run(command, capture_output=True, text=True, env=env(), cwd=ROOT)
        if proc.returncode:
            result[f"{n}"] = {"rc": proc.returncode, "error": proc.stderr.strip().splitlines()[-6:]}
        else:
            summary = json.loads(proc.stdout.strip().splitlines()[-1])
            result[f"{n}"] = {
                "streams": count,
                "workers": n,
                "fps": summary["fps"],
                "fps_after_start": summary["cluster"].get("fps_after_first_result"),
                "first_result_s": summary["cluster"].get("first_result_seconds"),
                "frames_out": summary["frames_out"],
                "accounted": summary.get("accounted"),
                "wall_s": time.perf_counter() - started,
            }
        print("processes", n, json.dumps(result[f"{n}"]), flush=True)
    return result


def readers(counts: tuple[int, ...] = (1, 2, 4, 8, 16), streams_n: int = 32) -> dict[str, Any]:
    """`streams_n` files on `pipeline.reader_threads` N, torch fp16 with graphs (the frames
    path): on 2 cores the frames path ran fastest on one reader, the host float32 path on two
    (2026-11-28); which count a 16-core GPU host wants is what this measures."""
    result = {}
    for count in smoke_counts(counts):
        extra = [*TORCH, "--batch", str(streams_n), "--set", f"pipeline.reader_threads={count}"]
        result[f"{count}"] = run_streams(streams_n, 100, extra, f"readers{count}")
        print("readers", count, json.dumps(result[f"{count}"]), flush=True)
    return result


def live(form: str = "auto", more: tuple[str, ...] | list[str] = ()) -> dict[str, Any]:
    """One paced stream, glass to result; `more`: further flags (live_fold: the host path with
    the letterbox in uint8, converted and scaled on the GPU)."""
    extra = ["--set", f"inference.settings.input={form}", *more]
    return run_streams(1, 100, [*TORCH, "--realtime", *extra], f"live-{form}{len(more)}")


DEPTH_FP16 = ["--set", "depth.backend=torch", "--set", "depth.inference.device=cuda",
              "--set", "depth.inference.precision=fp16",
              "--set", "depth.inference.settings.cuda_graphs=true"]  # fmt: skip


def live_depth() -> dict[str, Any]:
    """One live camera (the clip at its frame rate) with detection and depth, fp16 and CUDA
    graphs both: issue #34's glass-to-result with depth (target p50 ≤ 10 ms)."""
    extra = [*TORCH, *DEPTH_FP16, "--realtime", "--depth", str(_depth_model()), "--depth-on", "s0"]
    return run_streams(1, 100, extra, "live-depth")


def tune_depth() -> dict[str, Any]:
    """`tune --depth` on the GPU machine (a minute's budget): the runtime and size it plans."""
    proc = subprocess.run(
        cli("tune", "--depth", str(_depth_model()), "--budget-minutes", "1", "--json"),
        capture_output=True, text=True, env=env(), cwd=ROOT,
    )  # fmt: skip
    tail = proc.stdout.strip().splitlines()
    return {"rc": proc.returncode, "stdout": tail[-40:], "stderr": proc.stderr.splitlines()[-8:]}


def tune() -> dict[str, Any]:
    proc = subprocess.run(
        cli("tune", "--budget-minutes", "1", "--json"), capture_output=True, text=True,
        env=env(), cwd=ROOT,
    )  # fmt: skip
    tail = proc.stdout.strip().splitlines()
    return {"rc": proc.returncode, "stdout": tail[-40:], "stderr": proc.stderr.splitlines()[-8:]}


DEPTH_BUILD = Path("/tmp/gpu_check_depth_build.log")


def build_depth() -> subprocess.Popen[bytes] | None:
    """Start building the architecture-only DAv2-S ONNX in the background (about a minute on
    16 cores; transformers and onnxscript are there): the depth steps wait for it. (Here, in
    the check's own process, visionrt is imported from the checkout: steps get it through
    env().)"""
    for path in (str(SITE), str(ROOT / "src")):
        if path not in sys.path:
            sys.path.insert(0, path)
    from visionrt.models import depth_model_target

    if Path(depth_model_target()).is_file():
        return None
    log = DEPTH_BUILD.open("wb")
    command = [PY, str(ROOT / "scripts" / "build_depth_model.py")]
    return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env(), cwd=ROOT)


def _depth_model() -> Path:
    from visionrt.models import depth_model_target

    target = Path(depth_model_target())
    deadline = time.monotonic() + 240
    while not target.is_file() and time.monotonic() < deadline:
        time.sleep(2)
    if not target.is_file():
        raise SystemExit(f"depth model not built: {DEPTH_BUILD.read_text()[-800:]}")
    return target


def depth() -> dict[str, Any]:
    """DAv2-S through the torch backend on CUDA (fp32; fp16 with CUDA graphs) model-only at
    518 and 266 (host input, map back: what DepthTask pays), and fp16's AbsRel against ONNX
    Runtime's CPU FP32 on the same frames."""
    import numpy as np

    from visionrt.backends import BackendOptions
    from visionrt.export.depth import compare_depth_to_reference, depth_export_size
    from visionrt.tasks.depth import DepthTask

    model = _depth_model()
    result: dict[str, Any] = {}
    for side in (518, 266):
        hw = depth_export_size(model, side, VIDEO)
        for label, precision, graphs in (("fp32", "fp32", "false"), ("fp16", "fp16", "true")):
            options = BackendOptions(
                device=DEVICE, precision="fp32" if SMOKE else precision, input_size=hw,
                settings={"cuda_graphs": "false" if SMOKE else graphs},
            )  # fmt: skip
            try:
                task = DepthTask(model, "torch", options)
                blank = np.random.default_rng(0).standard_normal(task.new_buffer().shape)
                feed = {task.input_name: blank.astype(np.float32)}
                for _ in range(WARM):
                    task.backend.infer(feed)
                times = []
                for _ in range(TIMES):
                    start = time.perf_counter()
                    task.backend.infer(feed)
                    times.append((time.perf_counter() - start) * 1e3)
                task.close()
                entry: dict[str, Any] = {"ms": statistics.median(times), "hw": list(hw)}
                entry["spread_ms"] = [min(times), max(times)]
                if precision == "fp16":
                    report = compare_depth_to_reference(
                        VIDEO, model, model, "torch", options, 2 if SMOKE else 10, hw
                    )
                    entry["abs_rel"], entry["delta1"] = report.abs_rel, report.delta1
            except Exception as err:  # one line per failure, the other figures still come
                entry = {"error": f"{type(err).__name__}: {str(err)[:300]}"}
            result[f"{label}_{side}"] = entry
            print(label, side, json.dumps(entry), flush=True)
    result.update(_depth_task_paths(model))
    return result


def _depth_task_paths(model: Path) -> dict[str, Any]:
    """A frame's prepare + infer through DepthTask at 518, fp16 with CUDA graphs: the host
    path (bicubic and normalise on the host, float32 up) against the frames path (uint8 up,
    prepared and NaN-checked on the device)."""
    import cv2

    from visionrt.backends import BackendOptions
    from visionrt.export.depth import depth_export_size
    from visionrt.tasks.depth import DepthTask

    capture = cv2.VideoCapture(str(VIDEO))
    _, image = capture.read()
    capture.release()
    hw = depth_export_size(model, 518, VIDEO)
    found: dict[str, Any] = {}
    for form in ("arrays", "frames"):
        options = BackendOptions(
            device=DEVICE, precision="fp32" if SMOKE else "fp16", input_size=hw,
            settings={"cuda_graphs": str(not SMOKE).lower(), "input": form},
        )  # fmt: skip
        try:
            task = DepthTask(model, "torch", options)
            task.warm_up(WARM)
            buffer = task.new_buffer()
            times = []
            for _ in range(TIMES):
                start = time.perf_counter()
                task.prepare(image, buffer, None)
                task.infer([buffer])
                times.append((time.perf_counter() - start) * 1e3)
            task.close()
            entry: dict[str, Any] = {"ms": statistics.median(times)}
            entry["spread_ms"] = [min(times), max(times)]
        except Exception as err:  # one line per failure, the other figures still come
            entry = {"error": f"{type(err).__name__}: {str(err)[:300]}"}
        found[f"task_{form}_fp16_518"] = entry
        print(form, json.dumps(entry), flush=True)
    return found


def seed(
    runs: tuple[tuple[str, list[str]], ...] | None = None, outputs: bool = False
) -> dict[str, Any]:
    """The seed scenario (rgb detect + depth, slam1/slam2 detect): as typed with no plan (the
    GPU by default: torch fp32 for both at depth 518), and with fp16 + CUDA graphs for both;
    or the `runs` given (label, extra flags). The annotated videos and the JSONL are written
    only with `outputs` (as typed: the sink side's share of the time, left out otherwise)."""
    model = _depth_model()
    base = ["run", f"rgb={VIDEO}", f"slam1={VIDEO}", f"slam2={VIDEO}", "--depth",
            str(model), "--depth-on", "rgb", "-q", "--json", "--max-frames", "300"]  # fmt: skip
    base += [] if outputs else ["--no-video", "--no-jsonl"]
    fp16 = [*TORCH, *DEPTH_FP16]
    result: dict[str, Any] = {}
    for label, extra in runs or (
        ("as typed", []),
        ("fp16 graphs", fp16),
        ("fp16 graphs frames", [*fp16, "--set", "depth.inference.settings.input=frames"]),
        ("fp16 graphs 266", [*fp16, "--depth-size", "266"]),
    ):
        out = Path("/tmp/gpu_check_runs") / f"seed_{label.replace(' ', '_')}"
        shutil.rmtree(out, ignore_errors=True)
        proc = subprocess.run(
            cli(*base, "-o", str(out), *extra), capture_output=True, text=True, env=env(), cwd=ROOT
        )
        if proc.returncode:
            result[label] = {"rc": proc.returncode, "error": proc.stderr.strip().splitlines()[-6:]}
            continue
        summary = json.loads(proc.stdout.strip().splitlines()[-1])
        result[label] = {
            "fps_per_camera": {s["name"]: s["fps"] for s in summary["sources"]},
            "stage_p50_ms": {k: round(v["p50"], 2) for k, v in summary["stages"].items()},
            "notes": summary.get("notes", [])[:3],
        }
        print(label, json.dumps(result[label]), flush=True)
    return result


def device_flag() -> dict[str, Any]:
    """`--device cuda` with no backend named, as a user types it: the plan `tune` cached just
    before (a CUDA plan keeps running under a CUDA device), and with `--no-plan` the model
    file's first reader that can use the GPU here (torch, beside ONNX Runtime's CPU build),
    where it failed before 2026-11-28."""
    return {
        "as typed": run_streams(1, 60, ["--device", "cuda"], "device-flag", plan=True),
        "--no-plan": run_streams(1, 60, ["--device", "cuda"], "device-flag-no-plan"),
    }


def doctor() -> dict[str, Any]:
    proc = subprocess.run(cli("doctor"), capture_output=True, text=True, env=env(), cwd=ROOT)
    return {"rc": proc.returncode, "stdout": proc.stdout.strip().splitlines()[-30:]}


GPU_TESTS = (
    "-m gpu tests/test_device_path.py tests/test_torch_backend.py tests/test_tune.py"
    " --timeout 90 -k 'not (variants_match_eager and settings0)"
    " and not (fp32_by_iou and (settings2 or settings3))'"
)

# In order of what matters most, so a run cut off at its limit still has the headline figures.
STEPS: dict[str, tuple[int, Any]] = {
    "machine": (30, machine),
    "torch_streams": (140, lambda: streams("torch", [1, 8, 32, 64])),
    "readers": (80, readers),
    "ceiling": (40, lambda: ceiling([1, 8, 32, 64])),
    "processes": (150, lambda: processes([4, 8])),
    "depth": (170, depth),  # waits for the depth model's build (started first)
    "seed": (150, seed),
    "null_streams": (70, lambda: {k: streams(k, [1, 32]) for k in ("null-float32", "null-frames")}),
    "process_cpu": (150, lambda: process_cpu([1, 32, 64])),
    "arrays_streams": (40, lambda: streams("arrays", [32])),
    "frames_streams": (30, lambda: streams("frames", [1])),  # batch 1 on the device path
    "live": (30, live),
    "live_frames": (30, lambda: live("frames")),
    "live_fold": (30, lambda: live("arrays", ["--set", "inference.fold_preprocess=true"])),
    "doctor": (20, doctor),
    "tests_gpu": (110, lambda: tests(GPU_TESTS)),
    "tune": (90, tune),
    "device_flag": (30, device_flag),
    "live_depth": (60, live_depth),
    "tune_depth": (150, tune_depth),  # the detector (1 min), then depth and its held maps
    # Issue #34's target as it names it: the seed scenario as typed once `tune` and
    # `tune --depth` planned both models (what `make demo` does there): run after tune_depth.
    "seed_planned": (
        120,
        lambda: {
            **seed((("as typed on the plans", []),), outputs=True),  # the target's own reading
            **seed((("on the plans, no video or JSONL", []),)),
        },
    ),
    "profile": (150, lambda: _profile().profile_streams(VIDEO)),
    "profile_depth": (150, lambda: _profile().profile_depth(_depth_model(), VIDEO)),
}


def _profile() -> Any:
    sys.path.insert(0, str(ROOT / "scripts"))
    import gpu_profile

    return gpu_profile


PROFILE = ("profile", "profile_depth")  # scripts/gpu_profile.py: where the time goes
# The steps that wait for the depth model's build.
DEPTH_STEPS = ("depth", "seed", "live_depth", "tune_depth", "seed_planned", "profile_depth")
GROUPS = {
    "detector": [name for name in STEPS if name not in (*DEPTH_STEPS, *PROFILE)],
    # A call of its own (the depth group fills one): the plans, then the scenario on them.
    "planned": ["machine", "tune_depth", "seed_planned"],
    # What was built since the last GPU call and not yet measured there (2026-11-28): the
    # shared readers, the one-replay preparing and device letterbox, torch's fold; one call.
    "unmeasured": [
        "machine",
        "torch_streams",
        "readers",
        "null_streams",
        "process_cpu",
        "live",
        "live_frames",
        "live_fold",
        "tests_gpu",
    ],
    "depth": ["machine", "depth", "seed", "live_depth", "tune_depth"],
    "profile": ["machine", *PROFILE],
}


def chosen_steps(text: str) -> list[str]:
    """Step names from `--steps`: names, or a group's name (GROUPS)."""
    names: list[str] = []
    for part in text.split(","):
        for name in GROUPS.get(part, [part]):
            if name not in STEPS:
                raise SystemExit(f"--steps: no step or group '{name}' ({', '.join(STEPS)})")
            if name not in names:
                names.append(name)
    return names


def efficiency(results: dict[str, Any]) -> list[str]:
    """End-to-end FPS over the raw model-only FPS at the same batch."""
    ceiling, runs = results.get("ceiling") or {}, results.get("torch_streams") or {}
    lines = []
    for count, run in runs.items():
        if not count.isdigit():  # "32 before": the baseline's run
            continue
        model = ceiling.get(f"b{min(int(count), 64)}") if isinstance(ceiling, dict) else None
        if isinstance(run, dict) and "fps" in run and model:
            lines.append(
                f"| efficiency {count} streams | {run['fps']:.0f} / {model['fps']:.0f} ="
                f" {run['fps'] / model['fps']:.2f} |"
            )
    return lines


def table(results: dict[str, Any]) -> str:
    lines = ["| what | figure |", "|---|---|"]

    def run_line(name: str, n: str, r: Any) -> str:
        if not isinstance(r, dict) or "fps" not in r:
            return f"| {name} {n} | failed: {r} |"
        st = r["stage_p50_ms"]
        return (
            f"| {name} {n} | {r['fps']:.0f} FPS, infer p50 {st.get('infer', 0):.1f} ms,"
            f" pre {st.get('preprocess', 0):.2f}, post {st.get('postprocess', 0):.2f},"
            f" cpu {r['cpu_percent']:.0f}%, gpu busy {r.get('gpu_busy')} ({r.get('gpu_limit')}),"
            f" p50 {r['latency_p50_ms']:.1f} ms |"
        )

    for name, value in results.items():
        if name == "ceiling" and isinstance(value, dict) and "error" not in value:
            for b, r in value.items():
                lines.append(f"| model-only {b} | {r['ms']:.2f} ms, {r['fps']:.0f} FPS |")
        elif name == "null_streams" and isinstance(value, dict) and "error" not in value:
            for kind, runs in value.items():
                if isinstance(runs, dict) and "streams" not in runs:
                    lines += [run_line(kind, n, r) for n, r in runs.items()]
                else:
                    lines.append(run_line("null", kind, runs))
        elif name == "readers" and isinstance(value, dict) and "error" not in value:
            lines += [run_line("32 streams, reader threads", n, r) for n, r in value.items()]
        elif name.endswith("_streams") and isinstance(value, dict) and "error" not in value:
            lines += [run_line(name, n, r) for n, r in value.items()]
        elif name == "processes" and isinstance(value, dict) and "error" not in value:
            for n, r in value.items():
                figure = (
                    f"{r['fps']:.0f} FPS ({r['fps_after_start']:.0f} after the first result at"
                    f" {r['first_result_s']:.1f} s)"
                    if "fps" in r
                    else f"failed: {r}"
                )
                lines.append(f"| 64 streams on {n} worker processes | {figure} |")
        elif name.startswith("live") and isinstance(value, dict) and "fps" in value:
            lines.append(
                f"| {name} 1 stream | p50 {value['latency_p50_ms']:.2f} ms, p99"
                f" {value['latency_p99_ms']:.2f} ms, stages {value['stage_p50_ms']} |"
            )
        elif name == "depth" and isinstance(value, dict) and "error" not in value:
            for key, r in value.items():
                abs_rel = f", AbsRel {r['abs_rel']:.4f}" if "abs_rel" in r else ""
                figure = f"{r['ms']:.2f} ms{abs_rel}" if "ms" in r else r.get("error")
                lines.append(f"| depth {key} model-only | {figure} |")
        elif name == "seed" and isinstance(value, dict) and "error" not in value:
            for key, r in value.items():
                lines.append(f"| seed {key} | {r.get('fps_per_camera', r)} |")
        elif name.startswith("tests") and isinstance(value, dict):
            lines.append(f"| {name} | {value.get('summary', value)} |")
        elif name == "doctor" and isinstance(value, dict):
            lines.append(f"| doctor | rc {value.get('rc')} |")
        elif name == "device_flag" and isinstance(value, dict):
            for how, run in value.items():
                ran = run.get("backend", {}) if isinstance(run, dict) else {}
                figure = (
                    f"{ran.get('runtime')} {ran.get('precision')} graphs"
                    f" {ran.get('cuda_graphs')}, {run['fps']:.0f} FPS"
                    if isinstance(run, dict) and "fps" in run
                    else run
                )
                lines.append(f"| `--device cuda`, no backend, {how} | {figure} |")
        elif name == "tune" and isinstance(value, dict):
            lines.append(f"| tune | rc {value.get('rc')} {value.get('stdout', [''])[-3:]} |")
        else:
            lines.append(f"| {name} | {json.dumps(value)[:300]} |")
    return "\n".join(lines + efficiency(results))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "out/gpu_check")))
    parser.add_argument("--steps", default=",".join(n for n in STEPS if n not in PROFILE))
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="every step on this machine's CPU, a few frames each, no figures: the check's"
        " commands, settings and imports checked before a GPU machine runs them",
    )
    parser.add_argument("--step", default="", help=argparse.SUPPRESS)  # one step, in-process
    args = parser.parse_args()
    if args.step:
        print("RESULT " + json.dumps(STEPS[args.step][1]()), flush=True)
        return
    if args.smoke:  # the steps' processes inherit it
        os.environ["GPU_CHECK_SMOKE"] = "1"
    args.out.mkdir(parents=True, exist_ok=True)
    log = (args.out / "gpu_check.log").open("a")
    results: dict[str, Any] = {"install": "skipped (--smoke)" if args.smoke else install()}
    steps = chosen_steps(args.steps)
    building = None
    for name in steps:
        limit, _ = STEPS[name]
        # The depth model is built (a minute on every core) when the first step that needs it
        # comes, not beside the host-bound measurements before it.
        if name in DEPTH_STEPS and building is None:
            building = build_depth()
        started = time.perf_counter()
        try:
            proc = subprocess.run(
                [PY, __file__, "--step", name], capture_output=True, text=True, env=env(),
                cwd=ROOT, timeout=limit,
            )  # fmt: skip
            output, err = proc.stdout, proc.stderr
            found = [line for line in output.splitlines() if line.startswith("RESULT ")]
            results[name] = json.loads(found[-1][7:]) if found else {"error": err[-2000:]}
        except subprocess.TimeoutExpired as cut:
            output = cut.stdout.decode() if isinstance(cut.stdout, bytes) else (cut.stdout or "")
            err = ""
            results[name] = {"error": f"cut off after {limit} s"}
        log.write(f"== {name} ({time.perf_counter() - started:.1f} s)\n{output}\n{err}\n")
        log.flush()
        (args.out / "gpu_check.json").write_text(json.dumps(results, indent=1))
        print(f"== {name}: {time.perf_counter() - started:.1f} s", flush=True)
    if building is not None and building.poll() is None:
        building.kill()
    print(table(results))


if __name__ == "__main__":
    main()
