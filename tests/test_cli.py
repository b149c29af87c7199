"""The command line: one-line errors with exit codes, outputs, interruption."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import HANG_SECONDS, until, write_video


def visionrt(*args: str, timeout: float = HANG_SECONDS) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "visionrt.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def assert_one_line_error(proc: subprocess.CompletedProcess[str], code: int, text: str) -> None:
    assert proc.returncode == code, proc.stderr
    assert "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("visionrt: error:")]
    assert len(errors) == 1, proc.stderr
    assert text in errors[0]


def test_run_writes_outputs_and_summary(
    tmp_path: Path, small_video: Path, tiny_model: Path
) -> None:
    proc = visionrt(
        "run",
        str(small_video),
        "-m",
        str(tiny_model),
        "-o",
        str(tmp_path),
        "--telemetry",
        str(tmp_path / "tele.jsonl"),
        "--json",
    )
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert (summary["frames_in"], summary["frames_out"], summary["accounted"]) == (40, 40, True)
    assert (tmp_path / "small.mp4").is_file()
    assert len((tmp_path / "small.jsonl").read_text().splitlines()) == 40
    assert json.loads((tmp_path / "summary.json").read_text())["frames_out"] == 40
    telemetry = [json.loads(line) for line in (tmp_path / "tele.jsonl").read_text().splitlines()]
    assert telemetry[-1]["frames_out"] == 40
    assert set(telemetry[-1]["latency_ms"]) == {"p50", "p95", "p99"}
    assert set(telemetry[-1]["queues"]) == {"decoded", "prepared", "inferred", "fused"}
    assert "wrote" in proc.stderr
    assert not list(tmp_path.glob("*.partial*"))


def test_missing_video(tmp_path: Path, tiny_model: Path) -> None:
    proc = visionrt(
        "run", str(tmp_path / "missing.mp4"), "-m", str(tiny_model), "-o", str(tmp_path)
    )
    assert_one_line_error(proc, 3, "source not found")


def test_wrong_model(tmp_path: Path, small_video: Path) -> None:
    not_onnx = tmp_path / "model.onnx"
    not_onnx.write_text("hello")
    proc = visionrt("run", str(small_video), "-m", str(not_onnx), "-o", str(tmp_path / "out"))
    assert_one_line_error(proc, 4, "not a readable ONNX model")


def test_model_that_is_not_an_image_detector(tmp_path: Path, small_video: Path) -> None:
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 10])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
    )
    path = tmp_path / "relu.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    proc = visionrt("run", str(small_video), "-m", str(path), "-o", str(tmp_path / "out"))
    assert_one_line_error(proc, 4, "expected an image input shaped [N, 3, H, W]")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--conf", "2"], "postprocess.conf: expected a number in [0, 1], got 2.0"),
        (["--set", "pipeline.queue_size=0"], "pipeline.queue_size: expected >= 1"),
        (["--set", "source.mode=sometimes"], "source.mode: expected auto, file or live"),
        (["--set", "postprocess.bogus=1"], "unknown option 'postprocess.bogus'"),
        (["--backend", "magic"], "unknown backend 'magic'"),
        (["--precision", "int4"], "inference.precision: expected one of"),
        (["--imgsz", "600"], "multiples of 32"),
    ],
)
def test_bad_option_values(
    small_video: Path, tiny_model: Path, tmp_path: Path, args, message
) -> None:
    proc = visionrt("run", str(small_video), "-m", str(tiny_model), "-o", str(tmp_path), *args)
    assert_one_line_error(proc, 2, message)


def test_unwritable_output(tmp_path: Path, small_video: Path, tiny_model: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    proc = visionrt("run", str(small_video), "-m", str(tiny_model), "-o", str(blocker / "out"))
    assert_one_line_error(proc, 6, "cannot write output")


def test_config_file_and_overrides(tmp_path: Path, small_video: Path, tiny_model: Path) -> None:
    config = tmp_path / "run.yaml"
    config.write_text(
        f"model: {tiny_model}\nsource: {{max_frames: 7}}\n"
        f"output: {{dir: {tmp_path / 'a'}, video: false}}\n"
    )
    proc = visionrt(
        "run", str(small_video), "-c", str(config), "--set", "source.max_frames=9", "--json"
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.splitlines()[-1])["frames_out"] == 9
    assert not (tmp_path / "a" / "small.mp4").exists()
    # Into the first run's folder: its outputs replaced, as asked (refused otherwise).
    proc = visionrt(
        "run", str(small_video), "-c", str(config), "--max-frames", "5", "--json", "--overwrite"
    )
    assert json.loads(proc.stdout.splitlines()[-1])["frames_out"] == 5


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_interrupt_finalizes_outputs(tmp_path: Path, tiny_model: Path, signum: int) -> None:
    import av

    video = write_video(tmp_path / "long.mp4", frames=400)
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "visionrt.cli.main",
            "run",
            str(video),
            "-m",
            str(tiny_model),
            "-o",
            str(out),
            "--backend",
            "null",
            "--set",
            "inference.settings.delay_ms=15",
            "-q",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    partial = out / "long.partial.jsonl"
    until(lambda: partial.exists() and len(partial.read_bytes().splitlines()) >= 5, "written")
    proc.send_signal(signum)
    _, stderr = proc.communicate(timeout=HANG_SECONDS)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["interrupted"]
    assert summary["accounted"]
    frames = summary["frames_out"]
    assert 5 <= frames < 400  # the frames written when it came, and those in flight
    lines = (out / "long.jsonl").read_text().splitlines()
    assert [json.loads(line)["frame"] for line in lines] == list(range(frames))
    with av.open(str(out / "long.mp4")) as container:  # playable: the muxer was closed
        assert sum(1 for _ in container.decode(video=0)) == frames
    assert not list(out.glob("*.partial*"))


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("output.codec=nonexist", "unknown encoder 'nonexist'"),
        ("output.preset=bogus", "cannot encode"),
    ],
)
def test_bad_encoder_settings(
    tmp_path: Path, small_video: Path, tiny_model: Path, setting: str, message: str
) -> None:
    proc = visionrt(
        "run", str(small_video), "-m", str(tiny_model), "-o", str(tmp_path), "--set", setting
    )
    assert_one_line_error(proc, 6, message)
    assert not (tmp_path / "small.mp4").exists()
    assert not (tmp_path / "small.jsonl").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run", "x.mp4", "--conf", "abc"], "Invalid value for '--conf'"),
        (["run", "x.mp4", "--frobnicate"], "No such option: --frobnicate"),
        (["frobnicate"], "No such command 'frobnicate'"),
        (["rnu"], "No such command 'rnu'. Did you mean 'run'?"),
    ],
)
def test_usage_errors_are_one_line(args: list[str], message: str) -> None:
    assert_one_line_error(visionrt(*args), 2, message)


def test_no_arguments_shows_help() -> None:
    proc = visionrt()
    assert proc.returncode == 0, proc.stderr
    assert "run" in proc.stdout


def test_help_loses_no_bracketed_word_to_rich_markup() -> None:
    """Help texts are rich markup: a bare `[ray]` is taken for a style and vanishes ('these
    need visionrt)'), so a bracket meant as text is escaped (`\\[`)."""
    import typer.main
    from rich.text import Text

    from visionrt.cli.main import COMMANDS, app

    group = typer.main.get_command(app)
    texts = [
        text
        for name in COMMANDS
        for command in [group.commands[name]]  # type: ignore[attr-defined]
        for text in [command.help, *(getattr(p, "help", None) for p in command.params)]
        if text
    ]
    assert len(texts) > 50
    assert [t for t in texts if Text.from_markup(t).plain != t.replace("\\[", "[")] == []
    proc = visionrt("run", "--help")
    assert proc.returncode == 0, proc.stderr
    assert "visionrt[ray]" in " ".join(proc.stdout.replace("│", " ").split())


def test_the_list_of_commands_imports_none_of_them() -> None:
    """`visionrt --help` lists every command with its line, and imports no command's module
    (it imported them all, the pipeline and torch with them: 0.42 s, now 0.16)."""
    from visionrt.cli.main import COMMANDS

    heavy = ("visionrt.pipeline", "torch", "onnxruntime", "openvino", "cv2")
    code = (
        "import sys\n"
        "from visionrt.cli.main import main\n"
        "main(['--help'])\n"
        # (A None entry blocks an import: usage_reports stands in for OpenVINO's reporting.)
        f"print([m for m, v in sys.modules.items() if v is not None and"
        f" (m in {[m for m, _ in COMMANDS.values()]!r} or m.startswith({heavy!r}))])"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=HANG_SECONDS,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert proc.returncode == 0, proc.stderr
    *help_lines, imported = proc.stdout.splitlines()
    assert imported == "[]"
    for name, (_, line) in COMMANDS.items():
        assert any(name in row and line in row for row in help_lines), (name, proc.stdout)


def test_each_command_loads_from_its_module_under_its_name() -> None:
    import typer.main

    from visionrt.cli import main

    group = typer.main.get_command(main.app)
    for name in main.COMMANDS:
        command = group.get_command(None, name)  # type: ignore[attr-defined]
        assert command is not None
        assert command.name == name
        assert command.help  # the command's own docstring: `visionrt NAME --help`


def test_sigkill_keeps_the_lines_written_so_far(tmp_path: Path, tiny_model: Path) -> None:
    video = write_video(tmp_path / "long.mp4", frames=400)
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "visionrt.cli.main",
            "run",
            str(video),
            "-m",
            str(tiny_model),
            "-o",
            str(out),
            "--backend",
            "null",
            "--set",
            "inference.settings.delay_ms=15",
            "-q",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    partial = out / "long.partial.jsonl"
    until(lambda: partial.exists() and len(partial.read_bytes().splitlines()) >= 5, "written")
    proc.kill()
    proc.wait(timeout=HANG_SECONDS)
    lines = partial.read_text().splitlines()
    assert len(lines) >= 5
    complete = [json.loads(line) for line in lines if line.endswith("}")]
    assert [line["frame"] for line in complete] == list(range(len(complete)))
    assert not (out / "long.jsonl").exists()
    assert not (out / "summary.json").exists()


def test_bench_variants_parse_every_part() -> None:
    from visionrt.backends import BackendOptions
    from visionrt.cli.bench import parse_variant
    from visionrt.errors import ConfigError

    base = BackendOptions()
    full = parse_variant("openvino:int8:512x640:/m/x/model.xml+fold+hint=throughput", base, "d")
    assert (full.backend, full.model, full.label) == (
        "openvino", "/m/x/model.xml", "openvino:int8:512x640:x+fold+hint=throughput"
    )  # fmt: skip
    assert full.options.precision == "int8"
    assert full.options.input_size == (512, 640)
    assert full.options.fold_preprocess
    assert full.options.settings == {"hint": "throughput"}
    gpu = parse_variant("torch:fp16+device=cuda:1+batch=8+threads=2", base, "d.onnx")
    assert (gpu.options.device, gpu.options.batch, gpu.options.threads) == ("cuda:1", 8, 2)
    assert gpu.model == "d.onnx"
    assert gpu.options.settings == {}
    with pytest.raises(ConfigError, match=r"inference\.device"):
        parse_variant("torch:fp16+device=quantum", base, "d.onnx")
    with pytest.raises(ConfigError, match="is not fold or key=value"):
        parse_variant("onnxruntime+spin", base, "d.onnx")


@pytest.mark.parametrize(
    ("flags", "values"),
    [
        ({"conf": 0.4}, {"postprocess": {"conf": 0.4}}),  # named as its key: found by name
        ({"threads": 0}, {"inference": {"threads": 0}}),  # 0 is a value, not unset
        ({"model": "m.onnx"}, {"model": "m.onnx"}),  # the top-level key, not depth.model
        ({"depth_smoothing": 0.5}, {"depth": {"smoothing": 0.5}}),  # section_key
        (
            {"track": False, "sources": []},
            {"pipeline": {"tracking": {"enabled": None}}, "sources": None},
        ),
        (
            {"track": True, "sources": ("a",)},
            {"pipeline": {"tracking": {"enabled": True}}, "sources": ["a"]},
        ),
        (
            {"no_video": True, "imgsz": "512x640"},
            {"output": {"video": False}, "inference": {"input_size": [512, 640]}},
        ),
        (
            {"out": "o", "depth": "d.onnx", "depth_on": "a, b", "depth_size": 364},
            {
                "output": {"dir": "o"},
                "depth": {"model": "d.onnx", "on": ["a", "b"], "short_side": 364},
            },
        ),
    ],
)
def test_run_flags_map_to_config_keys(flags: dict[str, object], values: dict[str, object]) -> None:
    from visionrt.cli.run_config import flag_values

    assert flag_values(**flags) == values


def test_every_run_flag_has_one_config_key() -> None:
    import inspect

    from visionrt.cli.run import _NOT_CONFIG, run_command
    from visionrt.cli.run_config import flag_values
    from visionrt.config import given_options

    names = [n for n in inspect.signature(run_command).parameters if n not in _NOT_CONFIG]
    assert given_options(values=flag_values(**dict.fromkeys(names))) == {}  # unset: nothing set
    # A flag named after no key, or after a key two sections share, is refused by name.
    with pytest.raises(TypeError, match=r"output\.video, depth\.video"):
        flag_values(video=True)
    with pytest.raises(TypeError, match="'bogus'"):
        flag_values(bogus=1)
