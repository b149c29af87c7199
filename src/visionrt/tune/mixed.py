"""Mixed precision where full INT8 falls short: an OpenVINO INT8 candidate the search put out
for its fidelity gets its accuracy-controlled twin (`openvino-int8-ac`: the layers whose
quantization cost the most put back in float, export/accuracy_control.py), measured on the final
round's frames. It becomes the choice where it holds the budget and beats the search's."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from visionrt.tune.search import Evaluate, Limits, SearchResult, Trial

INT8, CONTROLLED = "openvino-int8", "openvino-int8-ac"
# The budget the twin needs left before it starts: its export ran 407 s on the demo model (150
# calibration frames, 2 cores; docs/benchmarks.md), and an export under way is not abandoned.
SECONDS_NEEDED = 480.0


def try_mixed(
    search: SearchResult,
    evaluate: Evaluate,
    limits: Limits,
    frames: int,
    on_trial: Callable[[Trial, int], None] | None = None,
    left: Callable[[], float] = lambda: float("inf"),
    say: Callable[[str], None] | None = None,
) -> Trial | None:
    """The twin of the INT8 candidate that came closest to the budget among those out for
    their fidelity, measured and added to the search's table; None where no INT8 candidate fell
    short, or where less than SECONDS_NEEDED of the budget is `left` (`say` hears why). A run
    abandoned at the budget raises OutOfTime."""
    short = [
        t
        for t in search.trials
        if t.candidate.export == INT8 and t.runs and t.why_out.startswith("fidelity")
    ]
    if not short:
        return None
    if left() < SECONDS_NEEDED:
        if say is not None:
            say(f"int8+float: not tried, its export needs ~{SECONDS_NEEDED / 60:.0f} min of the"
                " budget (--budget-minutes)")  # fmt: skip
        return None
    closest = max(short, key=lambda t: t.last.fidelity)
    trial = Trial(replace(closest.candidate, export=CONTROLLED))
    trial.runs.append(evaluate(trial.candidate, frames))
    best = search.best
    trial.reached = best.reached if best is not None else closest.reached
    trial.why_out = limits.why(trial.last)
    if (
        not trial.why_out
        and best is not None
        and limits.score(trial.last) <= limits.score(best.last)
    ):
        trial.why_out = f"no better than {best.candidate.label}"
    search.trials.append(trial)
    if on_trial is not None:
        on_trial(trial, frames)
    if not trial.why_out:
        if best is not None:
            best.why_out = f"{trial.candidate.label} holds the budget and is faster"
        search.best = trial
    return trial
