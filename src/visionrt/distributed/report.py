"""What a cluster run did, as the coordinator keeps it: each source's progress (the last frame
committed, attempts, the gap a lost worker left) and the run's totals (summary.json `cluster`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# Frames a live attempt read and did not deliver (stale, say) before its worker died with the
# counts of why: the frame numbers its delivered frames skipped.
UNREPORTED = "cluster: dropped by an attempt whose worker was lost"


@dataclass
class SourceState:
    """One source's progress: the last frame committed (-1: none), frames written, frames a
    retried attempt sent again (dropped, not written twice), the attempts its units took, and
    why it failed ("" while it has not). A live stream's retry numbers its frames from 0
    again: `base` places them after the gap, whose frames (`lost`, estimated from the
    stream's rate and how long it was not read) are counted as dropped, `worker lost`. A file
    read in real time keeps its own numbers: its retry starts where the stream has got to
    (`reached`), and the frames it passed over are the gap."""

    committed: int = -1
    written: int = 0
    duplicates: int = 0
    attempts: int = 0
    error: str = ""
    units: int = 0
    done_units: int = 0
    summary: dict[str, Any] = field(default_factory=dict)  # its last attempt's run summary
    # Each unit's last summary (a file split into frame ranges has several), by unit id.
    unit_summaries: dict[int, dict[str, Any]] = field(default_factory=dict)
    held: int = 0  # frames of later ranges received, held until the ranges before are written
    base: int | None = 0  # added to a live attempt's frame numbers (None: not known yet)
    lost: int = 0
    # What earlier attempts that ended (a regroup) dropped: the last summary has only its own.
    dropped_before: dict[str, int] = field(default_factory=dict)
    regrouped: int = 0  # attempts its worker ended to take in a lost stream
    first_at: float = 0.0  # when its first and last frames were committed (monotonic)
    last_at: float = 0.0

    def unit_finals(self) -> list[dict[str, Any]]:
        """Each unit's last summary in frame order (a split file's ranges; one for most)."""
        return [self.unit_summaries[u] for u in sorted(self.unit_summaries)] or [self.summary]

    def reached(self, now: float) -> int:
        """The frame a live stream has got to at `now`: the one after the last committed, and
        those its rate so far puts in the time since."""
        span = self.last_at - self.first_at
        rate = (self.written - 1) / span if self.written > 1 and span > 0 else 0.0
        return self.committed + 1 + round((now - self.last_at) * rate)


@dataclass
class ClusterReport:
    """What the run did across workers (summary.json `cluster`)."""

    workers_seen: set[str] = field(default_factory=set)
    attempts: int = 0
    reassignments: int = 0
    lost_workers: int = 0
    regroups: int = 0  # busy workers of live streams told to restart with a lost stream added
    stale_batches: int = 0  # from an attempt already given up (an actor that answered late)
    frames_by_worker: dict[str, int] = field(default_factory=dict)
    # What each worker said of itself when its last group ended (node, memory, threads).
    worker_info: dict[str, dict[str, Any]] = field(default_factory=dict)
    sources: dict[str, SourceState] = field(default_factory=dict)
    seconds: float = 0.0
    # When the first frames came back (seconds from the start: the workers' start, model loads
    # and warm-up included) and how many: the rate after them is the running rate.
    first_result: float = 0.0
    first_frames: int = 0

    @property
    def failed(self) -> dict[str, str]:
        return {name: s.error for name, s in self.sources.items() if s.error}

    def to_json(self) -> dict[str, Any]:
        return {
            "workers": sorted(self.workers_seen),
            "attempts": self.attempts,
            "reassignments": self.reassignments,
            "lost_workers": self.lost_workers,
            "regroups": self.regroups,
            "stale_batches": self.stale_batches,
            "frames_by_worker": dict(sorted(self.frames_by_worker.items())),
            "fps_by_worker": {
                w: round(n / self.seconds, 2) if self.seconds else 0.0
                for w, n in sorted(self.frames_by_worker.items())
            },
            "node_by_worker": {w: i.get("node", "") for w, i in sorted(self.worker_info.items())},
            "rss_mb_by_worker": {
                w: i.get("rss_mb", 0.0) for w, i in sorted(self.worker_info.items())
            },
            "sources": {
                name: {
                    "frames_out": s.written,
                    "duplicates_dropped": s.duplicates,
                    "attempts": s.attempts,
                    "lost_frames": s.lost,
                    "regrouped": s.regrouped,
                    "error": s.error,
                }
                for name, s in self.sources.items()
            },
            "seconds": round(self.seconds, 3),
            "first_result_seconds": round(self.first_result, 3),
            "fps_after_first_result": self.fps_after_first_result(),
        }

    def fps_after_first_result(self) -> float:
        """Frames written after the first ones came back, over the time since: the run's rate
        without its workers' start (0.0 before two results)."""
        running = self.seconds - self.first_result
        frames = sum(s.written for s in self.sources.values()) - self.first_frames
        return round(frames / running, 2) if self.first_result and running > 0 else 0.0
