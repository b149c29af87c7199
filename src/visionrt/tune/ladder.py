"""The ladder of smaller input sizes `tune` tries below the chosen configuration's: the same
backend, precision and artifact kind at each smaller size in turn, largest first, for as long
as the size above held the budget and paid. A model's accuracy can fall off a cliff below some
size (the demo model's class flips below 512×640 on vtest: 0.993 at 512×640, 0.43 at 448×576),
which is why it is searched on the user's video, not fixed."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from visionrt.tune.search import Evaluate, Limits, SearchResult, Trial

# The rungs' long sides, as shares of the model's own long side: 640 → 576, 512, 448, 384.
SHARES = (0.9, 0.8, 0.7, 0.6)
STRIDE = 32  # a YOLO input's sides are whole strides


def ladder_sizes(
    source_hw: tuple[int, int],
    model_hw: tuple[int, int],
    start_hw: tuple[int, int],
    stride: int = STRIDE,
) -> list[tuple[int, int]]:
    """(height, width) sizes below `start_hw` (the size the chosen configuration runs at),
    largest first: the source's aspect, the long side a share (SHARES) of the model's, rounded
    to the stride, the short side rounded up to it (the frame then fits with little padding).
    Only sizes no larger than `start_hw` on either side and smaller in area."""
    height, width = source_hw
    sizes: list[tuple[int, int]] = []
    for share in SHARES:
        long = max(stride, round(max(model_hw) * share / stride) * stride)
        ratio = min(height, width) / max(height, width)
        short = min(long, max(stride, math.ceil(long * ratio / stride) * stride))
        size = (short, long) if width >= height else (long, short)
        smaller = size[0] * size[1] < start_hw[0] * start_hw[1]
        if size[0] <= start_hw[0] and size[1] <= start_hw[1] and smaller and size not in sizes:
            sizes.append(size)
    return sizes


def size_label(size: tuple[int, int]) -> str:
    return f"{size[0]}×{size[1]}"


@dataclass(slots=True)
class Ladder:
    """The sizes tried (in order) and how the descent ended (`stopped`), the sizes left untried."""

    tried: list[Trial] = field(default_factory=list)
    stopped: str = ""
    untried: list[tuple[int, int]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "tried": [
                {
                    "size": list(t.candidate.input_size or ()),
                    "fps": round(t.last.fps, 2),
                    "fidelity": round(t.last.fidelity, 4),
                    **({"why_not": t.why_out} if t.why_out else {}),
                }
                for t in self.tried
                if t.runs
            ],
            "stopped": self.stopped,
            "untried": [list(size) for size in self.untried],
        }

    def line(self) -> str:
        """'sizes: 448×576 tried, fidelity 0.430 < 0.95: the ladder stops there (384×512, …
        not tried)'."""
        if not self.tried and not self.stopped:
            return "sizes: no smaller size to try"
        untried = ", ".join(size_label(s) for s in self.untried)
        rest = f" ({untried} not tried)" if untried else ""
        return f"sizes: {self.stopped}{rest}"


def descend(
    search: SearchResult,
    evaluate: Evaluate,
    limits: Limits,
    frames: int,
    source_hw: tuple[int, int],
    model_hw: tuple[int, int],
    on_trial: Callable[[Trial, int], None] | None = None,
    over: Callable[[], bool] = lambda: False,
) -> Ladder | None:
    """Try the chosen configuration (`search.best`) at each of `ladder_sizes` on the final
    round's `frames`, each only while the one above held the limits and scored better than the
    size above it; the smallest that did becomes the choice. Each trial joins the search's
    table. `over()` says the budget is spent: no size starts then (a run under way is abandoned
    by the evaluator, which raises OutOfTime to the caller). None: nothing was chosen."""
    best = search.best
    if best is None:
        return None
    start = best.candidate.input_size or model_hw
    sizes = ladder_sizes(source_hw, model_hw, start)
    ladder = Ladder()
    current = best
    for index, size in enumerate(sizes):
        if over():
            ladder.stopped, ladder.untried = "the budget was spent", sizes[index:]
            break
        trial = Trial(replace(current.candidate, input_size=size))
        trial.runs.append(evaluate(trial.candidate, frames))
        trial.reached = current.reached
        trial.why_out = limits.why(trial.last)
        if not trial.why_out and limits.score(trial.last) <= limits.score(current.last):
            above = size_label(current.candidate.input_size or model_hw)
            trial.why_out = f"no better than {above}"
        search.trials.append(trial)
        ladder.tried.append(trial)
        if on_trial is not None:
            on_trial(trial, frames)
        if trial.why_out:
            ladder.stopped = f"{size_label(size)} tried, {trial.why_out}: the ladder stops there"
            ladder.untried = sizes[index + 1 :]
            break
        current.why_out = f"{size_label(size)} holds the budget and is faster"
        current = trial
    else:
        if ladder.tried:
            ladder.stopped = f"down to {size_label(sizes[-1])}, each within the budget"
    search.best = current
    return ladder
