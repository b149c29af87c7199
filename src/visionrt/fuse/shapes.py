"""Zones and lines as configured: the `analytics` section parsed and checked (points as numbers,
a polygon that encloses an area without crossing itself, a line of two different points), and
whether a zone or a line reaches into a frame at all (a place outside it never counts)."""

from __future__ import annotations

import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import cv2
import numpy as np
import numpy.typing as npt

from visionrt.errors import ConfigError

Points = npt.NDArray[np.float64]  # (N, 2) x, y in pixels
# A zone enclosing less than this (square pixels) is points on one line, give or take rounding:
# no box's bottom centre would ever be inside it.
MIN_ZONE_AREA = 1.0


@dataclass(frozen=True, slots=True)
class Zone:
    """A simple polygon (N, 2) in source pixels, N >= 3, enclosing at least MIN_ZONE_AREA."""

    name: str
    polygon: npt.NDArray[np.float32]


@dataclass(frozen=True, slots=True)
class Line:
    """A segment from `a` to `b` in source pixels. Crossing it from its left to its right (seen
    from `a` looking at `b`; image y points down) counts "in", the other way "out"."""

    name: str
    a: tuple[float, float]
    b: tuple[float, float]


@dataclass(frozen=True, slots=True)
class SourceAnalytics:
    """One source's zones and lines; `source` is its name."""

    zones: tuple[Zone, ...] = ()
    lines: tuple[Line, ...] = ()
    source: str = ""


def parse_analytics(config: Mapping[str, Any]) -> dict[str, SourceAnalytics]:
    """The config's `analytics` section, `{source name: {zones: {name: [[x, y], ...]}, lines:
    {name: [[x1, y1], [x2, y2]]}}}`, checked: one ConfigError line naming what is wrong."""
    if not isinstance(config, Mapping):
        raise ConfigError("analytics: expected a mapping of source names to zones and lines")
    out = {}
    for source, spec in _named(config, "analytics").items():
        where = f"analytics.{source}"
        if not isinstance(spec, Mapping) or set(spec) - {"zones", "lines"}:
            raise ConfigError(f"{where}: expected `zones` and/or `lines`, got {spec!r}")
        zones = tuple(
            Zone(name, _polygon(points, f"{where}.zones.{name}"))
            for name, points in _named(spec.get("zones") or {}, f"{where}.zones").items()
        )
        lines = []
        for name, points in _named(spec.get("lines") or {}, f"{where}.lines").items():
            (x1, y1), (x2, y2) = _points(points, f"{where}.lines.{name}", 2, 2).tolist()
            if (x1, y1) == (x2, y2):
                raise ConfigError(f"{where}.lines.{name}: expected two different points")
            lines.append(Line(name, (x1, y1), (x2, y2)))
        out[source] = SourceAnalytics(zones, tuple(lines), source)
    return out


def check_analytics(
    analytics: Mapping[str, SourceAnalytics], names: Sequence[str], tracking: bool
) -> None:
    """Zones and lines name sources of the run (`names`), and count tracks (`tracking` on)."""
    unknown = sorted(set(analytics) - set(names))
    if unknown:
        raise ConfigError(
            f"analytics: no source named '{unknown[0]}' (sources: {', '.join(names)})"
        )
    if analytics and not tracking:
        raise ConfigError("analytics: zones and lines count tracks: add --track")


def _named(value: Any, where: str) -> dict[str, Any]:
    """`value`'s entries by name; a name left empty is refused (it would name nothing)."""
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where}: expected names mapped to points, got {value!r}")
    for name in value:
        if name is None or isinstance(name, bool) or not str(name).strip():
            raise ConfigError(f"{where}: expected a name for each entry, got {name!r}")
    return {str(name): entry for name, entry in value.items()}


def _points(value: Any, where: str, least: int, most: int | None) -> Points:
    """(N, 2) points from a list of [x, y] pairs of numbers (a bool is not one)."""
    if isinstance(value, np.ndarray) and value.dtype.kind in "iuf":
        value = value.tolist()
    many = f"{least}" if most == least else f"at least {least}"
    pairs = isinstance(value, Sequence) and not isinstance(value, str)
    pairs = pairs and all(
        isinstance(point, Sequence) and not isinstance(point, str) and len(point) == 2
        for point in value
    )
    if not pairs or not least <= len(value) <= (most or len(value)):
        raise ConfigError(f"{where}: expected {many} [x, y] points, got {value!r}")
    for point in value:
        if not all(isinstance(c, numbers.Real) and not isinstance(c, bool) for c in point):
            raise ConfigError(f"{where}: expected [x, y] as two numbers, got {list(point)!r}")
    points = np.asarray(value, np.float64)
    if not np.isfinite(points).all() or (points < 0).any():
        raise ConfigError(f"{where}: expected finite pixel coordinates >= 0, got {value!r}")
    return points


def _polygon(value: Any, where: str) -> npt.NDArray[np.float32]:
    """A zone's corners, checked: they enclose an area, and no two edges cross."""
    points = without_repeats(_points(value, where, 3, None))
    flat = len(points) < 3 or all(_turn(points[0], points[1], p) == 0 for p in points[2:])
    crossed = None if flat else crossing_edges(points)
    if crossed is not None:  # before the area: a bow tie's two halves cancel out
        first, second = crossed
        raise ConfigError(
            f"{where}: expected a polygon whose edges do not cross, got {value!r} (edges"
            f" {first + 1} and {second + 1} meet): list its corners in order around it"
        )
    if flat or area(points) < MIN_ZONE_AREA:
        raise ConfigError(
            f"{where}: expected corners around an area (of {MIN_ZONE_AREA:g} square pixel or"
            f" more), got {value!r}: the same point, or points on one line?"
        )
    return points.astype(np.float32)


def area(points: Points) -> float:
    """The area a polygon encloses (shoelace, absolute), in square pixels."""
    x, y = points[:, 0], points[:, 1]
    return abs(float(np.dot(x, np.roll(y, -1)) - np.dot(y, np.roll(x, -1)))) / 2.0


def without_repeats(points: Points) -> Points:
    """The polygon's corners with a point repeated after itself dropped, the first one repeated
    at the end (a closed ring as often drawn) included."""
    keep = np.any(points != np.roll(points, 1, axis=0), axis=1)
    if not keep.any():  # every point the same
        return points[:1]
    return points[keep]


def crossing_edges(points: Points) -> tuple[int, int] | None:
    """The first two edges of a polygon (edge i from corner i to the next) that meet other than
    at the corner they share, or that fold back over each other there; None for a simple
    polygon. O(N²): zones have a handful of corners."""
    count = len(points)
    edges = [(points[i], points[(i + 1) % count]) for i in range(count)]
    for i in range(count):
        for j in range(i + 1, count):
            if j == i + 1 or (i == 0 and j == count - 1):  # neighbours share a corner
                first, second = (edges[i], edges[j]) if j == i + 1 else (edges[j], edges[i])
                if _folds(first[0], first[1], second[1]):
                    return i, j
                continue
            if segments_meet(*edges[i], *edges[j]):
                return i, j
    return None


def _folds(before: Points, corner: Points, after: Points) -> bool:
    """Whether the path before → corner → after turns right back on itself."""
    return _turn(before, corner, after) == 0 and float(np.dot(corner - before, after - corner)) < 0


def _turn(p: Points, q: Points, r: Points) -> int:
    """1, -1 or 0: r is to one side of the line p → q, the other, or on it."""
    cross = float((q[0] - p[0]) * (r[1] - p[1]) - (q[1] - p[1]) * (r[0] - p[0]))
    return (cross > 0) - (cross < 0)


def _within(p: Points, q: Points, r: Points) -> bool:
    """Whether r, on the line through p and q, lies between them."""
    return bool(
        min(p[0], q[0]) <= r[0] <= max(p[0], q[0]) and min(p[1], q[1]) <= r[1] <= max(p[1], q[1])
    )


def segments_meet(a: Points, b: Points, c: Points, d: Points) -> bool:
    """Whether segments a-b and c-d cross or touch."""
    turns = _turn(a, b, c), _turn(a, b, d), _turn(c, d, a), _turn(c, d, b)
    if turns[0] != turns[1] and turns[2] != turns[3]:
        return True
    return (
        (turns[0] == 0 and _within(a, b, c))
        or (turns[1] == 0 and _within(a, b, d))
        or (turns[2] == 0 and _within(c, d, a))
        or (turns[3] == 0 and _within(c, d, b))
    )


def reaches_frame(points: npt.NDArray[np.floating], width: float, height: float) -> bool:
    """Whether a polygon (3 points or more) or a segment (2) shares a point with the frame
    (0, 0)-(`width`, `height`), edges included."""
    points = np.asarray(points, np.float64)
    inside = (
        (points[:, 0] >= 0) & (points[:, 0] <= width) & (points[:, 1] >= 0)
        & (points[:, 1] <= height)
    )  # fmt: skip
    if inside.any():
        return True
    corners = np.array([[0, 0], [width, 0], [width, height], [0, height]], np.float64)
    frame_edges = [(corners[i], corners[(i + 1) % 4]) for i in range(4)]
    count = len(points)
    edges = [(points[i], points[(i + 1) % count]) for i in range(count if count > 2 else 1)]
    if any(segments_meet(*edge, *side) for edge in edges for side in frame_edges):
        return True
    # A polygon around the whole frame: the frame's corner is inside it.
    corner = (0.0, 0.0)
    return count > 2 and cv2.pointPolygonTest(points.astype(np.float32), corner, False) > 0
