"""Source names: `rgb=cam0.mp4` names a source; a bare path is named after its file stem."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from visionrt.errors import ConfigError

_NAMED = re.compile(r"([A-Za-z_][A-Za-z0-9_-]*)=(.+)")


def split_name(spec: str) -> tuple[str, str]:
    """`'rgb=cam0.mp4'` → `('rgb', 'cam0.mp4')`; a spec without a name → `('', spec)`.

    A URL's query (`rtsp://h/s?a=b`) is not a name (its scheme comes first), and a file that
    exists under the whole string keeps it as its path."""
    match = _NAMED.fullmatch(spec)
    if match is None or Path(spec).exists():
        return "", spec
    return match.group(1), match.group(2)


def misnamed(spec: str) -> str:
    """The NAME of a `NAME=SOURCE` whose NAME is not a name (`a/b=clip.mp4` → `a/b`); "" when
    `spec` has none, names its source, is a URL (an `=` of its query) or a path that exists."""
    name, equals, _ = spec.partition("=")
    if not equals or not name or "://" in name or _NAMED.fullmatch(spec) or Path(spec).exists():
        return ""
    return name


def default_name(spec: str, index: int) -> str:
    """A source's name when the user gave none: its file stem (`/dev/video2` → `video2`)."""
    return Path(spec.rstrip("/")).stem or f"source{index}"


def unique_names(names: Sequence[str], given: Sequence[bool]) -> list[str]:
    """Names made unique: a name the user gave twice is an error, a default name seen before
    gets the source's index (`vtest`, `vtest-1`)."""
    chosen = [n for n, g in zip(names, given, strict=True) if g]
    twice = sorted({n for n in chosen if chosen.count(n) > 1})
    if twice:
        raise ConfigError(f"source name '{twice[0]}' given twice: expected unique names")
    result: list[str] = []
    for i, (name, is_given) in enumerate(zip(names, given, strict=True)):
        if not is_given and (name in result or name in chosen):
            # The index first (`vtest-1`); past a name the user gave (`vtest-1=other.mp4`),
            # the next free one: two sources never share a name, so never an output file.
            suffix = i
            while f"{name}-{suffix}" in result or f"{name}-{suffix}" in chosen:
                suffix += 1
            name = f"{name}-{suffix}"
        result.append(name)
    return result


def named_specs(specs: Sequence[str]) -> list[tuple[str, str]]:
    """(name, spec) of each source string, named as a run names them: the user's name, else
    its file stem made unique (`vtest`, `vtest-1`)."""
    split = [split_name(spec) for spec in specs]
    given = [bool(name) for name, _ in split]
    names = unique_names([n or default_name(s, i) for i, (n, s) in enumerate(split)], given)
    return [(name, spec) for name, (_, spec) in zip(names, split, strict=True)]
