"""JSON Lines: one line per frame with its detections in source pixels."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from visionrt.sinks.base import FileSink
from visionrt.types import FrameResult


class JsonlSink(FileSink):
    """Lines are flushed per frame, so a killed process leaves every line written so far (in the
    `.partial` file); the file is created at the first line, so a run that fails before its
    first frame leaves nothing behind.

    `names[i]` is source i's name (`vtest`, `vtest-1`, `rgb`: what summary.json calls it) and
    becomes each line's `source`; a frame whose own name is neither that nor `paths[i]` (the
    source as given) — an image of a folder, named by its file — keeps it as `image`. Without
    `names`, `source` is the frame's own name."""

    def __init__(
        self, path: str | Path, names: Sequence[str] = (), paths: Sequence[str] = ()
    ) -> None:
        super().__init__(path, one_source=False)
        self.names, self.paths = list(names), list(paths)

    def write(self, result: FrameResult) -> None:
        self.takes(result)
        record = jsonl_record(result, self.names, self.paths)
        self.append(json.dumps(record, separators=(",", ":")) + "\n")


def jsonl_record(
    result: FrameResult, names: Sequence[str] = (), paths: Sequence[str] = ()
) -> dict[str, Any]:
    """`result`'s line as JsonlSink writes it (see there for `names` and `paths`); a cluster's
    workers make theirs with it too."""
    record = result.to_json()
    source, item = result.frame.source_id, result.frame.item
    if source < len(names):
        name = names[source]
        image = item if item and item != name and item not in paths[source : source + 1] else ""
        rest = {key: value for key, value in record.items() if key != "source"}
        record = {"source": name, **({"image": image} if image else {}), **rest}
    return record
