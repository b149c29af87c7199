"""What `visionrt tune` prints of a detector's search: the table of trials (reference, chosen,
runners-up and why each other one is out) and the motion-gating modes measured."""

from __future__ import annotations

from rich.table import Table

from visionrt.tune.motion import MotionOutcome
from visionrt.tune.search import SearchResult, Trial


def _status(trial: Trial, search: SearchResult) -> str:
    text = status_text(trial, search)
    return f"[bold green]{text}[/]" if text == "chosen" else text


def status_text(trial: Trial, search: SearchResult) -> str:
    if search.best is trial:
        return "chosen"
    if search.live is trial:
        return f"live: {trial.why_out}" if trial.why_out else "chosen for live sources"
    if trial.candidate.reference:
        return "reference"
    if trial.why_out:
        return f"out: {trial.why_out}"
    return f"{len(trial.runs)} round(s)" if trial.runs else "not run (budget)"


class TrialLines:
    """`tune`'s progress line for each trial. A round asks for more frames than a short video
    has (60, 150, 300 of a 30-frame clip): each line says the frames the run went over, as the
    table does, and a failed run the frames it was asked for, at most the video's."""

    def __init__(self) -> None:
        self.video_frames = 0  # 0: not known yet (no run has come back short of its round)

    def line(self, trial: Trial, asked: int) -> str:
        last = trial.last
        if last.frames and last.frames < asked:
            self.video_frames = last.frames
        used = last.frames or min(asked, self.video_frames or asked)
        verdict = trial.why_out or f"{last.fps:.1f} FPS, fidelity {last.fidelity:.3f}"
        return f"  {trial.candidate.label} · {used} frames: {verdict}"


def results_table(search: SearchResult, title: str) -> Table:
    """Every configuration tried: reference first, then by how far it got and how fast."""
    reference_fps = search.reference.last.fps if search.reference and search.reference.runs else 0
    table = Table(title=title)
    for column in ("configuration", "frames", "FPS", "× reference", "p50 / p99 ms", "fidelity"):
        table.add_column(column, justify="left" if column == "configuration" else "right")
    table.add_column("status")
    ranked = sorted(
        search.trials,
        key=lambda t: (
            not t.candidate.reference,
            t is not search.best,
            bool(t.why_out),
            -len(t.runs),
            -(t.last.fps if t.runs else 0),
        ),
    )
    for trial in ranked:
        if not trial.runs:
            table.add_row(trial.candidate.label, "", "", "", "", "", _status(trial, search))
            continue
        last = trial.last
        ratio = f"{last.fps / reference_fps:.2f}×" if reference_fps and last.fps else ""
        table.add_row(
            trial.candidate.label,
            str(last.frames),
            f"{last.fps:.1f}" if last.fps else "",
            ratio,
            f"{last.p50_ms:.0f} / {last.p99_ms:.0f}" if last.fps else "",
            f"{last.fidelity:.3f}" if last.fps else "",
            _status(trial, search),
        )
    return table


def motion_table(outcome: MotionOutcome, title: str) -> Table:
    """Each gating mode against the chosen configuration alone, on the same frames."""
    table = Table(title=f"{title} · {outcome.frames} frames, median of the runs")
    for column in ("mode", "FPS", "× off", "fidelity", "reused"):
        table.add_column(column, justify="left" if column == "mode" else "right")
    table.add_column("status")
    base = next((r.combined().fps for r in outcome.results if r.mode.name == "off"), 0.0)
    for result in outcome.results:
        figures = result.combined()
        ran = not result.error and figures.fps > 0
        status = "chosen" if result.mode.name == outcome.chosen else f"out: {result.why_out}"
        if result.mode.name == "off" and status != "chosen":
            status = "the baseline"  # nothing kept it out: another mode beat it
        share = figures.motion.get("share")
        table.add_row(
            result.mode.name,
            f"{figures.fps:.1f}" if ran else "",
            f"{figures.fps / base:.2f}×" if ran and base else "",
            f"{figures.fidelity:.3f}" if ran else "",
            f"{share:.0%}" if ran and share is not None else "",
            f"[bold green]{status}[/]" if status == "chosen" else status,
        )
    return table


def motion_line(outcome: MotionOutcome) -> str:
    """One line: the gating the plan keeps, or why none."""
    if outcome.skipped:
        return f"motion gating: off ({outcome.skipped})"
    if outcome.chosen == "off":
        return (
            "gating: off (no mode paid within the budget here; `run --motion` or"
            " `--track --detect-every` can ask)"
        )
    chosen = next(r for r in outcome.results if r.mode.name == outcome.chosen).combined()
    if outcome.chosen.startswith("every "):
        every = outcome.chosen.removeprefix("every ")
        return (
            f"gating: detection on 1 frame in {every}, {chosen.fps:.1f} FPS at fidelity"
            f" {chosen.fidelity:.3f}: a plain `visionrt run` detects so, the tracker's boxes"
            " between (`--detect-every 1` does not)"
        )
    return (
        f"motion gating: {outcome.chosen}, {chosen.fps:.1f} FPS at fidelity"
        f" {chosen.fidelity:.3f}: a plain `visionrt run` gates (`--motion off` does not)"
    )
