"""resolve_model: the file a backend loads has the input size and batch asked for, rewritten once
and cached; backends load it as it is and refuse a file of another size."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import write_tiny_detector, write_toy_head

from visionrt.backends import BackendOptions, load_backend
from visionrt.errors import ConfigError, ModelLoadError
from visionrt.models import read_model_spec, resolve_model
from visionrt.types import anchor_count

pytest.importorskip("onnx")


def test_the_model_itself_at_its_own_size(tmp_path: Path) -> None:
    toy = write_toy_head(tmp_path / "toy.onnx", 64, 64)
    for size in (None, (64, 64)):
        resolved = resolve_model(toy, size, cache_dir=tmp_path / "cache")
        assert resolved.path == toy
        assert (resolved.input_size, resolved.batch_rewritten) == (size, False)
    assert not (tmp_path / "cache").exists(), "nothing to rewrite, nothing cached"


def test_another_size_is_a_cached_rewritten_copy(tmp_path: Path) -> None:
    toy = write_toy_head(tmp_path / "toy.onnx", 64, 64)
    resolved = resolve_model(toy, (64, 96), cache_dir=tmp_path)
    assert resolved.path.parent == tmp_path / "reshaped"
    assert resolved.input_size == (64, 96)
    assert resolved.spec is not None
    assert resolved.spec.input_size == (64, 64)
    rewritten = read_model_spec(resolved.path)
    assert rewritten.input_size == (64, 96)
    assert rewritten.output_shape == (1, 2, anchor_count(64, 96))
    stamp = resolved.path.stat().st_mtime_ns
    assert resolve_model(toy, (64, 96), cache_dir=tmp_path).path == resolved.path
    assert resolved.path.stat().st_mtime_ns == stamp, "the rewritten copy should be reused"


def test_a_larger_batch_is_a_cached_copy_for_any_batch(tmp_path: Path) -> None:
    toy = write_toy_head(tmp_path / "toy.onnx", 64, 64)
    resolved = resolve_model(toy, None, batch=4, cache_dir=tmp_path)
    assert resolved.batch_rewritten
    assert not resolved.not_rebatched
    assert resolved.path.parent == tmp_path / "rebatched"
    assert resolved.spec is not None
    assert resolved.spec.batch == -1
    assert read_model_spec(resolved.path).batch == -1
    both = resolve_model(toy, (96, 64), batch=4, cache_dir=tmp_path)
    assert both.path.parent == tmp_path / "reshaped"
    assert read_model_spec(both.path).input_size == (96, 64)
    assert read_model_spec(both.path).batch == -1


def test_a_model_that_cannot_be_rewritten(tmp_path: Path) -> None:
    # The tiny detector's output is a constant table: no batch axis to follow, no anchor grid.
    tiny = write_tiny_detector(tmp_path / "tiny.onnx", [(32, 32, 20, 10, 0.9, 0.0)])
    kept = resolve_model(tiny, None, batch=2, cache_dir=tmp_path)
    assert (kept.path, kept.batch_rewritten) == (tiny, False)
    assert "batch" in kept.not_rebatched
    with pytest.raises(ModelLoadError, match="anchor"):
        resolve_model(tiny, (128, 128), cache_dir=tmp_path)


def test_files_their_runtime_describes_pass_through(tmp_path: Path) -> None:
    checkpoint = tmp_path / "model.pt"
    checkpoint.write_bytes(b"not read")
    resolved = resolve_model(checkpoint, (320, 320), batch=4, cache_dir=tmp_path)
    assert (resolved.path, resolved.spec, resolved.input_size) == (checkpoint, None, (320, 320))


def test_a_static_ir_at_another_size_is_refused(tmp_path: Path) -> None:
    ov = pytest.importorskip("openvino")
    toy = write_toy_head(tmp_path / "toy.onnx", 64, 64)
    ir = tmp_path / "toy.xml"
    ov.save_model(ov.convert_model(str(toy)), str(ir))
    assert resolve_model(ir, (64, 64)).path == ir
    with pytest.raises(ConfigError, match=r"toy.xml is fixed at 64x64 and only ONNX models"):
        resolve_model(ir, (96, 96))


@pytest.mark.parametrize("backend", ["onnxruntime", "null"])
def test_backends_load_the_file_as_it_is(backend: str, tmp_path: Path) -> None:
    toy = write_toy_head(tmp_path / "toy.onnx", 64, 64)
    with pytest.raises(ConfigError, match=r"input_size \[96, 96\]: toy.onnx runs at 64x64"):
        load_backend(backend, toy, BackendOptions(input_size=(96, 96)))
    resolved = resolve_model(toy, (96, 96), cache_dir=tmp_path)
    options = BackendOptions(input_size=resolved.input_size)
    with load_backend(backend, resolved.path, options) as loaded:
        assert loaded.info.inputs[0].shape == (1, 3, 96, 96)
        assert loaded.info.outputs[0].shape == (1, 2, anchor_count(96, 96))


@pytest.mark.parametrize("backend", ["onnxruntime", "null"])
def test_the_task_resolves_before_the_backend_loads(backend: str, tmp_path: Path) -> None:
    from visionrt.tasks import DetectTask

    detector = write_toy_head(tmp_path / "toy.onnx", 64, 64, classes=2)
    options = BackendOptions(batch=2, input_size=(32, 64), cache_dir=tmp_path / "cache")
    task = DetectTask(detector, backend, options)
    try:
        assert task.input_hw == (32, 64)
        assert task.batch_rewritten
        assert task.backend.info.outputs[0].shape[1:] == (6, anchor_count(32, 64))
        assert len(list((tmp_path / "cache" / "reshaped").iterdir())) == 1
        assert task.spec.input_size == (64, 64)  # the model's own facts
    finally:
        task.close()
