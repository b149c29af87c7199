"""Sources: nothing → Frame (video files, cameras, network streams, image folders, synthetic)."""

from visionrt.sources.base import Source, SourceOptions, SourceStats
from visionrt.sources.registry import ROWS, SourceRow, open_source

__all__ = ["ROWS", "Source", "SourceOptions", "SourceRow", "SourceStats", "open_source"]
