"""The model files a worker runs, shipped with its settings: a node without the driver's files (no
shared disk) or with other files at those paths gets the driver's bytes, kept by content under
its own cache; a node that has them reads them where they are."""

from __future__ import annotations

import copy
import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from visionrt.errors import ModelLoadError
from visionrt.paths import cache_root, file_sha256

# (section, key) of the settings that name a model file, "" for the top level.
MODEL_KEYS = (("", "model"), ("depth", "model"))
# Files a model file brings along: OpenVINO's weights, ONNX external data.
COMPANIONS = {".xml": (".bin",), ".onnx": (".onnx.data", ".data")}

# model path as the driver names it → (its sha256, the sha256 of the model file it goes with)
Manifest = dict[str, tuple[str, str]]
Bundle = dict[str, bytes]  # model path as the driver names it → its bytes


Keys = tuple[tuple[str, str], ...]


def _named(settings: Mapping[str, Any], keys: Keys = MODEL_KEYS) -> Iterator[tuple[str, str, str]]:
    for section, key in keys:
        values = settings.get(section) if section else settings
        path = (values or {}).get(key) if isinstance(values, Mapping) else None
        if path:
            yield section, key, str(path)


def _files(model: Path) -> list[Path]:
    """The model file and the companions it has."""
    found = [model]
    for suffix in COMPANIONS.get(model.suffix, ()):
        sibling = model.with_name(model.stem + suffix)
        if sibling.is_file():
            found.append(sibling)
    return found


def manifest(settings: Mapping[str, Any]) -> Manifest:
    """Every model file `settings` names, with its companions: what a worker must have."""
    out: Manifest = {}
    for _, _, named in _named(settings):
        model = Path(named)
        if not model.is_file():  # a name the backend resolves (a demo alias): nothing to ship
            continue
        main = file_sha256(model)
        for path in _files(model):
            out[str(path)] = (main if path == model else file_sha256(path), main)
    return out


def check_models(settings: Mapping[str, Any]) -> None:
    """A ModelLoadError for a model file `settings` names that is not on this machine, before
    any worker starts: every worker gets its model files from the driver (`manifest`)."""
    if settings.get("backend") == "null":  # runs without one
        return
    for section, _, named in _named(settings):
        if not Path(named).exists():
            where = f"{section}.model: " if section else ""
            raise ModelLoadError(f"{where}model file not found: {named}")


def bundle(files: Manifest) -> Bundle:
    """The driver's bytes of `files`."""
    return {path: Path(path).read_bytes() for path in files}


def localized(
    settings: Mapping[str, Any],
    files: Manifest,
    fetch: Callable[[], Bundle],
    root: Path | None = None,
    keys: Keys = MODEL_KEYS,
) -> dict[str, Any]:
    """`settings` as this node runs them: model files that are here with the driver's content
    (`files`) are read in place; otherwise the driver's bytes (`fetch`, called at most once)
    are written under `root` (default: visionrt's cache), a model's files together in a
    folder named by its content, and the settings (at `keys`) name them there."""
    if all(_same(Path(path), sha) for path, (sha, _) in files.items()):
        return dict(settings)
    shipped = fetch()
    moved: dict[str, str] = {}
    for path, (sha, main) in files.items():
        target = (root or cache_root() / "shipped") / main[:16] / Path(path).name
        if not _same(target, sha):
            target.parent.mkdir(parents=True, exist_ok=True)
            partial = target.with_name(f".{target.name}.{os.getpid()}.partial")
            partial.write_bytes(shipped[path])
            partial.replace(target)  # whole or absent: another worker may be reading it
        moved[path] = str(target)
    out = copy.deepcopy(dict(settings))
    for section, key, named in _named(settings, keys):
        if named in moved:
            (out[section] if section else out)[key] = moved[named]
    return out


def _same(path: Path, sha: str) -> bool:
    return path.is_file() and file_sha256(path) == sha
