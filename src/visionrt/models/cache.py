"""The artifact cache: one folder per (model, target, runtime version, settings), with a report."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from visionrt.paths import cache_root, file_sha256

REPORT = "report.json"
# What names an export's folder besides its settings (`artifact_dir`), as its report keeps them.
_EXPORT_KEYS = ("model_sha256", "target", "runtime")
# Enough of a video to tell files apart without reading gigabytes.
_VIDEO_HASH_BYTES = 4 << 20


def default_root() -> Path:
    return cache_root() / "artifacts"


def settings_hash(settings: Mapping[str, Any]) -> str:
    text = json.dumps(settings, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def video_fingerprint(video: Path) -> str:
    """Size and hash of the first MiBs: what changes when the calibration video does."""
    return f"{video.stat().st_size}:{file_sha256(video, _VIDEO_HASH_BYTES)[:16]}"


def artifact_dir(
    root: Path, model_hash: str, target: str, runtime: str, settings: Mapping[str, Any]
) -> Path:
    return root / f"{model_hash[:12]}-{target}-{runtime}-{settings_hash(settings)}"


def read_cached(folder: Path, filename: str) -> tuple[Path, dict[str, Any]] | None:
    """The artifact and its report when a previous export completed in `folder`."""
    artifact, report = folder / filename, folder / REPORT
    if not (artifact.is_file() and report.is_file()):
        return None
    try:
        return artifact, json.loads(report.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None  # a damaged report: export again


def write_report(folder: Path, report: Mapping[str, Any]) -> None:
    """Write report.json atomically (a reader never sees half a report)."""
    handle, tmp = tempfile.mkstemp(dir=folder, prefix=".report-", suffix=".json")
    with os.fdopen(handle, "w", encoding="utf-8") as out:
        json.dump(report, out, indent=2, sort_keys=False)
        out.write("\n")
    os.replace(tmp, folder / REPORT)


@contextmanager
def staging(folder: Path) -> Iterator[Path]:
    """A scratch folder next to `folder` that becomes `folder` only if the block succeeds, so an
    interrupted export never leaves something that looks like a finished artifact."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}-"))
    try:
        yield scratch
        if folder.exists():  # a stale or half-written folder from an older run
            shutil.rmtree(folder)
        os.replace(scratch, folder)
    finally:
        if scratch.exists():
            shutil.rmtree(scratch, ignore_errors=True)


def export_report(artifact: Path) -> dict[str, Any] | None:
    """The report of the export `artifact` is (read from its cache folder), or None when it is
    not a completed export's file."""
    found = read_cached(artifact.parent, artifact.name)
    return found[1] if found is not None else None


def sized_export(
    artifact: Path, input_hw: tuple[int, int], roots: tuple[Path, ...] = ()
) -> Path | None:
    """The same export as `artifact` (the same model, target, runtime and recipe) made at
    `input_hw`, when a completed one is cached beside it or under `roots`: the same calibration
    first, then any. None: none is cached, or `artifact` is not an export's file."""
    report = export_report(artifact) or {}
    model_hash, target, runtime = (str(report.get(key) or "") for key in _EXPORT_KEYS)
    settings = report.get("settings")
    if not (model_hash and target and runtime and isinstance(settings, dict)):
        return None
    wanted = [int(side) for side in input_hw]
    home = artifact.parent.parent
    folders = [artifact_dir(home, model_hash, target, runtime, {**settings, "imgsz": wanted})]
    for root in dict.fromkeys((home, *roots)):
        if root.is_dir():
            folders += sorted(root.glob(f"{model_hash[:12]}-{target}-{runtime}-*"))
    for folder in dict.fromkeys(folders):
        found = read_cached(folder, artifact.name)
        if found is None:
            continue
        made = found[1]
        recipe = (made.get("settings") or {}).get("recipe")
        if made.get("input_hw") == wanted and recipe == settings.get("recipe"):
            return found[0]
    return None
