"""Measure one candidate on the user's video: build its artifact if it needs one (cached), run
the pipeline over the first frames, and score its detections against the FP32 reference's."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from visionrt.backends import BackendOptions
from visionrt.errors import Interrupted, VisionRTError
from visionrt.export import export_model
from visionrt.fidelity import fidelity
from visionrt.pipeline import Pipeline, PipelineOptions
from visionrt.plans.resolve import layered
from visionrt.postprocess import PostprocessOptions
from visionrt.sources import SourceOptions
from visionrt.telemetry.stats import RunSummary
from visionrt.tune.candidates import Candidate
from visionrt.tune.search import INTERRUPTED, Measurement, OutOfTime
from visionrt.types import Detections

# Stages whose p99s add up to a frame's processing latency (queueing excluded: in file mode the
# queues are full by design, so glass-to-result there measures the queue, not the plan).
LATENCY_STAGES = ("decode", "preprocess", "infer", "postprocess")


def backend_options(inference: dict[str, Any]) -> BackendOptions:
    """A run config's `inference` section (`Candidate.options`) as backend options."""
    return layered(BackendOptions(), inference)


CALIBRATION_FRAMES = 150  # the Evaluator's default: a proof's artifact is the one tune cached


def export_sized(
    source: Path, recipe: str, calibrate: str | list[str], imgsz: tuple[int, int] | None
) -> Path:
    """The artifact `recipe` of `source` at input size `imgsz` (None: the model's own), from the
    export cache or exported there: what a plan's proof on another frame size tries
    (`accuracy.check.Build`; a run passes no builder and takes only what is cached)."""
    built = export_model(
        source,
        recipe,
        calibrate=calibrate,
        frames=CALIBRATION_FRAMES,
        imgsz=imgsz,
        progress=False,
        fidelity_frames=0,
    )
    return built.path


class VideoEvaluator:
    """Runs candidates on `video`. The reference candidate must be evaluated first: its
    detections on the first `fidelity_frames` frames are what the others are scored against.
    INT8 artifacts calibrate on `video` and the `calibrate_too` videos (cameras of other frame
    sizes the plan must hold on). Past `deadline` (on `clock`: the search's budget) no export
    starts and a run under way stops reading, finishes its frames in flight and is abandoned
    (OutOfTime), except the reference's first run: everything is scored against it."""

    def __init__(
        self,
        video: str | Path,
        model: str | Path,
        fidelity_frames: int = 60,
        calibration_frames: int = CALIBRATION_FRAMES,
        conf: float = 0.25,
        progress: bool = False,
        calibrate_too: Sequence[str | Path] = (),
        deadline: float = math.inf,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.video, self.model = str(video), Path(model)
        self.deadline, self.clock = deadline, clock
        # Video files only (export calibrates on files); each once.
        others = [str(v) for v in calibrate_too if Path(v).is_file()]
        self.calibration = list(dict.fromkeys([self.video, *others]))
        self.fidelity_frames, self.calibration_frames = fidelity_frames, calibration_frames
        self.conf, self.progress = conf, progress
        self.reference: list[Detections] | None = None
        self.artifacts: dict[Candidate, Path] = {}
        self.reports: dict[Candidate, dict[str, Any]] = {}  # each artifact's export report
        # The reference's detections on every frame of its longest run (gated runs are scored
        # against every frame: a reused frame's boxes are what the user gets there).
        self._full_reference: list[Detections] = []
        # Set by a signal handler: the search stops at the next frame, nothing is kept.
        self.stop = threading.Event()

    def artifact(self, candidate: Candidate) -> Path:
        """The model file the candidate runs: an export artifact (built once, cached on disk by
        `export`), or the model itself."""
        if not candidate.export:
            return self.model
        if candidate not in self.artifacts:
            # An export under way finishes (minutes, for INT8), but none starts past the budget.
            self._check_time()
            result = export_model(
                self.model,
                candidate.export,
                calibrate=self.calibration if len(self.calibration) > 1 else self.video,
                frames=self.calibration_frames,
                imgsz=candidate.input_size,
                progress=self.progress,
                fidelity_frames=0,  # scored here, on the same frames as every other candidate
            )
            self.artifacts[candidate] = result.path
            self.reports[candidate] = result.report
        return self.artifacts[candidate]

    def artifact_facts(self, candidate: Candidate) -> dict[str, Any]:
        """What a plan records of the file the candidate runs: its input size and whether it
        runs at any batch ("any") or a fixed one."""
        if not candidate.export:
            return {"batch": "any", "export": ""}  # the ONNX model: the batch rewrite serves it
        report = self.reports.get(candidate) or {}
        return {
            "export": candidate.export,
            "batch": report.get("batch", 1),
            "input_hw": report.get("input_hw"),
            "report": str(self.artifact(candidate).parent / "report.json"),
        }

    def run_config(self, candidate: Candidate) -> dict[str, Any]:
        """The model, backend and inference sections `run` needs to reproduce the candidate."""
        inference = candidate.options()
        if candidate.export:  # the artifact is already at its size
            inference["input_size"] = None
        return {
            "model": str(self.artifact(candidate)),
            "backend": candidate.backend,
            "inference": inference,
        }

    def __call__(self, candidate: Candidate, frames: int) -> Measurement:
        return self._guarded(lambda: self._measure(candidate, frames))

    def gated(self, candidate: Candidate, frames: int, options: PipelineOptions) -> Measurement:
        """The candidate run under `options` (motion gating), scored on every frame it gave
        (reused ones included) against the reference's detections on the same frames."""
        return self._guarded(lambda: self._measure_gated(candidate, frames, options))

    def every_frame_reference(self) -> list[Detections]:
        """The reference's detections on every frame of its longest run (the search's final
        round): what a gated run is scored against."""
        return list(self._full_reference)

    def _guarded(self, measure: Callable[[], Measurement]) -> Measurement:
        """`measure()`, or a Measurement whose `error` is the failure's first line: a candidate
        that cannot run is out, not the end of the search."""
        try:
            return measure()
        except (Interrupted, KeyboardInterrupt):
            raise
        except (VisionRTError, RuntimeError, MemoryError) as err:
            if self.stop.is_set():  # a stage that failed because the run was being stopped
                raise Interrupted(INTERRUPTED) from err
            first = (str(err).splitlines() or [type(err).__name__])[0]
            return Measurement(0.0, 0.0, 0.0, 0.0, 0, error=first)

    def _run(
        self, candidate: Candidate, frames: int, options: PipelineOptions | None, keep: int
    ) -> tuple[RunSummary, list[Detections]]:
        """Run the candidate's pipeline over the first `frames` frames; its summary and the
        detections of the first `keep` frames."""
        config = self.run_config(candidate)
        pipeline = Pipeline(
            [self.video],
            config["model"],
            config["backend"],
            backend_options(config["inference"]),
            PostprocessOptions(conf=self.conf),
            SourceOptions(mode="file", max_frames=frames),
            options,
            plan=False,  # the candidate itself, never a cached plan
        )
        detections: list[Detections] = []
        timed = not (candidate.reference and self.reference is None)
        out_of_time = False
        try:
            for result in pipeline:
                if self.stop.is_set():
                    raise Interrupted(INTERRUPTED)
                if timed and not out_of_time and self.clock() > self.deadline:
                    # Stopped, not left: the frames in flight are finished and the stage threads
                    # end (a pipeline left mid-run can abort the process at exit, in ONNX
                    # Runtime's or OpenVINO's threads).
                    out_of_time = True
                    pipeline.stop()
                if len(detections) < keep:
                    detections.append(result.detections)
        finally:
            pipeline.close()
        if out_of_time:
            raise OutOfTime
        return pipeline.summary(), detections

    def _check_time(self) -> None:
        if self.clock() > self.deadline:
            raise OutOfTime

    def _measure(self, candidate: Candidate, frames: int) -> Measurement:
        keep = frames if candidate.reference else self.fidelity_frames
        summary, detections = self._run(candidate, frames, None, keep)
        if candidate.reference:
            if self.reference is None:
                self.reference = detections[: self.fidelity_frames]
            if len(detections) > len(self._full_reference):
                self._full_reference = detections
            return _measurement(summary, 1.0)
        if self.reference is None:
            raise RuntimeError("the reference candidate must be measured first")
        count = min(len(self.reference), len(detections))
        return _measurement(summary, fidelity(self.reference[:count], detections[:count]).map50)

    def _measure_gated(
        self, candidate: Candidate, frames: int, options: PipelineOptions
    ) -> Measurement:
        reference = self._full_reference[:frames]
        if len(reference) < frames:
            raise RuntimeError(
                f"the reference ran {len(self._full_reference)} frames, not {frames}: measure it"
                " on as many first"
            )
        summary, detections = self._run(candidate, frames, options, frames)
        # Frames in = frames out holds in file mode; a shorter run would be scored on fewer
        # frames than the budget speaks of.
        if len(detections) < frames:
            raise RuntimeError(f"the gated run gave {len(detections)} of {frames} frames")
        score = fidelity(reference, detections).map50
        return replace(_measurement(summary, score), motion=dict(summary.motion))


def _measurement(summary: RunSummary, score: float) -> Measurement:
    """A run's summary and fidelity as a Measurement."""
    stages = summary.stages
    return Measurement(
        fps=summary.fps,
        p50_ms=sum(stages[s]["p50"] for s in LATENCY_STAGES if s in stages),
        p99_ms=sum(stages[s]["p99"] for s in LATENCY_STAGES if s in stages),
        fidelity=score,
        frames=summary.frames_out,
        stages={name: figures["mean"] for name, figures in stages.items() if figures["mean"]},
    )
