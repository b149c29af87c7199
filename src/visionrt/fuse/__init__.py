"""Fuse: a frame's decoded task results → the frame's result, per source and in frame order
(reused results on unchanged frames, tracking, distances from depth, depth smoothing, zones and
lines). `base` holds the one-screen contract; `checkpoint` takes a source's state after a frame
and gives it back to the steps of a Pipeline that resumes the source (a cluster's retry)."""

from visionrt.fuse.analytics import AnalyticsFuser
from visionrt.fuse.base import Fused, Fuser
from visionrt.fuse.bytetrack import Tracker
from visionrt.fuse.checkpoint import Checkpoint, resume_steps, take_checkpoint
from visionrt.fuse.depth import DepthFuser, DepthSmoother, box_distance
from visionrt.fuse.ocsort import OcSortTracker
from visionrt.fuse.reuse import ReuseFuser, SeenFuser
from visionrt.fuse.shapes import SourceAnalytics, check_analytics, parse_analytics
from visionrt.fuse.track_options import TRACKERS, TrackOptions
from visionrt.fuse.tracking import TrackFuser, make_tracker

__all__ = [
    "TRACKERS",
    "AnalyticsFuser",
    "Checkpoint",
    "DepthFuser",
    "DepthSmoother",
    "Fused",
    "Fuser",
    "OcSortTracker",
    "ReuseFuser",
    "SeenFuser",
    "SourceAnalytics",
    "TrackFuser",
    "TrackOptions",
    "Tracker",
    "box_distance",
    "check_analytics",
    "make_tracker",
    "parse_analytics",
    "resume_steps",
    "take_checkpoint",
]
