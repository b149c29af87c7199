"""A sweep of bad inputs through `visionrt run`: each gets one line naming the problem, the right
exit code, no traceback, and leaves no half-written file looking complete."""

from __future__ import annotations

import errno
import json
import os
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import HANG_SECONDS, write_tiny_detector, write_video

from visionrt.cli.main import main


@pytest.fixture(scope="module")
def media(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Every bad (and one good) input the table names, made once."""
    import onnx
    from onnx import TensorProto, helper

    root = tmp_path_factory.mktemp("bad")
    made: dict[str, Path] = {"video": write_video(root / "small.mp4", frames=12)}
    made["model"] = write_tiny_detector(root / "tiny.onnx", [(32, 32, 20, 10, 0.9, 0.0)])
    (root / "no-images").mkdir()
    (root / "text.mp4").write_text("this is not a video\n" * 50)
    broken = root / "broken-frames"
    broken.mkdir()
    (broken / "a.png").write_bytes(b"not a png")
    made["broken"] = broken
    (root / "model.txt").write_text("not a model")
    (root / "model.onnx.txt").write_text("x")
    (root / "garbage.onnx").write_bytes(b"\x00\x01garbage" * 100)
    (root / "model.xml").write_text("<net/>")
    (root / "binary.yaml").write_bytes(bytes(range(256)) * 4)
    (root / "list.yaml").write_text("- a\n- b\n")
    (root / "file").write_text("a regular file")
    (root / "folder").mkdir()
    two_inputs = helper.make_graph(
        [helper.make_node("Add", ["a", "b"], ["out"])],
        "two",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 3, 64, 64]) for n in "ab"],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 3, 64, 64])],
    )
    onnx.save(helper.make_model(two_inputs), str(root / "two-inputs.onnx"))
    vector = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])],
        "vector",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 10])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
    )
    onnx.save(helper.make_model(vector), str(root / "vector.onnx"))
    # A detector whose output is [1, 9, 9]: no head has that shape for 2 classes.
    odd = write_tiny_detector(root / "odd.onnx", [(1, 1, 1, 1, 0.0, 0.0)], anchors=9)
    model = onnx.load(str(odd))
    table = np.zeros((1, 9, 9), np.float32)
    model.graph.initializer[0].CopyFrom(onnx.numpy_helper.from_array(table, "table"))
    model.graph.output[0].type.tensor_type.shape.dim[1].dim_value = 9
    onnx.save(model, str(odd))
    # A square [1, 7, 7] output with 3 class names: neither 4+3 rows of anchor-free nor 5+3
    # columns of YOLOv5, and no axis to tell anchors from channels. (With 2 names it is a valid
    # YOLOv5 head: 7 anchors of 5+2 values.)
    seven = write_tiny_detector(
        root / "odd7.onnx",
        [(1, 1, 1, 1, 0.0, 0.0)],
        anchors=7,
        names="{0: 'a', 1: 'b', 2: 'c'}",
    )
    model = onnx.load(str(seven))
    model.graph.initializer[0].CopyFrom(
        onnx.numpy_helper.from_array(np.zeros((1, 7, 7), np.float32), "table")
    )
    model.graph.output[0].type.tensor_type.shape.dim[1].dim_value = 7
    onnx.save(model, str(seven))
    # A Matroska file cut just inside its first cluster: a whole header, not one whole frame.
    whole = write_video(root / "whole.mkv", frames=12).read_bytes()
    (root / "truncated.mkv").write_bytes(whole[: whole.index(b"\x1f\x43\xb6\x75") + 16])
    (root / "null.yaml").write_text("backend: null\n")
    (root / "unnamed-zone.yaml").write_text(
        'analytics: {small: {zones: {"": [[0, 0], [5, 0], [5, 5]]}}}\n'
    )
    made["root"] = root
    return made


def _args(media: dict[str, Path], text: str) -> list[str]:
    root = media["root"]
    return [
        part.replace("VIDEO", str(media["video"]))
        .replace("MODEL", str(media["model"]))
        .replace("ROOT", str(root))
        for part in text.split()
    ]


# argv (VIDEO, MODEL, ROOT replaced), exit code, a piece of the one error line.
CASES = [
    ("ROOT/missing.mp4 -m MODEL", 3, "source not found"),
    ("ROOT/no-images -m MODEL", 3, "no images found"),
    ("ROOT/text.mp4 -m MODEL", 3, "cannot open file"),
    ("ROOT/broken-frames -m MODEL", 3, "no decodable frame (0 of 1 declared)"),
    ("ROOT/truncated.mkv -m MODEL", 3, "no decodable frame"),
    ("VIDEO -m ROOT/missing.onnx", 4, "model file not found"),
    ("VIDEO -m ROOT/missing.pt", 4, "model file not found"),  # was torch's traceback
    ("VIDEO -m ROOT/model.txt", 4, "no backend reads .txt"),
    ("VIDEO -m ROOT/garbage.onnx", 4, "not a readable ONNX model"),
    ("VIDEO -m ROOT/model.xml --backend onnxruntime", 2, "read by openvino"),
    ("VIDEO -m ROOT/two-inputs.onnx", 4, "expected one image input, got 2 inputs"),
    ("VIDEO -m ROOT/vector.onnx", 4, "expected an image input shaped [N, 3, H, W]"),
    ("VIDEO -m ROOT/odd.onnx", 4, "unknown detector output layout [1, 9, 9]"),
    ("VIDEO -m ROOT/odd7.onnx", 4, "unknown detector output layout [1, 7, 7] with 3 classes"),
    ("VIDEO -m MODEL --conf -1", 2, "postprocess.conf"),
    ("VIDEO -m MODEL --conf 2", 2, "postprocess.conf"),
    ("VIDEO -m MODEL --conf abc", 2, "Invalid value for '--conf'"),
    ("VIDEO -m MODEL --iou -1", 2, "postprocess.iou"),
    ("VIDEO -m MODEL --iou 2", 2, "postprocess.iou"),
    ("VIDEO -m MODEL --iou abc", 2, "Invalid value for '--iou'"),
    ("VIDEO -m MODEL --batch 0", 2, "inference.batch"),
    ("VIDEO -m MODEL --threads -1", 2, "inference.threads"),
    ("VIDEO -m MODEL --threads two", 2, "Invalid value for '--threads'"),
    ("VIDEO -m MODEL --bogus", 2, "No such option: --bogus"),
    ("VIDEO -m MODEL --imgsz 33", 2, "multiples of 32"),
    ("VIDEO -m MODEL --imgsz abc", 2, "--imgsz 'abc'"),
    ("VIDEO -m MODEL --precision int4", 2, "inference.precision"),
    ("VIDEO -m MODEL --device cuda:abc", 2, "inference.device"),
    ("VIDEO -m MODEL --device cuda:-1", 2, "inference.device"),
    ("VIDEO -m MODEL --device cuda:²", 2, "inference.device"),
    ("VIDEO -m MODEL --device tpu", 2, "inference.device"),
    ("VIDEO -m MODEL --backend nope", 2, "unknown backend 'nope'"),
    ("VIDEO -m MODEL --mode sometimes", 2, "source.mode"),
    ("VIDEO -m MODEL --max-frames -1", 2, "source.max_frames"),
    ("VIDEO -m MODEL --set nope.key=1", 2, "unknown option 'nope'"),
    ("VIDEO -m MODEL --set postprocess.conf=high", 2, "postprocess.conf: expected a number"),
    ("VIDEO -m MODEL --set postprocess.conf=[1,", 2, "--set postprocess.conf"),
    ("VIDEO -m MODEL --set pipeline.queue_size=0", 2, "pipeline.queue_size"),
    ("VIDEO -m MODEL --set pipeline.stale_after=.nan", 2, "pipeline.stale_after: expected a"),
    ("VIDEO -m MODEL --set source=5", 2, "source: expected a section of options"),
    ("VIDEO -m MODEL --set postprocess..conf=1", 2, "expected section.key"),
    ("VIDEO -m MODEL --set inference.cache_dir=[1]", 2, "inference.cache_dir: expected a path"),
    ("VIDEO -m MODEL --config ROOT/binary.yaml", 2, "not a text file"),
    ("VIDEO -m MODEL --config ROOT/list.yaml", 2, "expected a mapping at the top level"),
    ("VIDEO -m MODEL --config ROOT/missing.yaml", 2, "cannot read config"),
    ("VIDEO -m MODEL --config ROOT/folder", 2, "cannot read config"),
    ("VIDEO -m MODEL --telemetry ROOT/file/t.jsonl", 6, "cannot write"),
    ("VIDEO -m MODEL --telemetry ROOT/folder", 6, "it is a folder"),
    ("VIDEO -m MODEL --out ROOT/file/out", 6, "cannot write output"),
    ("VIDEO -m MODEL --out ROOT/file", 6, "is a file, not a folder"),
    ("VIDEO -m MODEL --out ROOT/file --no-video --no-jsonl", 6, "is a file, not a folder"),
    ("VIDEO -m MODEL --set output.codec=nope", 6, "unknown encoder 'nope'"),
    ("VIDEO -m MODEL --set output.preset=nope", 6, "cannot encode"),
    ("synthetic:0x0:3 -m MODEL", 2, "synthetic source"),
    ("synthetic:100000x100000:1 -m MODEL", 2, "synthetic source"),
    ("VIDEO -m MODEL --backend null --set inference.settings.delay_ms=abc", 2, "delay_ms"),
    ("VIDEO -m MODEL --backend null --set inference.settings.delay_ms=nan", 2, "delay_ms"),
    ("VIDEO -m MODEL --backend null --set inference.settings.fail_after=1.5", 2, "fail_after"),
    ("VIDEO -m MODEL --backend null --set inference.settings.bogus=1", 2, "bogus"),
    ("VIDEO -m MODEL --backend onnxruntime --set inference.settings.spin=maybe", 2, "spin"),
    ("VIDEO -m MODEL --plan ROOT/list.yaml", 2, "expected a visionrt plan"),
    # Frame ranges that cannot apply (issue #32).
    ("VIDEO -m MODEL --set source.start_frame=1000", 2, "start_frame 1000: past the end"),
    ("http://127.0.0.1:9/a.mp4 -m MODEL --set source.end_frame=5", 2, "is a live stream"),
    # Zones that could never count (issue #32).
    ("VIDEO -m MODEL --track --set analytics.small.zones.z=[[0,0],[5,5],[9,9]]", 2, "an area"),
    ("VIDEO -m MODEL --track --set analytics.small.zones.z=[[1,1],[1,1],[1,1]]", 2, "an area"),
    ("VIDEO -m MODEL --track --set analytics.small.zones.z=[[0,0],[9,9],[9,0],[0,9]]", 2, "cross"),
    ("VIDEO -m MODEL --track --set analytics.small.zones.z=[[true,0],[5,0],[5,5]]", 2, "numbers"),
    ("VIDEO -m MODEL --track --config ROOT/unnamed-zone.yaml", 2, "analytics.small.zones.'"),
    ("VIDEO -m MODEL --plan ROOT/list.yaml --no-plan", 2, "--plan and --no-plan"),
    # A flag taken as the value of the one before it.
    ("VIDEO -m MODEL --out --no-video", 2, "--out: expected a value, got the flag --no-video"),
    ("VIDEO -m MODEL --telemetry --track", 2, "--telemetry: expected a value, got the flag"),
    ("VIDEO -m MODEL --set --track", 2, "--set '--track': expected KEY=VALUE"),
]


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    try:
        main(argv)
        code = 0
    except SystemExit as exit_:
        code = int(exit_.code or 0)
    return code, capsys.readouterr().err


@pytest.mark.parametrize(("argv", "code", "message"), CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_one_line(
    argv: str, code: int, message: str, media: dict[str, Path], tmp_path: Path, capsys
) -> None:
    out = tmp_path / "out"
    args = ["run", *_args(media, argv), "-q"]
    if "--out" not in args:
        args += ["--out", str(out)]
    exit_code, stderr = _run(args, capsys)
    errors = [line for line in stderr.splitlines() if line.startswith("visionrt: error:")]
    assert "Traceback" not in stderr
    assert len(errors) == 1, stderr
    assert message in errors[0], errors[0]
    assert exit_code == code, stderr
    left = [p for p in out.rglob("*") if p.is_file()] if out.exists() else []
    assert not [p for p in left if ".partial" in p.name or p.stat().st_size == 0], left


@pytest.mark.parametrize("how", [["--set", "backend=null"], ["--config", "ROOT/null.yaml"]])
def test_null_backend_is_accepted_by_name(
    how: list[str], media: dict[str, Path], tmp_path: Path, capsys
) -> None:
    # YAML reads `null` as None; for the backend key it names the null backend.
    args = ["run", str(media["video"]), "-m", str(media["model"]), *_args(media, " ".join(how))]
    code, stderr = _run([*args, "-q", "--out", str(tmp_path)], capsys)
    assert code == 0, stderr
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["backend"]["runtime"] == "null"


def _one_error(stderr: str) -> str:
    assert "Traceback" not in stderr
    errors = [line for line in stderr.splitlines() if line.startswith("visionrt: error:")]
    assert len(errors) == 1, stderr
    return errors[0]


def test_a_full_disk_at_the_last_flush_keeps_that_output_partial(
    media: dict[str, Path], tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    from visionrt.sinks import JsonlSink

    class FullAtClose:
        """Lines reach the file; the final flush finds the disk full."""

        def __init__(self, file: Any) -> None:
            self.file = file

        def write(self, text: str) -> int:
            return int(self.file.write(text))

        def flush(self) -> None:
            self.file.flush()

        def close(self) -> None:
            self.file.close()
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    write = JsonlSink.write

    def write_then_fill_disk(self: JsonlSink, result: Any) -> None:
        write(self, result)
        if not isinstance(self._file, FullAtClose):
            self._file = FullAtClose(self._file)  # type: ignore[assignment]

    monkeypatch.setattr(JsonlSink, "write", write_then_fill_disk)
    args = ["run", str(media["video"]), "-m", str(media["model"]), "--backend", "null"]
    code, stderr = _run([*args, "-q", "--out", str(tmp_path)], capsys)
    error = _one_error(stderr)
    assert code == 6
    assert "small.jsonl" in error
    assert "No space left on device" in error
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert "No space left on device" in summary["error"]
    assert summary["frames_out"] == 12
    # All or nothing per output: the JSONL keeps its partial name (with every line), the video
    # that did finalize is complete.
    assert not (tmp_path / "small.jsonl").exists()
    assert len((tmp_path / "small.partial.jsonl").read_text().splitlines()) == 12
    assert (tmp_path / "small.mp4").is_file()
    assert not (tmp_path / "small.partial.mp4").exists()


def test_a_telemetry_file_that_fails_mid_run_is_reported_after_the_run(
    media: dict[str, Path], tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    from visionrt.telemetry.report import TelemetryWriter

    def full(*_args: Any) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(TelemetryWriter, "_write", full)
    args = ["run", str(media["video"]), "-m", str(media["model"]), "--backend", "null", "-q"]
    args += ["--out", str(tmp_path), "--telemetry", str(tmp_path / "t.jsonl")]
    code, stderr = _run(args, capsys)
    error = _one_error(stderr)
    assert code == 6
    assert "cannot write telemetry" in error
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert "cannot write telemetry" in summary["error"]
    assert len((tmp_path / "small.jsonl").read_text().splitlines()) == 12


def test_a_stage_failing_mid_run_ends_quickly_with_outputs_finalized(
    media: dict[str, Path], tmp_path: Path, capsys
) -> None:
    # The null backend's fault injection: warm-up makes 2 calls, then 5 frames pass, then it fails.
    args = ["run", "synthetic:64x48:400", "-m", str(media["model"]), "--backend", "null"]
    args += ["--set", "inference.settings.fail_after=7", "-q", "--out", str(tmp_path)]
    result: dict[str, tuple[int, str]] = {}
    worker = threading.Thread(target=lambda: result.setdefault("run", _run(args, capsys)))
    worker.start()
    worker.join(timeout=HANG_SECONDS)
    assert not worker.is_alive(), "a failing stage hung the run"
    code, stderr = result["run"]
    assert code == 1
    errors = [line for line in stderr.splitlines() if line.startswith("visionrt: error:")]
    assert errors == ["visionrt: error: infer-0 stage failed: RuntimeError: null backend:"
                      " injected failure on call 8"]  # fmt: skip
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert "injected failure" in summary["error"]
    lines = (tmp_path / "synthetic:64x48:400.jsonl").read_text().splitlines()
    assert [json.loads(line)["frame"] for line in lines] == list(range(len(lines)))
    assert 1 <= len(lines) <= 5
    assert not list(tmp_path.glob("*.partial*"))
