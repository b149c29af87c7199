"""An output folder's files from an earlier run, found before a run writes there: the run is
refused in one line naming them, or, with the user's consent (`--overwrite`), they are removed
first, so that one run's outputs never mix with another's nor are replaced unasked."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterable
from pathlib import Path

from visionrt.errors import ConfigError
from visionrt.sinks.base import unwritable

SUMMARY = "summary.json"
# What a run stopped before it finished leaves: a file before its rename (`cam.partial.mp4`), a
# cluster attempt's (`cam.attempt2.mp4`, `cam.part2.attempt1.mp4`).
_UNFINISHED = re.compile(r"\.partial(\.|$)|\.attempt\d+(\.|$)")
SHOWN = 5  # files named in the refusal; the rest are counted


def earlier_outputs(folder: Path, writes: Iterable[str]) -> list[Path]:
    """What an earlier run left in `folder` that this one would mix with or replace: its
    summary.json and the outputs it lists there; the files and folders of a run stopped before
    it finished; and any of the names this run `writes` already there. Sorted, each once."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    names = set(writes)
    found = {
        entry
        for entry in folder.iterdir()
        if entry.name in names or _UNFINISHED.search(entry.name) is not None
    }
    summary = folder / SUMMARY
    if summary.is_file():
        found |= {summary, *_listed(summary, folder)}
    return sorted(found)


def _listed(summary: Path, folder: Path) -> list[Path]:
    """The outputs `summary` lists that are in `folder` (by name: a relative path was the
    earlier run's, from its own working folder); a telemetry file elsewhere is not."""
    try:
        outputs = json.loads(summary.read_text(encoding="utf-8")).get("outputs", [])
    except (OSError, ValueError, AttributeError):
        return []  # not a summary this code wrote: the file itself is named all the same
    here = folder.resolve()
    listed = []
    for output in outputs if isinstance(outputs, list) else []:
        path = Path(str(output))
        if path.is_absolute() and path.parent.resolve() != here:
            continue
        if (folder / path.name).exists():
            listed.append(folder / path.name)
    return listed


def claim_folder(folder: Path, writes: Iterable[str], overwrite: bool) -> list[Path]:
    """An earlier run's outputs in `folder` (`earlier_outputs`): a ConfigError naming them and
    the flag, unless `overwrite`; then they are returned, for `remove_outputs` once the run is
    about to write (a run that fails to start removes nothing)."""
    stale = earlier_outputs(folder, writes)
    if stale and not overwrite:
        shown = ", ".join(path.name for path in stale[:SHOWN])
        more = f" and {len(stale) - SHOWN} more" if len(stale) > SHOWN else ""
        raise ConfigError(
            f"output folder {folder} holds another run's outputs ({shown}{more}): give another"
            " --out, or --overwrite to replace them"
        )
    return stale


def remove_outputs(paths: Iterable[Path], keep: Iterable[Path] = ()) -> list[Path]:
    """Remove `paths` (files, or folders with what is in them), except `keep` (a run's own
    sources: it reads them before it replaces them); what was removed. A SinkError naming the
    first that cannot be."""
    kept = {Path(path).resolve() for path in keep}
    removed = []
    for path in paths:
        if path.resolve() in kept:
            continue
        try:
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
        except FileNotFoundError:
            continue
        except OSError as err:
            raise unwritable(path, err) from err
        removed.append(path)
    return removed
