"""The SLO-driven degrade path: watches glass-to-result p95 over a sliding window and steps down a
ladder of cheaper configurations when it exceeds the target, back up with hysteresis when there
is headroom."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from visionrt.errors import ConfigError, ModelLoadError

HEADROOM = 0.7  # step back up only while p95 stays under this share of the target
MIN_SAMPLES = 5  # frames in the window before p95 means anything


@dataclass(frozen=True, slots=True)
class Rung:
    """One configuration on the ladder: the detector runs on every `every`-th frame (with
    tracking the frames between get predicted boxes; without, they are skipped and counted as
    drops), using detector variant `variant` (0: the configured model; 1…: smaller inputs, then
    a lighter model), with motion gating `motion` ("": as configured; "skip": frames that did not
    change reuse the last results). `label` is what the log and summary say."""

    every: int
    variant: int
    label: str
    motion: str = ""


@dataclass(frozen=True, slots=True)
class Change:
    """A step taken: when (seconds into the run), from and to which rung, and why."""

    at: float
    level_from: int
    level_to: int
    label: str
    reason: str

    def to_json(self) -> dict[str, object]:
        return {
            "t": round(self.at, 3),
            "from": self.level_from,
            "to": self.level_to,
            "rung": self.label,
            "reason": self.reason,
        }


def build_ladder(
    base_every: int, max_every: int, tracking: bool, variants: Sequence[str], motion: bool = False
) -> list[Rung]:
    """The rungs in order: with `motion`, motion gating (skip) first, kept on every rung below
    (on a fixed camera it costs least: only frames that did not change reuse results); then
    detect-every-N up to `max_every`, then each variant (`variants` are their labels, smaller
    inputs first, a lighter model last) at that N."""
    if max_every < base_every:
        raise ConfigError(
            f"pipeline.slo.max_every: expected >= detect_every ({base_every}), got {max_every}"
        )
    what = "detect every {}" if tracking else "1 frame in {}"
    gate = "skip" if motion else ""
    plus = " + motion skip" if motion else ""
    rungs = [Rung(base_every, 0, "as configured")]
    if motion:
        rungs.append(Rung(base_every, 0, "motion skip", gate))
    rungs += [Rung(n, 0, what.format(n) + plus, gate) for n in range(base_every + 1, max_every + 1)]
    rungs += [Rung(max_every, i, label + plus, gate) for i, label in enumerate(variants, start=1)]
    return rungs


class Degrader:
    """Chooses the rung the pipeline runs at, from the latencies of the frames it delivers.

    Every result's glass-to-result latency goes to `observe`. When p95 over the last `window`
    seconds exceeds `slo` seconds, it steps one rung down; it then holds for `window` seconds
    (the window is emptied, so the new rung is judged on its own frames). It steps one rung up
    once p95 has stayed under HEADROOM × `slo` for 2 × `window` seconds. `rung` is read by the
    preprocess thread; `observe` is called by the consumer. `on_change` is told of each step."""

    def __init__(
        self,
        slo: float,
        rungs: Sequence[Rung],
        window: float = 2.0,
        clock: Callable[[], float] = time.perf_counter,
        on_change: Callable[[Change], None] | None = None,
    ) -> None:
        if slo <= 0:
            raise ConfigError(f"pipeline.slo.target_ms: expected > 0, got {slo * 1e3:g}")
        if window <= 0:
            raise ConfigError(f"pipeline.slo.window: expected > 0 seconds, got {window}")
        if not rungs:
            raise ConfigError("the degrade ladder has no rung")
        self.slo, self.rungs, self.window = slo, list(rungs), window
        self.clock, self.on_change = clock, on_change
        self.level = 0
        self.changes: list[Change] = []
        self._samples: deque[tuple[float, float]] = deque()
        self._started = clock()
        self._hold_until = self._started
        self._good_since: float | None = None
        self._lock = threading.Lock()

    @property
    def rung(self) -> Rung:
        return self.rungs[self.level]

    def observe(self, latency: float) -> Change | None:
        """Add a delivered frame's latency (seconds); the step taken, if any."""
        now = self.clock()
        with self._lock:
            self._samples.append((now, latency))
            while self._samples and self._samples[0][0] < now - self.window:
                self._samples.popleft()
            if now < self._hold_until or len(self._samples) < MIN_SAMPLES:
                return None
            p95 = float(np.percentile([s for _, s in self._samples], 95))
            if p95 > self.slo:
                self._good_since = None
                if self.level + 1 < len(self.rungs):
                    why = f"p95 {p95 * 1e3:.0f} ms > SLO {self.slo * 1e3:.0f} ms"
                    return self._step(now, +1, why)
                return None
            if p95 >= HEADROOM * self.slo:
                self._good_since = None
                return None
            if self._good_since is None:
                self._good_since = now
            if self.level > 0 and now - self._good_since >= 2 * self.window:
                why = (
                    f"p95 {p95 * 1e3:.0f} ms < {HEADROOM:.0%} of SLO {self.slo * 1e3:.0f} ms"
                    f" for {2 * self.window:g} s"
                )
                return self._step(now, -1, why)
            return None

    def _step(self, now: float, direction: int, reason: str) -> Change:
        before = self.level
        self.level += direction
        change = Change(now - self._started, before, self.level, self.rung.label, reason)
        self.changes.append(change)
        self._samples.clear()
        self._hold_until = now + self.window
        self._good_since = None
        if self.on_change is not None:
            self.on_change(change)
        return change

    def report(self) -> dict[str, object]:
        """For the run summary: target, ladder, where it ended, every change."""
        return {
            "slo_ms": round(self.slo * 1e3, 3),
            "ladder": [r.label for r in self.rungs],
            "level": self.level,
            "steps_down": sum(c.level_to > c.level_from for c in self.changes),
            "steps_up": sum(c.level_to < c.level_from for c in self.changes),
            "changes": [c.to_json() for c in self.changes],
        }


def check_slo_model(model: str) -> None:
    """`pipeline.slo.model` must be a detector this pipeline can load: checked before the
    ladder builds on it (a depth or classification model would fail deep in a rewrite)."""
    from visionrt.models import read_model_spec
    from visionrt.postprocess import detect_layout

    path = Path(model)
    if not path.is_file():
        raise ConfigError(f"pipeline.slo.model: model file not found: {model}")
    if path.suffix not in (".onnx", ".xml"):
        return  # .pt/.engine files are described by the runtime that loads them
    try:
        spec = read_model_spec(path)
        detect_layout(list(spec.output_shape), len(spec.class_names), spec.end2end, "auto",
                      input_hw=spec.input_size)  # fmt: skip
    except ModelLoadError as err:
        raise ConfigError(f"pipeline.slo.model: {path.name} is not a detector: {err}") from err


def smaller_sides(stride: int, input_hw: tuple[int, int]) -> list[int]:
    """The ladder's input sides: 0.8× and 0.6× of the detector's larger side, rounded to its
    stride."""
    side = max(input_hw)
    sides = [max(stride, round(side * f / stride) * stride) for f in (0.8, 0.6)]
    return [s for s in dict.fromkeys(sides) if s < side]
