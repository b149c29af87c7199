"""Issue #34, item 3: with a CUDA GPU visible and no plan, backend, device or precision given,
`run` runs the detector and the depth model in torch fp32 on it (the FP32 reference there) and
says so in one line; a flag naming the CPU wins; a model the converter cannot take stays on
the CPU and the line says why. The GPU is faked: CI has none."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from visionrt.cli.run_config import configure_run
from visionrt.paths import DEMO_VIDEO
from visionrt.plans import gpu as gpu_default


@pytest.fixture
def fake_gpu(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("VISIONRT_PLANS", str(tmp_path / "plans"))  # no plan cached
    monkeypatch.setattr(gpu_default, "gpu_runtimes", lambda: frozenset({("torch", "cuda")}))
    monkeypatch.setattr(gpu_default, "_gpu_name", lambda: "Fake H100")


def _unconvertible(path: Path) -> Path:
    """An ONNX model whose one op the torch converter lacks."""
    import onnx
    from onnx import TensorProto, helper

    node = helper.make_node("Det", ["x"], ["y"])
    graph = helper.make_graph(
        [node], "det",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
    )  # fmt: skip
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def test_a_plain_run_takes_the_gpu(fake_gpu: None, tiny_model: Path, tiny_depth: Path) -> None:
    values = {"model": str(tiny_model), "depth": {"model": str(tiny_depth)}}
    config, note = configure_run(None, False, None, None, values)
    assert (config.backend, config.inference.device) == ("torch", "cuda"), note
    assert config.inference.precision == "fp32"
    assert config.inference.settings["cuda_graphs"] == "true"  # the same kernels, replayed
    assert (config.depth.backend, config.depth.inference.device) == ("torch", "cuda")
    assert config.depth.inference.settings["cuda_graphs"] == "true"
    lines = note.splitlines()
    assert lines[0].startswith(f"no tuned plan for {tiny_model.name} on this machine")
    assert "running the FP32 reference on the GPU (Fake H100, torch fp32)" in lines[0]
    assert "running it FP32 on the GPU (Fake H100, torch fp32) at short side 518" in lines[1]


@pytest.mark.parametrize(
    "flags",
    [
        {"inference": {"device": "cpu"}},
        {"backend": "onnxruntime"},
        {"inference": {"precision": "fp32"}},
    ],
    ids=["device", "backend", "precision"],
)
def test_a_flag_naming_the_configuration_wins(
    fake_gpu: None, tiny_model: Path, flags: dict[str, object]
) -> None:
    config, note = configure_run(None, False, None, None, {"model": str(tiny_model), **flags})
    assert config.backend != "torch"
    assert config.inference.device == "cpu"
    assert "GPU" not in note


def test_a_model_the_converter_cannot_take_stays_on_the_cpu(fake_gpu: None, tmp_path: Path) -> None:
    model = _unconvertible(tmp_path / "det.onnx")
    config, note = configure_run(None, False, None, None, {"model": str(model)})
    assert config.backend in ("", "onnxruntime")
    assert config.inference.device == "cpu"
    assert "on the CPU: the torch backend cannot convert det.onnx for the GPU (lacks Det)" in note


def test_no_gpu_no_change(
    tiny_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VISIONRT_PLANS", str(tmp_path / "plans"))
    monkeypatch.setattr(gpu_default, "gpu_runtimes", frozenset)
    config, note = configure_run(None, False, None, None, {"model": str(tiny_model)})
    assert config.inference.device == "cpu"
    assert "running the FP32 reference; `visionrt tune`" in note


@pytest.mark.parametrize(
    ("device", "batch", "sources", "expected"),
    [
        ("cuda", 1, 3, 3),  # the seed scenario's three cameras: one call
        ("cuda:1", 1, 100, gpu_default.SOURCES_BATCH_MAX),
        ("cuda", 1, 1, 1),  # one source: nothing to batch across
        ("cuda", 4, 8, 4),  # a batch given (flag or plan) is kept
        ("cpu", 1, 3, 1),  # on the CPU a batch is tune's to choose
    ],
)
def test_several_sources_on_the_gpu_go_to_the_detector_together(
    device: str, batch: int, sources: int, expected: int
) -> None:
    from visionrt.backends import BackendOptions

    options, line = gpu_default.batch_across_sources(BackendOptions(device, batch=batch), sources)
    assert options.batch == expected
    assert options.device == device
    if expected != batch:
        assert line == (
            f"{sources} sources on the GPU: their frames go to the detector {expected} a call"
            " (--batch sets another)"
        )
    else:
        assert line == ""


@pytest.mark.parametrize(
    ("given", "expected"), [({}, 3), ({"batch": 1}, 1), ({"batch": 2}, 2)], ids=str
)
def test_a_plain_run_of_three_cameras_batches_them_on_the_gpu(
    fake_gpu: None, tiny_model: Path, given: dict[str, int], expected: int
) -> None:
    """The seed scenario's three cameras as typed on a GPU machine: one detector call for their
    frames, said in one line; a batch the user gave, 1 too, is kept."""
    values = {
        "model": str(tiny_model),
        "sources": ["rgb=a.mp4", "slam1=b.mp4", "slam2=c.mp4"],
        "inference": given,
    }
    config, note = configure_run(None, False, None, None, values)
    assert config.inference.batch == expected
    said = "3 sources on the GPU: their frames go to the detector 3 a call (--batch sets another)"
    assert (said in note.splitlines()) == (not given)


def test_a_pipeline_on_the_cpu_keeps_batch_one(tiny_model: Path, small_video: Path) -> None:
    from visionrt import Pipeline

    pipeline = Pipeline([f"a={small_video}", f"b={small_video}"], tiny_model, "onnxruntime")
    try:
        assert pipeline.task.batch == 1
        assert not any("sources on the GPU" in note for note in pipeline.notes)
    finally:
        pipeline.close()


@pytest.fixture
def gpu_here(monkeypatch: pytest.MonkeyPatch) -> Callable[[set[tuple[str, str]]], None]:
    """A GPU the driver shows, and the (runtime, device) pairs that can use it."""
    from visionrt.backends import gpus

    monkeypatch.setattr(gpus, "gpu_seen", lambda: True)

    def usable(pairs: set[tuple[str, str]]) -> None:
        monkeypatch.setattr(gpus, "gpu_runtimes", lambda: frozenset(pairs))

    return usable


@pytest.mark.parametrize(
    ("usable", "expected"),
    [
        # An H200 machine as lent: ONNX Runtime's CPU build beside a CUDA torch (it ran ONNX
        # Runtime, which refused the device: "no CUDAExecutionProvider here").
        ({("torch", "cuda")}, "torch"),
        ({("onnxruntime", "cuda"), ("torch", "cuda")}, "onnxruntime"),  # the reference first
    ],
    ids=["onnxruntime-cpu-build", "onnxruntime-gpu"],
)
def test_a_device_given_without_a_backend_takes_a_runtime_that_can_use_it(
    gpu_here: Callable[[set[tuple[str, str]]], None],
    tiny_model: Path,
    usable: set[tuple[str, str]],
    expected: str,
) -> None:
    from visionrt.backends.registry import row_for_file

    gpu_here(usable)
    assert row_for_file(tiny_model, "cuda").name == expected
    assert row_for_file(tiny_model, "cuda:1").name == expected
    assert row_for_file(tiny_model).name == "onnxruntime"  # the CPU: the reference, as ever


def test_auto_on_the_gpu_passes_over_a_runtime_that_cannot_use_it(
    gpu_here: Callable[[set[tuple[str, str]]], None], tiny_model: Path
) -> None:
    from visionrt.backends.registry import choose_auto

    gpu_here({("torch", "cuda")})
    row, why = choose_auto("cuda", tiny_model)
    assert row.name == "torch"
    assert "onnxruntime: this onnxruntime is a CPU build" in why


def test_no_runtime_that_can_use_the_gpu_is_one_error_naming_each(
    gpu_here: Callable[[set[tuple[str, str]]], None], tiny_model: Path
) -> None:
    from visionrt.backends.registry import row_for_file
    from visionrt.errors import BackendUnavailable

    gpu_here(set())
    with pytest.raises(BackendUnavailable) as error:
        row_for_file(tiny_model, "cuda")
    said = str(error.value).split("; ")
    assert said[:3] == [
        f"no runtime here runs {tiny_model.name} on device 'cuda':"
        " onnxruntime: this onnxruntime is a CPU build (the GPU's: pip install 'visionrt[gpu]')",
        "openvino does not run on 'cuda'",
        "torch: this torch sees no GPU (a CPU build, or a driver older than its CUDA)",
    ]
    assert said[3].startswith("tensorrt: ")  # not installed here; where it is, it cannot use it


def test_cuda_asked_for_where_no_gpu_is_seen_is_one_line_before_anything_is_written(
    tiny_model: Path,
    small_video: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from conftest import run_cli

    from visionrt.backends import gpus

    monkeypatch.setenv("VISIONRT_PLANS", str(tmp_path / "plans"))
    monkeypatch.setattr(gpus, "NVIDIA_GPUS", tmp_path / "no-driver")
    out = tmp_path / "out"
    for backend in ([], ["--backend", "auto"]):
        args = ["run", str(small_video), "-m", str(tiny_model), "--device", "cuda", "-o", str(out)]
        code, err = run_cli([*args, *backend], capsys)
        assert code == 5
        assert err.strip() == (
            "visionrt: error: device 'cuda': no NVIDIA GPU is visible here (the driver lists"
            f" none under {tmp_path / 'no-driver'}): leave --device out to run on the CPU"
        )
        assert not out.exists() or not any(out.iterdir())


def test_an_openvino_device_given_without_a_backend_takes_openvino(tiny_model: Path) -> None:
    pytest.importorskip("openvino")
    from visionrt.backends.registry import row_for_file

    assert row_for_file(tiny_model, "gpu").name == "openvino"  # ONNX Runtime does not run there


@pytest.mark.parametrize("device", ["cuda", "cuda:1"])
def test_a_cuda_device_alone_runs_the_gpu_reference(
    fake_gpu: None, tiny_model: Path, tiny_depth: Path, device: str
) -> None:
    """`--device cuda` with no plan runs what no flag runs there (torch fp32, its calls replayed
    as CUDA graphs), on the device named; it ran torch eager, slower than no flag at all."""
    values = {
        "model": str(tiny_model),
        "inference": {"device": device},
        "depth": {"model": str(tiny_depth), "inference": {"device": device}},
    }
    config, note = configure_run(None, False, None, None, values)
    assert (config.backend, config.inference.device) == ("torch", device), note
    assert config.inference.precision == "fp32"
    assert config.inference.settings["cuda_graphs"] == "true"
    assert (config.depth.backend, config.depth.inference.device) == ("torch", device)
    assert config.depth.inference.settings["cuda_graphs"] == "true"
    assert "running the FP32 reference on the GPU (Fake H100, torch fp32)" in note


def _cuda_plan(model: Path, artifact: Path, root: Path, depth: bool = False) -> None:
    from visionrt.plans import Plan
    from visionrt.plans.store import file_sha256, machine_fingerprint, plan_path

    tuned: dict[str, object] = {
        "at": "2026-11-28T10:00:00+00:00",
        # Proven on the demo video: a run of it needs no first-frames check (test_geometry).
        "video": str(DEMO_VIDEO),
        "input_hw": [512, 640],
        "measured": {"fps": 900.0, "fidelity": 0.99},
        "source_model": str(model),
        "source_sha256": file_sha256(model),
        "fingerprint": machine_fingerprint(),
    }
    if depth:
        tuned.update(task="depth", short_side=266)
    inference = {"device": "cuda", "precision": "fp16", "settings": {"cuda_graphs": "true"}}
    plan = Plan(
        run={"model": str(artifact), "backend": "torch", "inference": inference}, tuned=tuned
    )
    plan.save(plan_path(model, machine_fingerprint(), root))


def test_a_device_of_the_plans_kind_runs_the_plan_there(
    fake_gpu: None, tiny_model: Path, tiny_depth: Path, tmp_path: Path
) -> None:
    root = tmp_path / "plans"
    _cuda_plan(tiny_model, tiny_model, root)
    _cuda_plan(tiny_depth, tiny_depth, root, depth=True)
    values = {
        "model": str(tiny_model),
        "inference": {"device": "cuda:1"},
        "depth": {"model": str(tiny_depth), "inference": {"device": "cuda:1"}},
    }
    config, note = configure_run(None, False, None, None, values)
    assert (config.inference.device, config.inference.precision) == ("cuda:1", "fp16"), note
    assert (config.depth.inference.device, config.depth.inference.precision) == ("cuda:1", "fp16")
    assert config.depth.short_side == 266  # the depth plan's size
    assert "not used" not in note
    # The CPU named: the plans are set aside, and the line says whose device it was.
    values["inference"] = {"device": "cpu"}
    values["depth"] = {"model": str(tiny_depth), "inference": {"device": "cpu"}}
    config, note = configure_run(None, False, None, None, values)
    assert (config.inference.device, config.inference.precision) == ("cpu", "fp32"), note
    assert config.depth.inference.device == "cpu"
    assert "not used: --device cpu (the plan runs on cuda) chose the configuration" in note
    assert "not used: depth.device cpu (the plan runs on cuda) given" in note
