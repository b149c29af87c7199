"""JSON Lines: one line per frame with its detections in source pixels."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

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
        record = result.to_json()
        source, own = result.frame.source_id, result.frame.source_name
        if source < len(self.names):
            name = self.names[source]
            image = own and own != name and own not in self.paths[source : source + 1]
            rest = {key: value for key, value in record.items() if key != "source"}
            record = {"source": name, **({"image": own} if image else {}), **rest}
        self.append(json.dumps(record, separators=(",", ":")) + "\n")
