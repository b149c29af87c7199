"""Mixed precision where full INT8 falls short: an OpenVINO INT8 candidate the search put out
for its fidelity gets its accuracy-controlled twin (`openvino-int8-ac`: the layers whose
quantization cost the most put back in float, export/accuracy_control.py), measured on the final
round's frames. It becomes the choice where it holds the budget and beats the search's."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from visionrt.tune.search import Evaluate, Limits, SearchResult, Trial

INT8, CONTROLLED = "openvino-int8", "openvino-int8-ac"


def try_mixed(
    search: SearchResult,
    evaluate: Evaluate,
    limits: Limits,
    frames: int,
    on_trial: Callable[[Trial, int], None] | None = None,
    over: Callable[[], bool] = lambda: False,
) -> Trial | None:
    """The twin of the INT8 candidate that came closest to the budget among those out for
    their fidelity, measured and added to the search's table; None where no INT8 candidate fell
    short (or the budget is spent). A run abandoned at the budget raises OutOfTime."""
    short = [
        t
        for t in search.trials
        if t.candidate.export == INT8 and t.runs and t.why_out.startswith("fidelity")
    ]
    if not short or over():
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
