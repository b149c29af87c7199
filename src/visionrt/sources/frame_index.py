"""Where each frame of a video file sits, read from its packets (nothing decoded but a check):
frame n's presentation timestamp and the keyframe to seek to for it, so a reader can start at
frame n without decoding the n frames before it, numbering every frame as a reader from the
first frame would."""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from typing import Any

# Packets read past frame n to place it: B-frame reordering moves a frame a few packets at most.
REORDER_MARGIN = 32
# Frames decoded from the start to check that the decoder gives them in timestamp order (a
# "packed bitstream" AVI, say, gives 1 2 3 5 4 6: its numbers cannot come from timestamps).
ORDER_CHECK = 48


@dataclass(frozen=True, slots=True)
class FrameIndex:
    """`pts[n]`: frame n's presentation timestamp (stream time base), for the frames read;
    `keys`: the keyframes' timestamps, sorted; `complete`: every packet of the file was read
    (so `len(pts)` is its frame count)."""

    pts: tuple[int, ...]
    keys: tuple[int, ...]
    complete: bool

    def pts_of(self, frame: int) -> int | None:
        """Frame `frame`'s timestamp; None past what was read."""
        return self.pts[frame] if 0 <= frame < len(self.pts) else None

    def key_before(self, pts: int) -> int:
        """The timestamp of the last keyframe at or before `pts` (where a seek lands)."""
        at = bisect_right(self.keys, pts)
        return self.keys[at - 1] if at else self.keys[0]

    def keyframes(self) -> list[int]:
        """The frame numbers of the keyframes read."""
        place = {pts: n for n, pts in enumerate(self.pts)}
        return sorted(place[key] for key in self.keys if key in place)


def index_frames(path: str, upto: int | None = None) -> FrameIndex | str:
    """The index of video file `path`'s frames (the first `upto` of them and a margin; None:
    all), or why its frames cannot be placed by timestamp: then only decoding from the first
    frame numbers them right."""
    import av

    try:
        container = av.open(path)
    except (av.FFmpegError, OSError) as err:
        return f"cannot open: {err}"
    try:
        if not container.streams.video:
            return "no video stream"
        stream = container.streams.video[0]
        stamps: list[int] = []
        keys: list[int] = []
        limit = None if upto is None else upto + REORDER_MARGIN
        complete = True
        try:
            for packet in container.demux(stream):
                if not packet.size:  # a flush packet, or an empty one: no frame
                    continue
                if packet.pts is None:
                    return "packets without timestamps"
                stamps.append(packet.pts)
                if packet.is_keyframe:
                    keys.append(packet.pts)
                if limit is not None and len(stamps) >= limit:
                    complete = False
                    break
        except av.FFmpegError as err:
            return f"unreadable packets: {err}"
        if not keys:
            return "no keyframe"
        ordered = sorted(stamps)
        if len(set(ordered)) != len(ordered):
            return "repeated timestamps"
        if not _decodes_in_order(container, stream, ordered):
            return "frames decoded out of timestamp order"
        return FrameIndex(tuple(ordered), tuple(sorted(keys)), complete)
    finally:
        container.close()


def seek_frames(
    container: Any, stream: Any, path: str, start: int, end: int
) -> tuple[int | None, int | None] | str:
    """The timestamps of frames `start` and `end` of the video file `path` (None for 0: its
    first frame, its end), `container` (open on it, reading `stream`) sought to the keyframe
    before frame `start`; or why the frames cannot be placed by timestamp."""
    import av

    index = index_frames(path, max(start, end))
    if isinstance(index, str):
        return index
    start_pts = index.pts_of(start) if start else None
    if start and start_pts is None:
        return f"frame {start} is past its last frame"
    if start_pts is not None:
        try:
            container.seek(index.key_before(start_pts), stream=stream)
        except av.FFmpegError as err:
            return f"cannot seek: {err}"
    return start_pts, index.pts_of(end) if end else None


def _decodes_in_order(container: Any, stream: Any, ordered: list[int]) -> bool:
    """Whether the first frames the decoder gives carry the first timestamps, in order."""
    import av

    container.seek(ordered[0], stream=stream, backward=True)
    expected = iter(ordered[:ORDER_CHECK])
    want = next(expected, None)
    try:
        for frame in container.decode(stream):
            if want is None:
                return True
            if frame.pts != want:
                return False
            want = next(expected, None)
    except av.FFmpegError:
        return False
    return want is None
