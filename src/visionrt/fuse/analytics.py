"""Zones and lines on a source's tracks: how many objects of each class are inside each polygon
zone and how long each track stayed there, and how many tracks crossed each line in each
direction, once per crossing. An object's place is its box's bottom centre (where it stands)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import cv2
import numpy as np
import numpy.typing as npt

from visionrt.fuse.base import Fused
from visionrt.fuse.shapes import Line, SourceAnalytics, Zone, reaches_frame
from visionrt.types import Event

# A track counts as on one side of a line only this far from it (pixels): a box that jitters on
# the line would otherwise cross it on every frame.
LINE_DEAD_BAND = 4.0
# A track in a zone leaves it only this far outside its edge (pixels), for the same reason.
EDGE_DEAD_BAND = LINE_DEAD_BAND


@dataclass(slots=True)
class _Presence:
    since: float  # video time the track entered
    total: float = 0.0  # seconds inside before this stay
    class_id: int = -1  # its class when it entered (named in its leave event)
    latest: int = -1  # its class when last seen (what the zone's count says)


@dataclass(slots=True)
class ZoneState:
    inside: dict[int, _Presence] = field(default_factory=dict)  # track id → its stay
    dwell: dict[int, float] = field(default_factory=dict)  # track id → seconds inside, closed


class AnalyticsFuser:
    """One source's zones and lines, on its tracks (runs after tracking). Each frame's
    `fused.analytics` says per zone the count per class inside, and per line the running in/out
    totals; `fused.events` gets zone enter/leave and line in/out `Event`s.

    Only where the detector saw a track moves it: a predicted box (detect-every-N) is the
    tracker's guess, and a track the detector missed on a frame is not in the frame at all; both
    keep their zones and sides. A track leaves a zone when it is seen more than EDGE_DEAD_BAND
    outside it, or when the tracker lets it go (`fused.held_tracks`; without it, a track absent
    from the frame has ended); a line's side is forgotten then.

    A zone or line that lies wholly outside the source's frames can never count: `warn` is told
    so in one line, once per frame size (the size is known only once frames come)."""

    def __init__(
        self,
        analytics: SourceAnalytics,
        class_names: Sequence[str],
        warn: Callable[[str], None] | None = None,
    ) -> None:
        self.zones, self.lines, self.class_names = analytics.zones, analytics.lines, class_names
        self.source, self.warn = analytics.source, warn
        self._zones = {zone.name: ZoneState() for zone in analytics.zones}
        self._sides: dict[str, dict[int, int]] = {line.name: {} for line in analytics.lines}
        self._crossed = {line.name: {"in": 0, "out": 0} for line in analytics.lines}
        self._sizes: set[tuple[int, int]] = set()  # frame sizes checked against them
        self.counted: dict[str, int] = {}  # the events made so far, by label
        self.figures: dict[str, Any] = {}  # the latest frame's `fused.analytics`

    def fuse(self, fused: Fused) -> None:
        height, width = fused.frame.image.shape[:2]
        if (height, width) not in self._sizes:
            self._sizes.add((height, width))
            self._check_reach(width, height)
        tracks = fused.tracks
        if tracks is None:
            return
        before = len(fused.events)
        seen = ~tracks.predicted
        xyxy = tracks.detections.xyxy[seen]
        feet = np.stack([(xyxy[:, 0] + xyxy[:, 2]) / 2, xyxy[:, 3]], axis=1)
        ids = tracks.track_id[seen].tolist()
        classes = tracks.detections.class_id[seen].tolist()
        held = fused.held_tracks
        if held is None:
            held = frozenset(tracks.track_id.tolist())
        now = fused.frame.timestamp
        zones = {
            zone.name: self._zone(zone, feet, ids, classes, held, now, fused.events)
            for zone in self.zones
        }
        for line in self.lines:
            self._line(line, feet, ids, classes, held, fused.events)
        fused.analytics = self.figures = {
            **({"zones": zones} if zones else {}),
            **({"lines": {k: dict(v) for k, v in self._crossed.items()}} if self.lines else {}),
        }
        for event in fused.events[before:]:
            self.counted[event.label] = self.counted.get(event.label, 0) + 1

    def checkpoint(self) -> dict[str, Any]:
        """Its state after the latest frame (copies): each zone's stays and closed times, each
        line's sides and totals, the events made so far and the latest figures. `resume` on a
        fuser of the same zones and lines goes on from there, as if it had not stopped."""
        return {
            "zones": {
                name: (
                    {t: (p.since, p.total, p.class_id, p.latest) for t, p in zone.inside.items()},
                    dict(zone.dwell),
                )
                for name, zone in self._zones.items()
            },
            "sides": {name: dict(sides) for name, sides in self._sides.items()},
            "crossed": {name: dict(crossed) for name, crossed in self._crossed.items()},
            "counted": dict(self.counted),
            "figures": self.figures,  # a new dict each frame: nothing changes it
        }

    def resume(self, state: Mapping[str, Any]) -> None:
        """Go on from `checkpoint()`'s state (a resumed source's zones and lines)."""
        for name, (inside, dwell) in state["zones"].items():
            self._zones[name] = ZoneState(
                {t: _Presence(*stay) for t, stay in inside.items()}, dict(dwell)
            )
        self._sides.update({name: dict(sides) for name, sides in state["sides"].items()})
        self._crossed.update({name: dict(crossed) for name, crossed in state["crossed"].items()})
        self.counted, self.figures = dict(state["counted"]), state["figures"]

    def _check_reach(self, width: int, height: int) -> None:
        shapes = [("zones", zone.name, zone.polygon) for zone in self.zones]
        shapes += [("lines", line.name, np.array([line.a, line.b])) for line in self.lines]
        for kind, name, points in shapes:
            if self.warn is not None and not reaches_frame(points, width, height):
                self.warn(
                    f"analytics.{self.source}.{kind}.{name}: wholly outside the {width}x{height}"
                    f" frames of '{self.source}': it will count nothing"
                )

    def _zone(
        self,
        zone: Zone,
        feet: npt.NDArray[np.float32],
        ids: list[int],
        classes: list[int],
        held: frozenset[int],
        now: float,
        events: list[Event],
    ) -> dict[str, Any]:
        state = self._zones[zone.name]
        contour = zone.polygon.reshape(-1, 1, 2)
        for track, cls, (x, y) in zip(ids, classes, feet.tolist(), strict=True):
            # Signed distance to the polygon's edge: positive inside, negative outside.
            depth = cv2.pointPolygonTest(contour, (x, y), True)
            stay = state.inside.get(track)
            if stay is None and depth >= 0:
                state.inside[track] = _Presence(now, state.dwell.pop(track, 0.0), cls, cls)
                events.append(Event("zone", "enter", zone.name, track, self._class(cls)))
            elif stay is not None and depth < -EDGE_DEAD_BAND:
                self._leave(zone.name, state, track, now, events)
            elif stay is not None:
                stay.latest = cls
        for track in [t for t in state.inside if t not in held]:  # the tracker let it go
            self._leave(zone.name, state, track, now, events)
        for track in [t for t in state.dwell if t not in held]:
            del state.dwell[track]
        count: dict[str, int] = {}
        for stay in state.inside.values():
            name = self._class(stay.latest)
            count[name] = count.get(name, 0) + 1
        seconds = {
            str(track): round(stay.total + max(0.0, now - stay.since), 3)
            for track, stay in state.inside.items()
        }
        return {"count": count, "seconds": seconds}

    def _leave(
        self, zone: str, state: ZoneState, track: int, now: float, events: list[Event]
    ) -> None:
        stay = state.inside.pop(track)
        state.dwell[track] = stay.total + max(0.0, now - stay.since)
        events.append(Event("zone", "leave", zone, track, self._class(stay.class_id)))

    def _class(self, class_id: int) -> str:
        names = self.class_names
        return names[class_id] if 0 <= class_id < len(names) else str(class_id)

    def _line(
        self,
        line: Line,
        feet: npt.NDArray[np.float32],
        ids: list[int],
        classes: list[int],
        held: frozenset[int],
        events: list[Event],
    ) -> None:
        sides = self._sides[line.name]
        (ax, ay), (bx, by) = line.a, line.b
        dx, dy = bx - ax, by - ay
        length = float(np.hypot(dx, dy))
        for track, cls, (x, y) in zip(ids, classes, feet.tolist(), strict=True):
            # Signed distance (positive: right of a→b with y down) and where along the segment.
            distance = (dx * (y - ay) - dy * (x - ax)) / length
            along = ((x - ax) * dx + (y - ay) * dy) / length**2
            if abs(distance) < LINE_DEAD_BAND:
                continue  # on the line: its side is the one it had
            side = 1 if distance > 0 else -1
            before = sides.get(track)
            sides[track] = side
            if before is None or before == side or not 0 <= along <= 1:
                continue
            direction = "in" if side > 0 else "out"
            self._crossed[line.name][direction] += 1
            events.append(Event("line", direction, line.name, track, self._class(cls)))
        for track in [t for t in sides if t not in held]:
            del sides[track]
