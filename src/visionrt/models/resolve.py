"""The model file a backend loads: the one asked for, or a cached copy rewritten for the input size
and batch a run asks for, resolved before any runtime sees it."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from visionrt.errors import ConfigError, ModelLoadError
from visionrt.models.batch import rebatch_onnx
from visionrt.models.reshape import reshape_detector_onnx
from visionrt.models.spec import SELF_DESCRIBING, ModelSpec, read_model_spec
from visionrt.paths import cache_root, file_sha256


@dataclass(frozen=True, slots=True)
class ResolvedModel:
    """A model file of the shape a run asks for.

    `path` is what a backend loads: `source` itself or a cached rewritten copy. `spec` holds the
    source's facts (batch -1 once rewritten for any batch), None for files that only their
    runtime describes (.pt, .engine). `input_size` (height, width) is the size to ask the
    backend for: the one requested, or for a file dynamic in H and W the one its metadata names.
    `not_rebatched` says why a batch-1 ONNX was not rewritten for the batch asked ("" when it
    was, or need not be)."""

    source: Path
    path: Path
    spec: ModelSpec | None
    input_size: tuple[int, int] | None
    batch_rewritten: bool = False
    not_rebatched: str = ""


def resolve_model(
    model: str | Path,
    input_size: tuple[int, int] | None = None,
    batch: int = 1,
    cache_dir: Path | None = None,
    spec: ModelSpec | None = None,
) -> ResolvedModel:
    """The file to load to run `model` at `input_size` (None: its own size) and `batch`.

    An ONNX whose batch axis is fixed at 1 is rewritten for any batch when `batch` > 1 (one that
    cannot be is kept, `not_rebatched` saying why); a static ONNX detector is rewritten for
    another `input_size`. The copies are cached under `cache_root(cache_dir)`, named by the
    content hash, and reused. `spec`: the facts of `model` when the caller has read them.
    Raises ConfigError for a static file other than ONNX (an OpenVINO IR) asked for another
    size, ModelLoadError for an unreadable model or a resize this does not understand."""
    source = Path(model)
    if source.suffix not in SELF_DESCRIBING:
        return ResolvedModel(source, source, None, input_size)
    spec = spec or read_model_spec(source)
    path, rewritten, reason = source, False, ""
    if batch > 1 and source.suffix == ".onnx" and spec.batch == 1:
        try:
            path, rewritten = batched_model(source, cache_dir), True
        except ModelLoadError as err:
            reason = str(err)
    if input_size is not None and not spec.dynamic_hw and tuple(input_size) != spec.input_size:
        if source.suffix != ".onnx":
            height, width = spec.input_size
            raise ConfigError(
                f"inference.input_size {list(input_size)}: {source.name} is fixed at"
                f" {height}x{width} and only ONNX models are rewritten for another size; export"
                " it at that size"
            )
        path = _reshaped(path, input_size, cache_dir)
    if rewritten:
        spec = replace(spec, batch=-1)
    size = input_size or (spec.input_size if spec.dynamic_hw else None)
    return ResolvedModel(source, path, spec, size, rewritten, reason)


def _reshaped(model: Path, input_size: tuple[int, int], cache_dir: Path | None) -> Path:
    height, width = input_size
    root = cache_root(cache_dir)
    target = root / "reshaped" / f"{model.stem}-{file_sha256(model)[:16]}-{height}x{width}.onnx"
    if not target.is_file():
        reshape_detector_onnx(model, height, width, target)
    return target


def sized_model(model: Path, input_size: tuple[int, int] | None, cache_dir: Path | None) -> Path:
    """`model` itself, or a cached copy rewritten for `input_size` (height, width) when that
    differs from the model's own static size. Any runtime that reads ONNX can run the copy."""
    if input_size is None or model.suffix != ".onnx":
        return model
    spec = read_model_spec(model)
    if spec.dynamic_hw or spec.input_size == tuple(input_size):
        return model
    return _reshaped(model, input_size, cache_dir)


def batched_model(model: Path, cache_dir: Path | None) -> Path:
    """A cached copy of the ONNX `model` (batch axis fixed at 1) rewritten for any batch; the
    copy is made once per model content. Raises ModelLoadError when it cannot be rewritten."""
    root = cache_root(cache_dir)
    target = root / "rebatched" / f"{model.stem}-{file_sha256(model)[:16]}-anybatch.onnx"
    if not target.is_file():
        rebatch_onnx(model, target)
    return target
