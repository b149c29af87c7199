"""Which files a source gets and what each is called: the one home of that choice for `run`,
`serve`, a cluster's workers and its driver (each names the files its own way: a run after the
source, a service with a number when a name comes back, a worker after its attempt)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from visionrt.sinks.base import Sink
from visionrt.sinks.coco import CocoSink
from visionrt.sinks.mot import MotSink
from visionrt.sinks.table import CsvSink
from visionrt.sinks.video import VideoSink

# A source's file of the kind a suffix names (".mp4", ".mot.txt", ...) → where it is written.
Namer = Callable[[str], Path]


@dataclass(frozen=True, slots=True)
class SourceFiles:
    """Each source's files: its annotated MP4 (`video`; encoded with `codec` at `preset`, the
    motion windows drawn under the boxes where `draw_regions`), MOT text, COCO results, CSV,
    and on a source the depth model runs on its colourised depth MP4 (`depth_video`) and its
    maps as 16-bit PNG or NPY files (`depth_maps`: png, npy or "")."""

    video: bool = True
    mot: bool = False
    coco: bool = False
    csv: bool = False
    depth_video: bool = False
    depth_maps: str = ""
    codec: str = "libx264"
    preset: str = "veryfast"
    draw_regions: bool = False

    def suffixes(self, depth: bool = False) -> list[str]:
        """The suffixes of a source's files (its name + suffix), in the order they open: the
        MP4 first, so an unknown encoder fails before any other file is opened."""
        chosen = [
            (self.video, ".mp4"),
            (self.mot, ".mot.txt"),
            (self.coco, ".coco.json"),
            (self.csv, ".csv"),
            (depth and self.depth_video, ".depth.mp4"),
            (depth and bool(self.depth_maps), ".depth"),
        ]
        return [suffix for wanted, suffix in chosen if wanted]

    def sinks(self, path: Namer, source_id: int, fps: float, depth: bool = False) -> list[Sink]:
        """Source `source_id`'s sinks, each file at `path(suffix)`; `fps` is its frame rate
        (for the MP4s), `depth` whether the depth model runs on it."""
        made: list[Sink] = []
        for suffix in self.suffixes(depth):
            made.append(self._sink(suffix, path(suffix), source_id, fps))
        return made

    def _sink(self, suffix: str, path: Path, source_id: int, fps: float) -> Sink:
        if suffix == ".mp4":
            return VideoSink(path, fps, self.codec, source_id, self.preset, self.draw_regions)
        if suffix == ".mot.txt":
            return MotSink(path, source_id=source_id)
        if suffix == ".coco.json":
            return CocoSink(path, source_id=source_id)
        if suffix == ".csv":
            return CsvSink(path, source_id=source_id)
        from visionrt.sinks.depth import DepthMapSink, DepthVideoSink  # cv2's colour maps

        if suffix == ".depth.mp4":
            return DepthVideoSink(path, fps, self.codec, source_id=source_id, preset=self.preset)
        return DepthMapSink(path, self.depth_maps, source_id=source_id)


def named_after(folder: Path, name: str) -> Namer:
    """Files in `folder` named after the source: NAME.mp4, NAME.csv, NAME.depth/, ..."""
    return partial(_in_folder, folder, name)


def _in_folder(folder: Path, name: str, suffix: str) -> Path:
    return folder / f"{name}{suffix}"
