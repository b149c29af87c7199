"""What the API takes as a camera, checked before anything opens: its name (and the names
`visionrt serve` gives the cameras it starts with), its tasks, and its URI (a file only inside
the service's folders, judged by every path it reaches)."""

from __future__ import annotations

import glob
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from visionrt.errors import ConfigError
from visionrt.sources.base import IMAGE_SUFFIXES
from visionrt.sources.naming import default_name, misnamed, split_name, unique_names

NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,63}")
TASKS = ("detect", "depth")
STREAMS = ("rtsp://", "rtsps://", "rtmp://", "http://", "https://", "srt://", "udp://", "tcp://")
# `visionrt serve` has no --depth: its depth model is the config's.
NO_DEPTH = (
    "tasks: depth needs a depth model, and this service runs none: start it with one:"
    " --set depth.model=MODEL, or depth: {model: MODEL} in its --config"
)


def check_name(name: Any) -> None:
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise ConfigError(
            f"name: expected a letter or _ then up to 63 letters, digits, _ or -, got {name!r}"
        )


def camera_names(specs: Sequence[str]) -> list[tuple[str, str]]:
    """(name, URI) of each source `serve` starts with: the name given (`cam1=URI`), or the one
    `run` gives it (its file stem, made unique) with what a camera's name cannot hold replaced
    by _ (`synthetic:64x48:100` → `synthetic_64x48_100`). A NAME= that is not a name is a
    ConfigError naming it (a path of that name does not exist)."""
    split = [split_name(spec) for spec in specs]
    for spec in specs:
        if bad := misnamed(spec):
            raise ConfigError(
                f"source '{spec}': '{bad}' is not a name (NAME=URI: a letter or _, then up to"
                " 63 letters, digits, _ or -), and no file of that path exists"
            )
    stems = [name or _as_name(default_name(uri, i)) for i, (name, uri) in enumerate(split)]
    names = unique_names(stems, [bool(name) for name, _ in split])
    for name, spec in zip(names, specs, strict=True):
        try:
            check_name(name)
        except ConfigError as err:
            raise ConfigError(f"source '{spec}': {err}") from None
    return [(name, uri) for name, (_, uri) in zip(names, split, strict=True)]


def _as_name(stem: str) -> str:
    """A default name as a camera's: room left for a `-N` that makes it unique."""
    name = re.sub(r"[^A-Za-z0-9_-]", "_", stem)[:58]
    return name if NAME.fullmatch(name) else f"_{name}"[:58]


def check_tasks(tasks: Any) -> tuple[str, ...]:
    if isinstance(tasks, str) or not isinstance(tasks, Sequence) or "detect" not in tasks:
        raise ConfigError(f"tasks: expected a list holding detect (and depth), got {tasks!r}")
    unknown = [t for t in tasks if t not in TASKS]
    if unknown:
        raise ConfigError(f"tasks: unknown task {unknown[0]!r}: expected detect, depth")
    return tuple(dict.fromkeys(tasks))


def check_uri(uri: Any, files: Sequence[str]) -> None:
    """A URI the API may open: a stream URL, a camera (/dev/videoN), `synthetic:…`, or a video
    file, image, image folder or glob inside one of `files`. Every path it reaches is judged
    once links are resolved (`opened_paths`), so neither `..` nor a link leaves them."""
    if not isinstance(uri, str) or not uri or len(uri) > 2048 or "\n" in uri or "\0" in uri:
        raise ConfigError("uri: expected a stream URL, a camera or a file path")
    lowered = uri.lower()
    if lowered.startswith(STREAMS) or lowered.startswith("synthetic:"):
        return
    if re.fullmatch(r"/dev/video\d+", uri):
        return
    allowed = [Path(folder).resolve() for folder in files]
    for path in opened_paths(uri):
        resolved = path.resolve()
        if not any(resolved.is_relative_to(folder) for folder in allowed):
            where = ", ".join(str(f) for f in allowed) or "none: set serve.files"
            reaches = "" if str(path) == uri else f": it reaches {str(path)!r}"
            raise ConfigError(
                "uri: files are opened only from the folders in serve.files"
                f" ({where}), got {uri!r}{reaches}"
            )


def opened_paths(uri: str) -> list[Path]:
    """The paths a source of `uri` may read, links not yet resolved: `uri` itself, every
    path a glob matches (as `ImageSource` matches it), and every image file a folder lists
    (each may be a link of its own)."""
    path = Path(uri)
    paths = [path]
    if any(c in uri for c in "*?["):
        paths += [Path(p) for p in sorted(glob.glob(uri))]
    if path.is_dir():
        paths += sorted(p for p in path.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
    return paths
