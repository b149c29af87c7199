"""Shared fixtures: media and tiny models generated at test time, and the real demo assets."""

from __future__ import annotations

import importlib.util
import os
import signal
import tempfile
import threading
import time
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pytest

from visionrt.errors import ModelLoadError
from visionrt.models import demo_model_path, depth_model_path
from visionrt.paths import DEMO_VIDEO

T = TypeVar("T")

# A plan tuned on this machine would change what a plain `visionrt run` does: tests see none
# unless they make one.
os.environ["VISIONRT_PLANS"] = tempfile.mkdtemp(prefix="visionrt-test-plans-")


def write_video(
    path: Path, frames: int, width: int = 128, height: int = 96, fps: int = 25, codec: str = "mpeg4"
) -> Path:
    """A small real video: a bright square moving over a dark background."""
    import av

    with av.open(str(path), mode="w") as container:
        stream = container.add_stream(codec, rate=Fraction(fps))
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        for index in range(frames):
            image = np.full((height, width, 3), 30, np.uint8)
            x = (index * 3) % (width - 16)
            image[10:26, x : x + 16] = (40, 200, 240)
            frame = av.VideoFrame.from_ndarray(image, format="bgr24")
            container.mux(stream.encode(frame))
        container.mux(stream.encode(None))
    return path


def write_tiny_detector(
    path: Path,
    boxes: list[tuple[float, float, float, float, float, float]],
    size: int = 64,
    anchors: int = 8,
    layout: str = "anchor_free",
    names: str = "{0: 'person', 1: 'car'}",
) -> Path:
    """An ONNX 'detector' whose output is fixed: rows (cx, cy, w, h, score class 0, score class 1)
    in input pixels, padded with empty anchors. The input still flows into the graph (times 0),
    so runtimes cannot fold it away."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    table = np.zeros((anchors, 6), np.float32)
    table[: len(boxes)] = np.asarray(boxes, np.float32)
    if layout == "anchor_free":
        constant = table.T[None]  # [1, 6, N]
    elif layout == "yolov5":  # [1, N, 5+nc]: objectness 1, class scores as given
        constant = np.concatenate(
            [
                table[:, :4],
                np.ones((anchors, 1), np.float32) * (table[:, 4:].max(axis=1, keepdims=True) > 0),
                table[:, 4:],
            ],
            axis=1,
        )[None]
    else:
        raise ValueError(layout)
    nodes = [
        helper.make_node("ReduceMean", ["images"], ["mean"], keepdims=0),
        helper.make_node("Mul", ["mean", "zero"], ["nothing"]),
        helper.make_node("Add", ["table", "nothing"], ["output0"]),
    ]
    graph = helper.make_graph(
        nodes,
        "tiny",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, [1, 3, size, size])],
        [helper.make_tensor_value_info("output0", TensorProto.FLOAT, list(constant.shape))],
        [
            numpy_helper.from_array(constant.astype(np.float32), "table"),
            numpy_helper.from_array(np.zeros((1,), np.float32), "zero"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    for key, value in {"names": names, "imgsz": f"[{size}, {size}]", "stride": "32"}.items():
        entry = model.metadata_props.add()
        entry.key, entry.value = key, value
    onnx.save(model, str(path))
    return path


def write_follower_detector(path: Path, size: int = 64, anchors: int = 8) -> Path:
    """An ONNX 'detector' that finds write_video's bright square: one person box, 8×8 input
    pixels, centred on the pixels whose channel mean is over 0.5 (the square, not the dark
    background nor the letterbox's grey), scored 0.9 while there are any (else 0), padded with
    empty anchors. Its boxes follow the image, so tracks end and start as the square wraps."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    centres = np.arange(size, dtype=np.float32) + 0.5
    constants = {
        "half": np.array(0.5, np.float32),
        "xs": centres.reshape(1, 1, 1, size),
        "ys": centres.reshape(1, 1, size, 1),
        "hw": np.array([[2, 3]], np.int64)[0],
        "tiny": np.array(1e-6, np.float32),
        "ten": np.array(10.0, np.float32),
        "zero": np.array(0.0, np.float32),
        "most": np.array(0.9, np.float32),
        "size": np.full((1, 2), 8.0, np.float32),
        "nothing": np.zeros((1, 1), np.float32),
        "padding": np.zeros((1, 6, anchors - 1), np.float32),
    }
    nodes = [
        helper.make_node("ReduceMean", ["images"], ["mean"], axes=[1], keepdims=1),
        helper.make_node("Sub", ["mean", "half"], ["above"]),
        helper.make_node("Relu", ["above"], ["bright"]),
        helper.make_node("ReduceSum", ["bright", "hw"], ["total"], keepdims=0),
        helper.make_node("Mul", ["bright", "xs"], ["wx"]),
        helper.make_node("ReduceSum", ["wx", "hw"], ["sx"], keepdims=0),
        helper.make_node("Mul", ["bright", "ys"], ["wy"]),
        helper.make_node("ReduceSum", ["wy", "hw"], ["sy"], keepdims=0),
        helper.make_node("Add", ["total", "tiny"], ["weight"]),
        helper.make_node("Div", ["sx", "weight"], ["cx"]),
        helper.make_node("Div", ["sy", "weight"], ["cy"]),
        helper.make_node("Mul", ["total", "ten"], ["scaled"]),
        helper.make_node("Clip", ["scaled", "zero", "most"], ["score"]),
        helper.make_node("Concat", ["cx", "cy", "size", "score", "nothing"], ["row"], axis=1),
        helper.make_node("Unsqueeze", ["row", "last"], ["column"]),
        helper.make_node("Concat", ["column", "padding"], ["output0"], axis=2),
    ]
    constants["last"] = np.array([2], np.int64)
    graph = helper.make_graph(
        nodes,
        "follower",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, [1, 3, size, size])],
        [helper.make_tensor_value_info("output0", TensorProto.FLOAT, [1, 6, anchors])],
        [numpy_helper.from_array(value, name) for name, value in constants.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    meta = {"names": "{0: 'person', 1: 'car'}", "imgsz": f"[{size}, {size}]", "stride": "32"}
    for key, value in meta.items():
        entry = model.metadata_props.add()
        entry.key, entry.value = key, value
    onnx.save(model, str(path))
    return path


def write_toy_head(
    path: Path, height: int, width: int, pixels: bool = False, classes: int = 0
) -> Path:
    """A detector-shaped toy: three strided convs, flatten, a reshape to [1, 2, N], then
    `(zeros + anchors) * strides`, so its output is the anchor centres times the strides.
    `pixels` stores the anchor centres in pixels instead of grid units (both exports exist).
    With `classes`, zero rows for box sizes and class scores follow: an anchor-free head
    [1, 4 + classes, N] with class names, that the size rewrite understands."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from visionrt.models import make_anchors
    from visionrt.types import anchor_count

    count = anchor_count(height, width)
    points, strides = make_anchors(height, width)
    nodes, inits = [], []
    heads = {"": 2, "rest": 2 + classes} if classes else {"": 2}
    for head, channels in heads.items():
        parts = []
        for stride in (8, 16, 32):
            weight = np.zeros((channels, 3, stride, stride), np.float32)
            inits.append(numpy_helper.from_array(weight, f"w{head}{stride}"))
            conv = helper.make_node(
                "Conv", ["x", f"w{head}{stride}"], [f"c{head}{stride}"], strides=[stride] * 2
            )
            flat = helper.make_node(
                "Reshape", [f"c{head}{stride}", f"flat{head}"], [f"r{head}{stride}"]
            )
            nodes += [conv, flat]
            parts.append(f"r{head}{stride}")
        inits.append(numpy_helper.from_array(np.array([1, channels, -1], np.int64), f"flat{head}"))
        nodes.append(helper.make_node("Concat", parts, [f"cat{head}"], axis=2))
    inits += [
        numpy_helper.from_array(np.array([1, 2, count], np.int64), "shape"),
        numpy_helper.from_array((points * strides if pixels else points)[None], "anchors"),
        numpy_helper.from_array(strides, "strides"),
    ]
    centres = "y" if not classes else "xy"
    nodes += [
        helper.make_node("Reshape", ["cat", "shape"], ["grid"]),
        helper.make_node("Add", ["grid", "anchors"], ["centres"]),
        helper.make_node("Mul", ["centres", "strides"], [centres]),
    ]
    if classes:
        nodes.append(helper.make_node("Concat", ["xy", "catrest"], ["y"], axis=1))
    graph = helper.make_graph(
        nodes,
        "toy",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, height, width])],
        [
            helper.make_tensor_value_info(
                "y", TensorProto.FLOAT, [1, 4 + classes if classes else 2, count]
            )
        ],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    if classes:
        names = {i: f"class{i}" for i in range(classes)}
        for key, value in {"names": repr(names), "imgsz": f"[{height}, {width}]"}.items():
            entry = model.metadata_props.add()
            entry.key, entry.value = key, value
    onnx.save(model, str(path))
    return path


def write_tiny_depth_model(path: Path) -> Path:
    """An ONNX 'depth model' with dynamic batch, height and width: the channel mean."""
    import onnx
    from onnx import TensorProto, helper

    node = helper.make_node("ReduceMean", ["pixel_values", "axes"], ["depth"], keepdims=0)
    graph = helper.make_graph(
        [node],
        "tiny_depth",
        [helper.make_tensor_value_info("pixel_values", TensorProto.FLOAT, ["n", 3, "h", "w"])],
        [helper.make_tensor_value_info("depth", TensorProto.FLOAT, ["n", "h", "w"])],
        [helper.make_tensor("axes", TensorProto.INT64, [1], [1])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


@pytest.fixture(scope="session")
def tiny_depth(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_depth_model(tmp_path_factory.mktemp("depth") / "tiny_depth.onnx")


@pytest.fixture(scope="session")
def depth_model() -> Path:
    """The architecture-only Depth Anything v2-Small that `make setup` builds."""
    try:
        return depth_model_path()
    except ModelLoadError as err:
        pytest.skip(f"architecture-only depth model not built: {err}")


@pytest.fixture(scope="session")
def demo_model() -> Path:
    try:
        return demo_model_path()
    except ModelLoadError as err:
        pytest.skip(f"demo model not installed: {err}")


@pytest.fixture(scope="session")
def demo_video() -> Path:
    if not DEMO_VIDEO.is_file():
        pytest.skip(f"demo video missing: {DEMO_VIDEO} (apt-get install opencv-doc)")
    return DEMO_VIDEO


@pytest.fixture(scope="session")
def small_video(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_video(tmp_path_factory.mktemp("media") / "small.mp4", frames=40)


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # One person box centred at (32, 32), 20 wide, 10 high, in 64×64 input pixels.
    return write_tiny_detector(
        tmp_path_factory.mktemp("models") / "tiny.onnx", [(32, 32, 20, 10, 0.9, 0.0)]
    )


@pytest.fixture(scope="session")
def follower_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_follower_detector(tmp_path_factory.mktemp("models") / "follower.onnx")


# -- the demo detector's runs and INT8 artifacts, made once a session ---------------------------
# Several files score against the same FP32 reference and test the same INT8 artifacts; each
# costs seconds here and three times that on the slower CI CPUs, so none is made twice.

REFERENCE_FRAMES = 50
INT8_CALIBRATION_FRAMES = 16
INT8_FIDELITY_FRAMES = 30


@pytest.fixture(scope="session")
def demo_results(demo_model: Path, demo_video: Path) -> list[Any]:
    """The demo detector's pipeline results (frames kept) on the first REFERENCE_FRAMES frames
    of the demo video, ONNX Runtime FP32, never a plan: the reference the fidelity tests score
    against, as `collect_detections` gives it. Source mode auto, not its file: on a file they
    are the same, every frame in order, which test_real_model checks."""
    from visionrt import Pipeline, SourceOptions

    pipeline = Pipeline(
        [str(demo_video)],
        demo_model,
        "onnxruntime",
        source_options=SourceOptions(max_frames=REFERENCE_FRAMES),
        plan=False,
    )
    try:
        return list(pipeline)
    finally:
        pipeline.close()


@pytest.fixture(scope="session")
def demo_reference(demo_results: list[Any]) -> list[Any]:
    """The reference's detections, one per frame (see demo_results)."""
    return [result.detections for result in demo_results]


_REFERENCE_RUNS: dict[tuple[Any, ...], list[Any]] = {}


def remember_reference(patch: pytest.MonkeyPatch) -> None:
    """Let `compare_to_reference` (and export's fidelity, which calls it) run the FP32 reference
    of a model on a video once a session: its later calls with the same model file, video,
    frames and threshold get the same detections. Candidates still run every time: only a call
    for the reference backend with default options, which no export target loads, is kept."""
    import visionrt.bench.reference as module
    from visionrt.backends import BackendOptions

    real = module.detections_over

    def detections_over(
        video: Any,
        model: Any,
        backend: str = module.REFERENCE_BACKEND,
        options: BackendOptions | None = None,
        frames: int = 200,
        conf: float = 0.25,
    ) -> list[Any]:
        if backend != module.REFERENCE_BACKEND or (options or BackendOptions()) != BackendOptions():
            return real(video, model, backend, options, frames, conf)
        model_file = Path(model).stat()
        key = (str(video), str(model), model_file.st_size, model_file.st_mtime_ns, frames, conf)
        if key not in _REFERENCE_RUNS:
            _REFERENCE_RUNS[key] = real(video, model, backend, options, frames, conf)
        return list(_REFERENCE_RUNS[key])

    patch.setattr(module, "detections_over", detections_over)


@pytest.fixture
def reference_once(monkeypatch: pytest.MonkeyPatch) -> None:
    remember_reference(monkeypatch)


@pytest.fixture(scope="session")
def demo_artifacts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("demo-artifacts")


def export_demo(
    target: str, model: Path, video: Path, out: Path, fidelity_frames: int = INT8_FIDELITY_FRAMES
) -> Any:
    """`target` of the demo detector, calibrated on INT8_CALIBRATION_FRAMES frames (quick; the
    fidelity bounds of test_export and test_backend_conformance hold with a wide margin)."""
    from visionrt.export import export_model

    return export_model(
        model,
        target,
        calibrate=video,
        frames=INT8_CALIBRATION_FRAMES,
        out=out,
        progress=False,
        fidelity_frames=fidelity_frames,
    )


@pytest.fixture(scope="session")
def onnx_int8(demo_model: Path, demo_video: Path, demo_artifacts: Path) -> Any:
    """The demo detector's ONNX INT8 artifact, its fidelity measured by the export on
    INT8_FIDELITY_FRAMES frames (test_export reads it and its report)."""
    with pytest.MonkeyPatch.context() as patch:
        remember_reference(patch)
        return export_demo("onnx-int8", demo_model, demo_video, demo_artifacts)


@pytest.fixture(scope="session")
def openvino_int8(demo_model: Path, demo_video: Path, demo_artifacts: Path) -> Any:
    """The demo detector's OpenVINO INT8 IR, not scored by the export (its tests score it)."""
    if importlib.util.find_spec("openvino") is None or importlib.util.find_spec("nncf") is None:
        pytest.skip("openvino and nncf not installed (pip install 'visionrt[openvino]')")
    return export_demo("openvino-int8", demo_model, demo_video, demo_artifacts, fidelity_frames=0)


def scraped(pipeline: Any, info: dict[str, str] | None = None) -> tuple[Any, str]:
    """Run `pipeline` with a metrics server set up as `visionrt run --metrics-port` sets it up
    (MetricsServer.follow); the summary and the endpoint's text at the end."""
    from visionrt.telemetry.metrics import MetricsServer, scrape

    server = MetricsServer(0, info=info)
    server.follow(pipeline)
    pipeline.telemetry.add_listener(server)
    server.start()
    try:
        summary = pipeline.run()
        text = scrape(server.url)
    finally:
        server.close()
        pipeline.close()
    return summary, text


def run_cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """`visionrt ARGS` in this process: its exit code and what it printed on stderr."""
    from visionrt.cli.main import main

    try:
        main(args)
    except SystemExit as exit_info:
        code = exit_info.code
        return (code if isinstance(code, int) else 1), capsys.readouterr().err
    return 0, capsys.readouterr().err


# Seconds after which a wait in a test gives up: only a guard that turns a hang into a failure,
# never a measure of speed (a loaded 2-core machine may take many times a quiet one's time).
HANG_SECONDS = 600.0
POLL_SECONDS = 0.01  # until()'s poll


def finishes(work: Callable[[], T], what: str = "it", seconds: float = HANG_SECONDS) -> T:
    """`work()` on a thread of its own: its value, or its exception raised here; fails when it
    has not returned after `seconds` (a hang, as when a run waits for something that never
    comes), rather than hanging the test session."""
    outcome: list[tuple[bool, Any]] = []

    def run() -> None:
        try:
            outcome.append((True, work()))
        except BaseException as err:
            outcome.append((False, err))

    thread = threading.Thread(target=run, name=f"finishes: {what}", daemon=True)
    thread.start()
    thread.join(seconds)
    assert outcome, f"{what} never ended (gave up after {seconds:.0f} s)"
    done, value = outcome[0]
    if not done:
        raise value
    return value  # type: ignore[no-any-return]


def until(condition: Callable[[], object], what: str, seconds: float = HANG_SECONDS) -> None:
    """Wait until `condition()` holds: an event the test waits for, polled; fails only after
    `seconds` of polling (a guard against a hang). It counts polls, not the clock: a loaded
    machine stretches each poll and so only waits longer."""
    for _ in range(max(1, int(seconds / POLL_SECONDS))):
        if condition():
            return
        time.sleep(POLL_SECONDS)
    pytest.fail(f"never {what} (gave up after at least {seconds:.0f} s)")


def sigint_state(status: Path = Path("/proc/thread-self/status")) -> tuple[bool, bool]:
    """(blocked, ignored) for SIGINT as the kernel sees it in a thread's `status` file (a
    process's /proc/PID/status: its main thread's mask)."""
    fields = dict(line.split(":\t", 1) for line in status.read_text().splitlines())
    bit = 1 << (signal.SIGINT - 1)
    return bool(int(fields["SigBlk"], 16) & bit), bool(int(fields["SigIgn"], 16) & bit)
