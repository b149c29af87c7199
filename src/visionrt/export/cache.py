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
