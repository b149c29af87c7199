"""Successive halving over candidates: every candidate gets a short run, the better half a longer
one, the finalists a full confirming run; accuracy and latency limits prune at every round."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from visionrt.tune.candidates import Candidate

# What a stopped search says (Ctrl-C or SIGTERM): nothing it measured is kept.
INTERRUPTED = "tune interrupted: no plan cached"


class OutOfTime(Exception):
    """The search's budget ran out before or during a measurement: it is abandoned, and the
    search keeps what it measured before (a time-boxed plan). Never leaves `tune`."""


@dataclass(frozen=True, slots=True)
class Measurement:
    """One run of one candidate: speed, latency and fidelity against the FP32 reference."""

    fps: float
    p50_ms: float
    p99_ms: float
    fidelity: float  # mAP50 against the reference (1.0 for the reference itself)
    frames: int
    error: str = ""  # set when the candidate could not run; it is then out
    stages: dict[str, float] = field(default_factory=dict)  # mean ms per frame, per stage
    # With motion gating: the run summary's motion section (frames reused and their share).
    motion: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Limits:
    """The user's budget: least fidelity (mAP50), most p99 latency (0: none), what to maximise
    (throughput: FPS; latency: lowest p99) and the wall-clock budget of the whole search."""

    min_fidelity: float = 0.95
    max_p99_ms: float = 0.0
    objective: str = "throughput"
    budget_s: float = 600.0

    def allows(self, result: Measurement) -> bool:
        return not self.why(result)

    def why(self, result: Measurement) -> str:
        """Why `result` is out ("" when it is within the limits)."""
        if result.error:
            return result.error
        if result.fidelity < self.min_fidelity:
            return f"fidelity {result.fidelity:.3f} < {self.min_fidelity:.2f}"
        if self.max_p99_ms and result.p99_ms > self.max_p99_ms:
            return f"p99 {result.p99_ms:.0f} ms > {self.max_p99_ms:.0f} ms"
        return ""

    def score(self, result: Measurement) -> float:
        """Higher is better."""
        return result.fps if self.objective == "throughput" else -result.p99_ms


@dataclass(slots=True)
class Trial:
    """A candidate and its measurements, the latest (longest) last."""

    candidate: Candidate
    runs: list[Measurement] = field(default_factory=list)
    why_out: str = ""
    reached: int = -1  # the last round it ran in

    @property
    def last(self) -> Measurement:
        return self.runs[-1]


Evaluate = Callable[[Candidate, int], Measurement]


@dataclass(slots=True)
class SearchResult:
    """Every trial (the chosen one first among the feasible), and whether the budget cut the
    search short."""

    trials: list[Trial]
    best: Trial | None
    reference: Trial | None
    out_of_time: bool = False
    seconds: float = 0.0
    live: Trial | None = None  # the chosen configuration's live twin, when one was measured


def successive_halving(
    candidates: Sequence[Candidate],
    evaluate: Evaluate,
    limits: Limits,
    rounds: Sequence[int] = (60, 150, 300),
    finalists: int = 2,
    clock: Callable[[], float] = time.monotonic,
    on_trial: Callable[[Trial, int], None] | None = None,
    started: float | None = None,
) -> SearchResult:
    """Run every candidate for `rounds[0]` frames, keep the better half of those within the
    limits for `rounds[1]` frames, and so on; the last round runs at most `finalists`. The
    reference candidate runs the first and the last round (its detections are what fidelity
    is scored against; its last run is the table's baseline) and is chosen only if it is the
    best. When the budget (from `started`, default now) runs out, no candidate starts, the one
    measured then is abandoned (`evaluate` raises OutOfTime) and the best measured so far wins."""
    started = clock() if started is None else started
    trials = [Trial(c) for c in candidates]
    alive = list(trials)
    out_of_time = False
    for number, frames in enumerate(rounds):
        last_round = number == len(rounds) - 1
        if last_round:
            # The baseline runs the final round whatever the limits say of it.
            baseline = [t for t in trials if t.candidate.reference and t.runs]
            alive = _best(alive, limits, finalists) + baseline
        for trial in alive:
            if clock() - started > limits.budget_s:
                out_of_time = True
                break
            try:
                measured = evaluate(trial.candidate, frames)
            except OutOfTime:
                out_of_time = True
                break
            trial.runs.append(measured)
            trial.reached = number
            if not trial.why_out:
                trial.why_out = limits.why(trial.last)
            if on_trial is not None:
                on_trial(trial, frames)
        if out_of_time or last_round:
            break
        keep = max(finalists, (len(alive) + 1) // 2)
        # The reference sits out the middle rounds (on a slow CPU they cost it most): its
        # first run gave the detections everyone is scored against, its last the baseline.
        alive = _best(alive, limits, keep)
    feasible = [t for t in trials if t.runs and not t.why_out]
    ranked = sorted(feasible, key=lambda t: (t.reached, limits.score(t.last)), reverse=True)
    reference = next((t for t in trials if t.candidate.reference), None)
    return SearchResult(
        trials, ranked[0] if ranked else None, reference, out_of_time, clock() - started
    )


def _best(trials: list[Trial], limits: Limits, count: int) -> list[Trial]:
    """The `count` best candidates within the limits (the reference is not one of them)."""
    ran = [t for t in trials if t.runs and not t.why_out and not t.candidate.reference]
    return sorted(ran, key=lambda t: limits.score(t.last), reverse=True)[:count]
