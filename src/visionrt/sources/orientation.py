"""How a decoded video frame is shown upright: its display matrix (a phone's portrait clip is
stored landscape, `rotate=90` metadata) read as quarter turns, applied as players apply it."""

from __future__ import annotations

from typing import Any

import numpy as np

# A display matrix that mirrors the picture is left as stored: PyAV reads it as a rotation
# alone (a horizontal flip reads 180°), and turning it would put it upside down.
MIRRORED = -1


def display_turns(frame: Any) -> int:
    """Quarter turns counter-clockwise (0-3) that show the PyAV `frame` upright, from its
    display matrix (PyAV's `rotation`: degrees counter-clockwise, so `rotate=90` metadata reads
    -90, three turns); MIRRORED for a matrix that also mirrors. 0 without one (or with a PyAV
    too old to read it)."""
    rotation = getattr(frame, "rotation", 0)
    side_data = getattr(frame, "side_data", None)
    matrix = side_data.get("DISPLAYMATRIX") if side_data is not None else None
    if matrix is not None:
        a, b, _, c, d = np.frombuffer(bytes(matrix), np.int32)[:5].astype(np.int64)
        if a * d - b * c < 0:
            return MIRRORED
    return round(rotation / 90) % 4


def upright(image: Any, turns: int) -> Any:
    """`image` (H×W×3) turned `turns` quarter turns counter-clockwise: a new, contiguous array."""
    import cv2

    codes = {1: cv2.ROTATE_90_COUNTERCLOCKWISE, 2: cv2.ROTATE_180, 3: cv2.ROTATE_90_CLOCKWISE}
    return cv2.rotate(image, codes[turns])


def first_turns(path: str) -> int:
    """`display_turns` of a file's first frame: its upright size before any frame is read
    (PyAV shows the display matrix on decoded frames only). 0 when none decodes: the run
    itself says why."""
    import av

    try:
        with av.open(path) as container:
            for frame in container.decode(video=0):
                return display_turns(frame)
    except (av.FFmpegError, OSError, IndexError):
        pass
    return 0
