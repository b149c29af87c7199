"""The torch backend and its ONNX converter: each op against ONNX Runtime, the demo model against
ONNX Runtime (fp32) and against itself (bf16, by IoU), and the settings and pickles it refuses."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from visionrt import hardware
from visionrt.backends import BackendOptions, load_backend
from visionrt.errors import BackendUnavailable, ConfigError, ModelLoadError
from visionrt.fidelity import box_iou

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from visionrt.backends.onnx_to_torch import convert_onnx  # noqa: E402 - needs torch

RNG = np.random.default_rng(0)
X = (4, 4, 6, 6)  # the default input shape: batch 4, so batch handling is exercised too
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

# Tolerances measured on the demo model over 5 frames of vtest.avi (torch 2.13 CPU vs ORT 1.31):
# box coordinates (input pixels, 0-640) differ by at most 1.6e-3, class scores by 1.7e-6.
BOX_ATOL, SCORE_ATOL = 1e-2, 1e-4


def _const(name: str, array: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(array), name)


def _model(nodes: list[onnx.NodeProto], inits: list[onnx.TensorProto], outputs: int = 1,
           shape: tuple[int, ...] = X, opset: int = 13) -> onnx.ModelProto:  # fmt: skip
    names = [f"y{i}" for i in range(outputs)] if outputs > 1 else ["y"]
    graph = helper.make_graph(
        nodes,
        "case",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
        [helper.make_empty_tensor_value_info(name) for name in names],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def _node(op: str, inputs: list[str], outputs: int = 1, **attrs: object) -> onnx.NodeProto:
    names = [f"y{i}" for i in range(outputs)] if outputs > 1 else ["y"]
    return helper.make_node(op, inputs, names, **attrs)


def _unary(op: str, opset: int = 13, **attrs: object) -> onnx.ModelProto:
    return _model([_node(op, ["x"], **attrs)], [], opset=opset)


def _binary(op: str) -> onnx.ModelProto:  # broadcast against a per-channel constant
    return _model(
        [_node(op, ["x", "c"])], [_const("c", RNG.random((1, 4, 1, 1), np.float32) + 0.5)]
    )


def _with(op: str, consts: list[np.ndarray | None], outputs: int = 1, **attrs: object
          ) -> onnx.ModelProto:  # fmt: skip
    """`op` on x and constant inputs 1, 2, …; None leaves an optional input out."""
    names = ["" if c is None else f"c{i}" for i, c in enumerate(consts, 1)]
    inits = [_const(n, c) for n, c in zip(names, consts, strict=True) if c is not None]
    return _model([_node(op, ["x", *names], outputs, **attrs)], inits, outputs)


def _i64(*values: int) -> np.ndarray:
    return np.asarray(values, np.int64)


def _shape_chain() -> onnx.ModelProto:
    """Shape → Gather → Unsqueeze → Concat → Reshape: shape arithmetic folded at conversion."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "i"], ["g"], axis=0),
        helper.make_node("Div", ["g", "two"], ["h"]),
        helper.make_node("Unsqueeze", ["h", "ax"], ["u"]),
        helper.make_node("Concat", ["u", "rest"], ["shape"], axis=0),
        helper.make_node("Constant", [], ["k"], value_float=3.0),
        helper.make_node("Reshape", ["x", "shape"], ["r"]),
        helper.make_node("Mul", ["r", "k"], ["y"]),
    ]
    inits = [_const("i", np.int64(1)), _const("two", np.int64(2)), _const("ax", _i64(0)),
             _const("rest", _i64(-1))]  # fmt: skip
    return _model(nodes, inits)


CASES: dict[str, Callable[[], onnx.ModelProto]] = {
    "Conv": lambda: _model(
        [_node("Conv", ["x", "w", "b"], pads=[1, 1, 1, 1], strides=[2, 2])],
        [
            _const("w", RNG.random((6, 4, 3, 3), np.float32) - 0.5),
            _const("b", RNG.random(6, np.float32)),
        ],
    ),
    "Conv-group-dilated": lambda: _model(
        [_node("Conv", ["x", "w"], group=2, dilations=[2, 2])],
        [_const("w", RNG.random((4, 2, 2, 2), np.float32))],
    ),
    "ConvTranspose": lambda: _model(
        [_node("ConvTranspose", ["x", "w"], strides=[2, 2])],
        [_const("w", RNG.random((4, 3, 2, 2), np.float32))],
    ),
    "BatchNormalization": lambda: _model(
        [_node("BatchNormalization", ["x", "s", "b", "m", "v"], epsilon=1e-3)],
        [_const(n, RNG.random(4, np.float32) + 0.1) for n in "sbmv"],
    ),
    "MaxPool": lambda: _unary("MaxPool", kernel_shape=[5, 5], pads=[2, 2, 2, 2], strides=[1, 1]),
    "MaxPool-ceil": lambda: _unary("MaxPool", kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1),
    "AveragePool": lambda: _unary(
        "AveragePool", kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2]
    ),
    "GlobalAveragePool": lambda: _unary("GlobalAveragePool"),
    "Resize-nearest": lambda: _with(
        "Resize",
        [None, np.asarray([1, 1, 2, 2], np.float32)],
        mode="nearest",
        coordinate_transformation_mode="asymmetric",
        nearest_mode="floor",
    ),
    "Resize-linear": lambda: _with(
        "Resize",
        [None, None, _i64(4, 4, 9, 9)],
        mode="linear",
        coordinate_transformation_mode="half_pixel",
    ),
    **{
        op: (lambda op=op: _unary(op))
        for op in ("Relu", "Sigmoid", "Tanh", "Erf", "Exp", "Sqrt", "Neg", "Identity")
    },
    "HardSwish": lambda: _unary("HardSwish", opset=14),
    "LeakyRelu": lambda: _unary("LeakyRelu", alpha=0.1),
    "HardSigmoid": lambda: _unary("HardSigmoid", alpha=0.3, beta=0.4),
    "Softmax": lambda: _unary("Softmax", axis=1),
    "Softmax-opset11": lambda: _model([_node("Softmax", ["x"], axis=1)], [], opset=11),
    **{op: (lambda op=op: _binary(op)) for op in ("Add", "Sub", "Mul", "Div", "Pow")},
    "MatMul": lambda: _model(
        [_node("MatMul", ["x", "w"])], [_const("w", RNG.random((6, 5), np.float32))]
    ),
    "Gemm": lambda: _model(
        [_node("Gemm", ["x", "w", "b"], transB=1, alpha=0.5)],
        [_const("w", RNG.random((5, 6), np.float32)), _const("b", RNG.random(5, np.float32))],
        shape=(3, 6),
    ),
    "Clip": lambda: _with("Clip", [np.float32(0.2), np.float32(0.7)]),
    "Concat": lambda: _model([_node("Concat", ["x", "x"], axis=1)], []),
    "Split": lambda: _with("Split", [_i64(1, 3)], outputs=2, axis=1),
    "Split-equal": lambda: _model([_node("Split", ["x"], 2, axis=2)], [], outputs=2),
    "Slice": lambda: _with("Slice", [_i64(1, -4), _i64(3, 1 << 62), _i64(1, 3), _i64(1, 2)]),
    "Reshape": lambda: _with("Reshape", [_i64(4, 0, -1)]),
    "Flatten": lambda: _unary("Flatten", axis=2),
    "Transpose": lambda: _unary("Transpose", perm=[0, 2, 1, 3]),
    "Unsqueeze": lambda: _with("Unsqueeze", [_i64(1, -1)]),
    "Squeeze": lambda: _model(
        [_node("Squeeze", ["x", "a"])], [_const("a", _i64(0))], shape=(1, 4, 6, 6)
    ),
    "Gather": lambda: _model([_node("Gather", ["x", "i"], axis=1)], [_const("i", _i64(0, -1, 2))]),
    "Gather-scalar": lambda: _model(
        [_node("Gather", ["x", "i"], axis=3)], [_const("i", np.int64(2))]
    ),
    "Cast": lambda: _model(
        [helper.make_node("Mul", ["x", "k"], ["m"]), _node("Cast", ["m"], to=TensorProto.INT64)],
        [_const("k", np.float32(10))],
    ),
    "ReduceMean": lambda: _unary("ReduceMean", axes=[2, 3]),
    "ReduceSum": lambda: _with("ReduceSum", [_i64(1)], keepdims=0),
    "ReduceMax": lambda: _unary("ReduceMax", axes=[1], keepdims=1),
    "Shape-folding": _shape_chain,
    # The ops Depth Anything v2's export adds (a ViT: layer norms, a class token expanded over
    # the batch, the position-embedding grid computed from the input size).
    "LayerNormalization": lambda: _model(
        [_node("LayerNormalization", ["x", "s", "b"], axis=-1, epsilon=1e-6)],
        [_const("s", RNG.random(6, np.float32) + 0.5), _const("b", RNG.random(6, np.float32))],
        opset=17,
    ),
    "LayerNormalization-axis": lambda: _model(
        [_node("LayerNormalization", ["x", "s"], axis=2)],
        [_const("s", RNG.random((6, 6), np.float32) + 0.5)],
        opset=17,
    ),
    "Expand": lambda: _model(
        [helper.make_node("Expand", ["c", "s"], ["e"]), _node("Add", ["x", "e"])],
        [_const("c", RNG.random((1, 4, 1, 6), np.float32)), _const("s", _i64(4, 1, 6, 1))],
    ),
    "Where": lambda: _model(
        [helper.make_node("GreaterOrEqual", ["x", "t"], ["m"]), _node("Where", ["m", "x", "z"])],
        [_const("t", np.float32(0.5)), _const("z", np.float32(-1.0))],
    ),
    "Range-folded": lambda: _model(
        [
            helper.make_node("Shape", ["x"], ["s"]),
            helper.make_node("Gather", ["s", "i"], ["n"], axis=0),
            helper.make_node("Range", ["zero", "n", "one"], ["r"]),
            helper.make_node("Cast", ["r"], ["f"], to=TensorProto.FLOAT),
            _node("Add", ["x", "f"]),
        ],
        [_const("i", np.int64(3)), _const("zero", np.int64(0)), _const("one", np.int64(1))],
    ),
}


def _attention(mask: np.ndarray | None, scale_op: str = "Mul", reuse: bool = False,
               opset: int = 13) -> onnx.ModelProto:  # fmt: skip
    """Attention as a ViT's export writes it, on x as (batch, heads, tokens, dim): Q, K and V
    are x times three weights; `reuse` makes the logits an output too (no fusing then)."""
    nodes = [helper.make_node("MatMul", ["x", w], [n]) for w, n in
             (("wq", "q"), ("wk", "k"), ("wv", "v"))]  # fmt: skip
    nodes += [
        helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
        helper.make_node("MatMul", ["q", "kt"], ["logits"]),
        helper.make_node(scale_op, ["logits", "scale"], ["scaled"]),
    ]
    inits = [_const(w, RNG.standard_normal((6, 6)).astype(np.float32)) for w in ("wq", "wk", "wv")]
    inits.append(_const("scale", np.float32(0.4 if scale_op == "Mul" else 2.5)))
    last = "scaled"
    if mask is not None:
        nodes.append(helper.make_node("Add", ["scaled", "mask"], ["masked"]))
        inits.append(_const("mask", mask))
        last = "masked"
    softmax = helper.make_node("Softmax", [last], ["p"], **({"axis": -1} if opset >= 13 else {}))
    nodes += [softmax, _node("MatMul", ["p", "v"])]
    model = _model(nodes, inits, shape=(2, 3, 5, 6), opset=opset)
    if reuse:
        model.graph.output.append(helper.make_empty_tensor_value_info("logits"))
    return model


ATTENTION = {
    "scale": lambda: _attention(None),
    "div": lambda: _attention(None, "Div"),
    "zero-mask": lambda: _attention(np.zeros((1, 1, 5, 5), np.float32)),
    "mask": lambda: _attention(np.triu(np.full((5, 5), -1e4, np.float32), 1)),
    "reused": lambda: _attention(None, reuse=True),
    # Opset 11's Softmax without an axis is over axes 1 on (coerced to 2-D): no attention.
    "opset11-default-axis": lambda: _attention(None, opset=11),
}


@pytest.mark.parametrize("case", list(ATTENTION))
def test_attention_runs_fused_as_onnxruntime_runs_it(case: str) -> None:
    model = ATTENTION[case]()
    fused = sum(node.op == "Attention" for node in convert_onnx(model).nodes)
    assert fused == (0 if case in ("reused", "opset11-default-axis") else 1)
    _compare(model, (2, 3, 5, 6))


def _gelu(order: str, one: float = 1.0) -> onnx.ModelProto:
    """An erf GELU as exports write it: x · ((erf(x/√2) + 1) · ½) ("half-last", torch's
    dynamo export), or (x · (erf(x/√2) + 1)) · ½ ("x-first"); `one` other than 1 is no GELU."""
    nodes = [
        helper.make_node("Div", ["x", "root2"], ["d"]),
        helper.make_node("Erf", ["d"], ["e"]),
        helper.make_node("Add", ["e", "one"], ["a"]),
    ]
    if order == "half-last":
        nodes += [helper.make_node("Mul", ["a", "half"], ["h"]), _node("Mul", ["x", "h"])]
    else:
        nodes += [helper.make_node("Mul", ["x", "a"], ["m"]), _node("Mul", ["m", "half"])]
    inits = [_const("root2", np.float32(2**0.5)), _const("one", np.float32(one))]
    return _model([*nodes], [*inits, _const("half", np.float32(0.5))])


@pytest.mark.parametrize(
    ("order", "one", "fused"), [("half-last", 1.0, 1), ("x-first", 1.0, 1), ("half-last", 2.0, 0)]
)
def test_gelu_runs_fused_as_onnxruntime_runs_it(order: str, one: float, fused: int) -> None:
    model = _gelu(order, one)
    assert sum(node.op == "Gelu" for node in convert_onnx(model).nodes) == fused
    _compare(model, X)


def _compare(model: onnx.ModelProto, shape: tuple[int, ...]) -> None:
    x = RNG.random(shape, np.float32) + 0.1
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = session.run(None, {"x": x})
    with torch.inference_mode():
        got = convert_onnx(model)(torch.from_numpy(x))
    assert len(got) == len(expected)
    for ours, theirs in zip(got, expected, strict=True):
        assert ours.shape == theirs.shape
        assert ours.numpy().dtype == theirs.dtype
        np.testing.assert_allclose(ours.numpy(), theirs, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case", list(CASES))
def test_converted_op_matches_onnxruntime(case: str) -> None:
    model = CASES[case]()
    shape = tuple(d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim)
    _compare(model, shape)


def test_static_batch_export_runs_at_another_batch() -> None:
    # An Ultralytics export fixes batch 1 in its Reshape constants; the converter follows the
    # input's batch, so batch 3 gives the three batch-1 results stacked.
    model = _model(
        [_node("Reshape", ["x", "s"])], [_const("s", _i64(1, 4, -1))], shape=(1, 4, 6, 6)
    )
    module = convert_onnx(model)
    x = torch.from_numpy(RNG.random((3, 4, 6, 6), np.float32))
    with torch.inference_mode():
        stacked = torch.cat([module(x[i : i + 1])[0] for i in range(3)])
        assert torch.equal(module(x)[0], stacked)


def test_unsupported_op_is_named() -> None:
    model = _model([_node("TopK", ["x", "k"], 2, axis=1)], [_const("k", _i64(2))], outputs=2)
    with pytest.raises(ModelLoadError, match="does not support op\\(s\\) TopK"):
        convert_onnx(model)


def test_dynamic_shape_input_is_refused() -> None:
    model = _model([helper.make_node("Cast", ["x"], ["s"], to=TensorProto.INT64),
                    _node("Reshape", ["x", "s"])], [], shape=(4,))  # fmt: skip
    with pytest.raises(ModelLoadError, match="input 1 must be constant"):
        convert_onnx(model)


def test_converted_graph_traces_without_graph_breaks() -> None:
    module = convert_onnx(CASES["Conv"]())
    compiled = torch.compile(module, backend="eager", fullgraph=True)
    x = torch.rand(X)
    with torch.inference_mode():
        assert torch.equal(compiled(x)[0], module(x)[0])


def test_half_and_channels_last_reach_weights_and_constants() -> None:
    # float64 stands in for half: the same Module.to path, and it runs on any CPU.
    module = convert_onnx(CASES["Conv"]()).to(torch.float64).to(memory_format=torch.channels_last)
    weight = module.nodes[0].fn.weight
    assert weight.dtype == torch.float64
    assert weight.is_contiguous(memory_format=torch.channels_last)
    scaled = convert_onnx(_binary("Mul")).to(torch.float64)
    assert scaled.nodes[0].c0.dtype == torch.float64  # constant operands are buffers


# -- the backend on tiny models ------------------------------------------------------------------
def test_tiny_detector_through_load_backend(tiny_model: Path) -> None:
    backend = load_backend("torch", tiny_model, BackendOptions(threads=1))
    x = RNG.random((1, 3, 64, 64), np.float32)
    expected = ort.InferenceSession(str(tiny_model)).run(None, {"images": x})[0]
    (got,) = backend.infer({"images": x})
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, expected, atol=1e-6)
    assert backend.info.runtime == "torch"
    assert backend.info.device == "cpu"
    assert backend.info.inputs[0].shape == (1, 3, 64, 64)
    assert backend.info.outputs[0].shape == (1, 6, 8)


def test_compile_default_on_cpu(tmp_path: Path) -> None:
    path = tmp_path / "conv.onnx"
    onnx.save(CASES["Conv"](), path)
    x = RNG.random(X, np.float32)
    eager = load_backend("torch", path).infer({"x": x})[0]
    compiled = load_backend("torch", path, BackendOptions(settings={"compile": "default"}))
    assert compiled.info.details["compile"] == "default"
    np.testing.assert_allclose(compiled.infer({"x": x})[0], eager, atol=1e-4)


@pytest.mark.parametrize(
    ("options", "match"),
    [
        (BackendOptions(precision="fp16"), "fp16"),
        (BackendOptions(precision="int8"), "int8"),
        (BackendOptions(settings={"cuda_graphs": "true"}), "cuda_graphs needs device cuda"),
        (BackendOptions(settings={"compile": "fast"}), "compile: expected one of"),
        (BackendOptions(settings={"channels_last": "maybe"}), "expected true or false"),
        (BackendOptions(settings={"cuda_graph": "true"}), "unknown"),
    ],
)
def test_settings_refused_on_cpu(tiny_model: Path, options: BackendOptions, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        load_backend("torch", tiny_model, options)


def test_input_size_other_than_the_files_is_refused(tiny_model: Path) -> None:
    # The task resolves a file of the size asked for (test_model_resolve); the backend reshapes
    # nothing.
    with pytest.raises(ConfigError, match=r"input_size \[128, 128\]: tiny.onnx runs at 64x64"):
        load_backend("torch", tiny_model, BackendOptions(input_size=(128, 128)))


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error of a CPU-only torch")
def test_cuda_without_gpu_is_unavailable(tiny_model: Path) -> None:
    with pytest.raises(BackendUnavailable, match="sees no CUDA device 'cuda'"):
        load_backend("torch", tiny_model, BackendOptions(device="cuda"))


def test_pt_without_ultralytics_is_unavailable(tmp_path: Path, demo_model: Path) -> None:
    if importlib.util.find_spec("ultralytics") is not None:
        pytest.skip("ultralytics is installed: .pt files load")
    checkpoint = demo_model.parent / "best.pt"  # a real Ultralytics detection checkpoint
    with pytest.raises(BackendUnavailable, match="needs the 'ultralytics' package"):
        load_backend("torch", checkpoint)
    fake = tmp_path / "best.pt"  # not a checkpoint at all: said so, not blamed on a package
    fake.write_bytes(b"neither a zip nor a pickle")
    with pytest.raises(ModelLoadError, match="not a readable torch checkpoint"):
        load_backend("torch", fake)


# -- .pt checkpoints: only the classes of an Ultralytics detector are unpickled ------------------
class _Call:
    """Pickles as "call `function` with `args`": what a malicious checkpoint does on load."""

    def __init__(self, function: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self.function, self.args = function, args

    def __reduce__(self) -> tuple[Callable[..., Any], tuple[Any, ...]]:
        return self.function, self.args


@pytest.fixture
def fake_ultralytics(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An empty `ultralytics` package first on sys.path (shadowing a real one), so a .pt gets
    past the package check to the pickle; yields the package folder."""
    package = tmp_path / "site" / "ultralytics"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    for name in [m for m in sys.modules if m.partition(".")[0] == "ultralytics"]:
        monkeypatch.delitem(sys.modules, name)  # a real one comes back after the test
    monkeypatch.syspath_prepend(str(package.parent))
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    yield package
    for name in [m for m in sys.modules if m.partition(".")[0] == "ultralytics"]:
        del sys.modules[name]


def _demo_checkpoint() -> Path:
    spec = importlib.util.find_spec("fall_detection")
    best = Path(spec.origin).parent / "models" / "best.pt" if spec and spec.origin else None
    if best is None or not best.is_file():
        pytest.skip("needs the fall_detection demo package and its Ultralytics best.pt")
    return best


def test_pt_gadget_does_not_run(tmp_path: Path, fake_ultralytics: Path) -> None:
    from torch.fx.graph_module import _forward_from_src

    # The prefix rule this replaced ("torch." or "ultralytics.") let this exec its code.
    marker = tmp_path / "ran"
    code = f"open({str(marker)!r}, 'w').close()\ndef forward(self):\n    pass\n"
    gadget = tmp_path / "gadget.pt"
    torch.save({"model": _Call(_forward_from_src, (code, {}))}, gadget)
    with pytest.raises(ModelLoadError, match=r"refusing to unpickle torch\.fx\.graph_module\."):
        load_backend("torch", gadget)
    assert not marker.exists()


def test_pt_never_imports_a_refused_module(tmp_path: Path, fake_ultralytics: Path) -> None:
    # Under the ultralytics name, so the old prefix rule would have imported it (and run it).
    marker = tmp_path / "imported"
    payload = fake_ultralytics / "gadget.py"
    payload.write_text("def boom() -> None:\n    pass\n")
    module = importlib.import_module("ultralytics.gadget")  # pickle needs it at save time only
    gadget = tmp_path / "import.pt"
    torch.save({"model": _Call(module.boom, ())}, gadget)
    del sys.modules["ultralytics.gadget"]
    payload.write_text(f"open({str(marker)!r}, 'w').close()\n\n\ndef boom() -> None:\n    pass\n")
    with pytest.raises(ModelLoadError, match=r"refusing to unpickle ultralytics\.gadget\.boom"):
        load_backend("torch", gadget)
    assert not marker.exists()
    assert "ultralytics.gadget" not in sys.modules


def test_pt_allow_list_covers_a_real_checkpoint() -> None:
    from visionrt.backends.torch_checkpoint import PT_ALLOWED_GLOBALS

    named = set(torch.serialization.get_unsafe_globals_in_checkpoint(str(_demo_checkpoint())))
    assert "ultralytics.nn.tasks.DetectionModel" in named
    assert named <= PT_ALLOWED_GLOBALS, f"not allow-listed: {sorted(named - PT_ALLOWED_GLOBALS)}"


_FAKE_DETECTION_MODEL = '''
import torch
from torch import nn


class DetectionModel(nn.Module):
    """Stands in for Ultralytics': its pickled name, `names`, `stride`, (predictions, maps)."""

    def __init__(self, names):
        super().__init__()
        self.conv = nn.Conv2d(3, 4 + len(names), 1)
        self.names = names
        self.stride = torch.tensor([8.0, 16.0, 32.0])

    def forward(self, images):
        maps = self.conv(images)
        pooled = [nn.functional.avg_pool2d(maps, int(s)).flatten(2) for s in self.stride]
        return torch.cat(pooled, 2), pooled
'''


def test_pt_loads_with_its_class_names_in_id_order(tmp_path: Path, fake_ultralytics: Path) -> None:
    # Through the real path: allow-list, import of the allowed class, weights_only load.
    (fake_ultralytics / "nn").mkdir()
    (fake_ultralytics / "nn" / "__init__.py").write_text("")
    (fake_ultralytics / "nn" / "tasks.py").write_text(_FAKE_DETECTION_MODEL)
    tasks = importlib.import_module("ultralytics.nn.tasks")
    net = tasks.DetectionModel({2: "car", 0: "person", 1: "bicycle"}).eval()
    checkpoint = tmp_path / "best.pt"
    torch.save({"model": net, "train_args": {"imgsz": 64}}, checkpoint)

    from visionrt.models import spec_from_backend

    backend = load_backend("torch", checkpoint, BackendOptions(threads=1))
    assert backend.info.details["class_names"] == ["person", "bicycle", "car"]
    assert backend.info.details["source"] == "ultralytics .pt"
    assert backend.info.outputs[0].shape == (1, 7, 8 * 8 + 4 * 4 + 2 * 2)
    assert spec_from_backend(checkpoint, backend.info).class_names == ("person", "bicycle", "car")
    x = RNG.random((1, 3, 64, 64), np.float32)
    with torch.inference_mode():
        expected = net(torch.from_numpy(x))[0].numpy()
    np.testing.assert_allclose(backend.infer({"images": x})[0], expected, atol=1e-5)


def test_pt_real_checkpoint_gets_past_the_allow_list(fake_ultralytics: Path) -> None:
    # Allowed names are imported; the empty ultralytics lacks them, which is one clear error.
    with pytest.raises(ModelLoadError, match=r"needs ultralytics\..* which the installed"):
        load_backend("torch", _demo_checkpoint())


# -- the demo model on real frames ---------------------------------------------------------------
@pytest.fixture(scope="module")
def frames(demo_video: Path) -> list[np.ndarray]:
    from visionrt.bench import prepared_inputs
    from visionrt.preprocess import InputLayout

    return prepared_inputs(str(demo_video), (640, 640), InputLayout.NCHW_FLOAT, frames=5)


@pytest.fixture(scope="module")
def reference(demo_model: Path, frames: list[np.ndarray]) -> list[np.ndarray]:
    session = ort.InferenceSession(str(demo_model), providers=["CPUExecutionProvider"])
    return [session.run(None, {"images": x})[0] for x in frames]


def _detections(outputs: list[np.ndarray], demo_video: Path) -> list[object]:
    import cv2

    from visionrt.postprocess.yolo import HeadLayout, PostprocessOptions, decode_one
    from visionrt.preprocess import compute_letterbox

    height, width = cv2.VideoCapture(str(demo_video)).read()[1].shape[:2]
    box = compute_letterbox((height, width), (640, 640))
    return [decode_one(o[0], HeadLayout.ANCHOR_FREE, box, PostprocessOptions()) for o in outputs]


def _matched_share(reference: list[np.ndarray], candidate: list[np.ndarray], video: Path
                   ) -> tuple[int, float]:  # fmt: skip
    """Reference boxes over all frames, and the share a candidate box of the same class
    overlaps with IoU >= 0.5."""
    matched = total = 0
    pairs = zip(*(_detections(o, video) for o in (reference, candidate)), strict=True)
    for ref, cand in pairs:
        total += len(ref)
        if len(ref) and len(cand):
            same_class = ref.class_id[:, None] == cand.class_id[None, :]
            matched += int(((box_iou(ref.xyxy, cand.xyxy) >= 0.5) & same_class).any(1).sum())
    return total, matched / max(total, 1)


@pytest.mark.slow
def test_fp32_matches_onnxruntime(demo_model: Path, frames: list, reference: list) -> None:
    backend = load_backend("torch", demo_model, BackendOptions(threads=2))
    for x, expected in zip(frames, reference, strict=True):
        (got,) = backend.infer({"images": x})
        assert got.shape == expected.shape == (1, 6, 8400)
        np.testing.assert_allclose(got[:, :4], expected[:, :4], atol=BOX_ATOL, rtol=0)
        np.testing.assert_allclose(got[:, 4:], expected[:, 4:], atol=SCORE_ATOL, rtol=0)
    # the same frames as one batch of 5
    (batched,) = backend.infer({"images": np.concatenate(frames)})
    np.testing.assert_allclose(batched, np.concatenate(reference), atol=BOX_ATOL, rtol=0)


@pytest.mark.slow
@pytest.mark.skipif(not hardware.cpu_has_bf16(), reason="no BF16 instructions: torch refuses bf16")
def test_bf16_detections_match_fp32_by_iou(
    demo_model: Path, demo_video: Path, frames: list, reference: list
) -> None:
    backend = load_backend("torch", demo_model, BackendOptions(precision="bf16", threads=2))
    assert backend.info.precision == "bf16"
    candidate = [backend.infer({"images": x})[0] for x in frames]
    # Measured: 20 of 20 reference boxes matched, mean best IoU 0.994 (autocast bf16).
    total, share = _matched_share(reference, candidate, demo_video)
    assert total >= 10
    assert share >= 0.9


@pytest.mark.slow
def test_folded_input_gives_the_host_letterboxs_values(
    demo_model: Path, demo_video: Path, frames: list
) -> None:
    """`fold_preprocess`: the host letterboxes into uint8 BGR NHWC and the backend converts,
    reorders and scales on its device — the model's input equals the host float32 letterbox's
    within one float32 ulp (the padding), and so do its outputs, at any batch."""
    import cv2

    from visionrt.preprocess import compute_letterbox
    from visionrt.preprocess.letterbox import InputLayout, letterbox_into

    backend = load_backend("torch", demo_model, BackendOptions(threads=2, fold_preprocess=True))
    assert backend.info.inputs[0].shape == (1, 640, 640, 3)
    assert backend.info.inputs[0].dtype == "uint8"
    assert backend.info.details["fold_preprocess"] is True
    plain = load_backend("torch", demo_model, BackendOptions(threads=2))
    capture = cv2.VideoCapture(str(demo_video))
    folded, unfolded = [], []
    for _ in range(3):
        image = capture.read()[1]
        box = compute_letterbox(image.shape[:2], (640, 640))
        u8 = np.empty((1, 640, 640, 3), np.uint8)
        letterbox_into(image, u8[0], box, InputLayout.NHWC_U8_BGR)
        f32 = np.empty((1, 3, 640, 640), np.float32)
        letterbox_into(image, f32[0], box, InputLayout.NCHW_FLOAT)
        folded.append(u8)
        unfolded.append(f32)
        as_input = backend._unfold(torch.from_numpy(u8)).contiguous().numpy()  # type: ignore[attr-defined]
        np.testing.assert_array_max_ulp(as_input, f32, maxulp=1)
    (got,) = backend.infer({"images": np.concatenate(folded)})
    (expected,) = plain.infer({"images": np.concatenate(unfolded)})
    np.testing.assert_allclose(got[:, :4], expected[:, :4], atol=BOX_ATOL, rtol=0)
    np.testing.assert_allclose(got[:, 4:], expected[:, 4:], atol=SCORE_ATOL, rtol=0)


def test_folding_a_model_not_of_three_channels_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "grey.onnx"
    onnx.save(_model([_node("Relu", ["x"])], [], shape=(1, 1, 8, 8)), str(path))
    with pytest.raises(ConfigError, match=r"fold_preprocess: grey\.onnx takes"):
        load_backend("torch", path, BackendOptions(fold_preprocess=True))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_layer_norm_in_reduced_precision_accumulates_in_fp32(dtype: str) -> None:
    """Tokens whose squared deviations overflow fp16 when summed (values ~300, 384 wide): the
    converted norm in fp16/bf16 is finite and the fp32 result rounded."""
    model = _model(
        [_node("LayerNormalization", ["x", "s", "b"], axis=-1, epsilon=1e-6)],
        [_const("s", RNG.random(384, np.float32) + 0.5), _const("b", RNG.random(384, np.float32))],
        shape=(2, 50, 384),
        opset=17,
    )
    x = torch.from_numpy(RNG.standard_normal((2, 50, 384)).astype(np.float32) * 300)
    module = convert_onnx(model)
    with torch.inference_mode():
        (reference,) = module(x)
        (reduced,) = module.to(getattr(torch, dtype))(x.to(getattr(torch, dtype)))
    assert torch.isfinite(reduced).all()
    tolerance = 2e-2 if dtype == "bfloat16" else 4e-3
    torch.testing.assert_close(reduced.float(), reference, rtol=tolerance, atol=tolerance * 4)


# -- CUDA ----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def gpu_reference(demo_model: Path, frames: list) -> list[np.ndarray]:
    backend = load_backend("torch", demo_model, BackendOptions(device="cuda"))
    return [backend.infer({"images": x})[0] for x in frames]


@pytest.mark.gpu
@pytest.mark.slow
@needs_cuda
@pytest.mark.parametrize(
    "settings", [{"compile": "default"}, {"cuda_graphs": "true"}, {"channels_last": "false"}]
)
def test_cuda_fp32_variants_match_eager(
    demo_model: Path, frames: list, gpu_reference: list, settings: dict[str, str]
) -> None:
    backend = load_backend("torch", demo_model, BackendOptions(device="cuda", settings=settings))
    assert backend.info.device == "cuda:0"
    for x, expected in zip(frames, gpu_reference, strict=True):
        (got,) = backend.infer({"images": x})  # a new input each call: a replay must not be stale
        assert got.dtype == np.float32
        np.testing.assert_allclose(got[:, :4], expected[:, :4], atol=BOX_ATOL, rtol=0)
        np.testing.assert_allclose(got[:, 4:], expected[:, 4:], atol=1e-3, rtol=0)


@pytest.mark.gpu
@pytest.mark.slow
@needs_cuda
@pytest.mark.parametrize(
    "settings", [{}, {"cuda_graphs": "true"}, {"compile": "default"}, {"compile": "max-autotune"}]
)
def test_cuda_fp16_detections_match_fp32_by_iou(
    demo_model: Path, demo_video: Path, frames: list, gpu_reference: list, settings: dict
) -> None:
    options = BackendOptions(device="cuda", precision="fp16", settings=settings)
    backend = load_backend("torch", demo_model, options)
    candidate = [backend.infer({"images": x})[0] for x in frames]
    total, share = _matched_share(gpu_reference, candidate, demo_video)
    assert total >= 10
    assert share >= 0.9


@pytest.mark.gpu
@pytest.mark.slow
@needs_cuda
@pytest.mark.parametrize("settings", [{}, {"cuda_graphs": "true"}])
def test_cuda_folded_input_matches_the_host_float_input(
    demo_model: Path, frames: list, gpu_reference: list, settings: dict[str, str]
) -> None:
    """The host letterbox in uint8, converted and scaled on the GPU (in the graph where graphs
    are on), against the host's float32 input: the same outputs."""
    options = BackendOptions(device="cuda", fold_preprocess=True, settings=settings)
    backend = load_backend("torch", demo_model, options)
    for x, expected in zip(frames, gpu_reference, strict=True):
        rgb = np.rint(x[0] * 255).astype(np.uint8)  # the host's input, back to its uint8 pixels
        (got,) = backend.infer({"images": rgb.transpose(1, 2, 0)[None, :, :, ::-1]})
        np.testing.assert_allclose(got[:, :4], expected[:, :4], atol=BOX_ATOL, rtol=0)
        np.testing.assert_allclose(got[:, 4:], expected[:, 4:], atol=1e-3, rtol=0)


@pytest.mark.gpu
@pytest.mark.slow
@needs_cuda
def test_cuda_outputs_are_not_reused_buffers(demo_model: Path, frames: list) -> None:
    options = BackendOptions(device="cuda", settings={"cuda_graphs": "1"})
    backend = load_backend("torch", demo_model, options)
    first = backend.infer({"images": frames[0]})[0]
    kept = first.copy()
    backend.infer({"images": frames[1]})
    np.testing.assert_array_equal(first, kept)


def test_a_batchs_preparing_is_captured_once_per_key_and_replayed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With graphs on, `prepare` captures a call once per key and context and replays it
    after; a capture the runtime refuses leaves that key eager (the graph machinery faked:
    CI has no CUDA)."""
    from visionrt.backends import torch_device

    captured: list[Any] = []

    class Graph:
        def __init__(self, call: Callable[[], Any]) -> None:
            self.call = call

        def replay(self) -> None:
            self.call()

    def capture(call: Callable[[], Any], device: Any) -> tuple[Graph, Any]:
        if captured and captured[-1] == "refuse":
            raise RuntimeError("operation not permitted when stream is capturing")
        captured.append(call)
        return Graph(call), call()

    monkeypatch.setattr(torch_device, "capture_call", capture)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    runner = torch_device.DeviceRunner(
        lambda x: [x], torch.device("cpu"), torch.float32, False, (4, 4), 8, True, 1
    )
    calls: list[str] = []
    with runner.scope():
        assert runner.rows(3) == 4  # a graph's size: the next power of two
        for _ in range(3):
            runner.prepare("a", lambda: calls.append("a"))
        captured.append("refuse")
        for _ in range(2):
            runner.prepare("b", lambda: calls.append("b"))
    assert len(captured) == 2  # "a" once; "b" refused
    assert calls == ["a"] * 4 + ["b"] * 2  # a's capture ran it once, then 3 replays
