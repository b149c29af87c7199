"""Which detector each source runs. Where a plan proved another configuration than the run's own
on the sources of some frame size (`accuracy.geometry.settle`), those sources run it: one
detector per distinct configuration, loaded once, whose lane batches the frames of its own
sources; every other source (a camera, whose size is not known before the run, included) runs
the run's own detector."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from visionrt.config.sizes import Size, SizedDetector, size_key
from visionrt.sources import Source
from visionrt.tasks.base import Task


def build_sized(
    sources: Sequence[Source],
    sized: Mapping[Size, SizedDetector],
    own: SizedDetector,
    make: Callable[[SizedDetector, Sequence[Source]], Task],
) -> tuple[list[tuple[Task, SizedDetector]], dict[Size, int]]:
    """The detectors the run's sources need besides its own (`own`), one per distinct
    configuration among the sizes of `sized` that a source has (`make` loads one for its
    sources), each with its configuration, and the index among them of each such size."""
    configurations: list[SizedDetector] = []
    groups: list[list[Source]] = []
    index: dict[Size, int] = {}
    for source in sources:
        size = frame_size(source)
        chosen = sized.get(size) if size is not None else None
        if chosen is None or chosen == own:
            continue
        if chosen not in configurations:
            configurations.append(chosen)
            groups.append([])
        index[size] = configurations.index(chosen)  # type: ignore[index]
        groups[index[size]].append(source)  # type: ignore[index]
    made: list[tuple[Task, SizedDetector]] = []
    try:
        for configuration, group in zip(configurations, groups, strict=True):
            made.append((make(configuration, group), configuration))
    except BaseException:
        for task, _ in made:
            task.close()
        raise
    return made, index


def frame_size(source: Source) -> Size | None:
    """A source's frame size when it knows it before its first frame (files, cameras opened)."""
    size = getattr(source, "size", None)
    return (int(size[0]), int(size[1])) if size else None


def label(task: Task, model: str | Path) -> str:
    """'openvino int8 512×640 (model.xml)': what a detector runs."""
    facts = task.describe()
    height, width = facts.get("input_hw") or ("?", "?")
    return f"{facts.get('runtime')} {facts.get('precision')} {height}×{width} ({Path(model).name})"


def detector_rows(
    detectors: Sequence[tuple[Task, str | Path]],
    routes: Sequence[int],
    names: Sequence[str],
    sources: Sequence[Source],
) -> list[dict[str, Any]]:
    """Each detector's (the task and its model file) description (`Task.describe`) with the
    sources it ran and their frame sizes; `routes[i]` is source i's detector."""
    rows = []
    for index, (task, model) in enumerate(detectors):
        mine = [i for i, route in enumerate(routes) if route == index]
        sizes = {frame_size(sources[i]) for i in mine}
        rows.append(
            {
                "label": label(task, model),
                "sources": [names[i] for i in mine],
                "sizes": sorted(size_key(s) for s in sizes if s is not None),
                **task.describe(),
            }
        )
    return rows


def detectors_note(rows: Sequence[Mapping[str, Any]]) -> str:
    """'detectors: rgb (576×768) on openvino int8 512×640 (model.xml); slam1, slam2 (480×640)
    on …': the line a run with several says."""
    parts = []
    for row in rows:
        if not row["sources"]:
            continue
        sizes = ", ".join(s.replace("x", "×") for s in row["sizes"])
        where = f" ({sizes})" if sizes else " (size unknown before the run)"
        parts.append(f"{', '.join(row['sources'])}{where} on {row['label']}")
    return (
        "detectors: "
        + "; ".join(parts)
        + " — each size runs what was proven on it, one detector per configuration batching"
        " its own sources"
    )
