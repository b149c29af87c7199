"""Sources: nothing → Frame (video files, cameras, network streams, image folders, synthetic)."""

from visionrt.sources.base import Source, SourceOptions, SourceStats, open_source

__all__ = ["Source", "SourceOptions", "SourceStats", "open_source"]
