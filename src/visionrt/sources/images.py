"""Image files, folders and globs, read with OpenCV in name order."""

from __future__ import annotations

import glob
import time
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import cv2
import numpy as np
import numpy.typing as npt

from visionrt.errors import SourceNotFoundError
from visionrt.sources.base import IMAGE_SUFFIXES, Source, SourceOptions
from visionrt.types import Frame


class ImageSource(Source):
    """Every image file in name order (from `start_frame` to `end_frame` when given); an
    unreadable one is skipped and counted as corrupt."""

    damage_hint = "unreadable images"

    def __init__(self, spec: str, source_id: int, options: SourceOptions) -> None:
        super().__init__()
        self.name = spec
        self.source_id = source_id
        self.options = options
        path = Path(spec)
        if path.is_dir():
            files = sorted(
                p for p in path.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file()
            )
        elif path.is_file():
            files = [path]
        else:
            files = sorted(
                Path(p)
                for p in glob.glob(spec)
                if Path(p).suffix.lower() in IMAGE_SUFFIXES and Path(p).is_file()
            )
        if not files:
            raise SourceNotFoundError(f"no images found at {spec}")
        self.files = files
        self.frame_count = len(files)
        self.check_start()

    def frames(self) -> Iterator[Frame]:
        index = 0
        start = self.options.start_frame
        limits = (self.options.max_frames, self.options.end_frame)
        last = min((n for n in limits if n), default=0)
        for path in self.files:
            if self._stopped or (last and index >= last):
                return
            if index < start:
                # Numbered, not read: a file no reader knows is passed over, as a run from the
                # first image passes it over (decoding every image before the start to find
                # a damaged one would cost what the start saves).
                index += cv2.haveImageReader(str(path))
                continue
            # IMREAD_COLOR always decodes to 8-bit BGR; OpenCV's stubs say MatLike (any dtype).
            image = cast("npt.NDArray[np.uint8] | None", cv2.imread(str(path), cv2.IMREAD_COLOR))
            if image is None:
                self.stats.corrupt += 1
                self.stats.events.append(f"unreadable image skipped: {path}")
                continue
            yield Frame(
                source_id=self.source_id,
                index=index,
                pixels=image,
                timestamp=float(index),
                captured_at=time.perf_counter(),
                source_name=str(path),
                item=str(path),
            )
            index += 1
            self.stats.frames = index
        self.check_ending()
