"""Where visionrt's files are: the cache folder it builds into, the demo video, and the content
hash that names what is built from a file."""

from __future__ import annotations

import hashlib
from pathlib import Path

# The demo video, from the Debian package opencv-doc (`make setup` installs it).
DEMO_VIDEO = Path("/usr/share/doc/opencv-doc/examples/data/vtest.avi")


def cache_root(cache_dir: str | Path | None = None) -> Path:
    """Where visionrt keeps what it builds (reshaped and rebatched models, the depth model,
    export artifacts, plans, TensorRT engines): `cache_dir`, or ~/.cache/visionrt."""
    return Path(cache_dir) if cache_dir else Path.home() / ".cache" / "visionrt"


def file_sha256(path: Path, limit: int | None = None) -> str:
    """The SHA-256 of `path`'s bytes (the first `limit` bytes, rounded up to a MiB, when given),
    as hex: cached files built from a file are named by it, so an edited file is rebuilt."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
            if limit is not None and handle.tell() >= limit:
                break
    return digest.hexdigest()
