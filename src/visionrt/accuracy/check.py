"""The check behind a plan's proof on a frame size (`geometry.settle`): configurations tried in
order on frames spread over the source's start, each scored against the FP32 reference with the
project's fidelity (mAP50), the first within the plan's budget kept as the proof."""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from visionrt import hardware
from visionrt.backends import BackendOptions
from visionrt.errors import ModelLoadError, VisionRTError
from visionrt.fidelity import REFERENCE_BACKEND, fidelity
from visionrt.models import demo_model_path, read_model_spec
from visionrt.plans import Plan
from visionrt.plans.proof import budget, input_hw, letterbox_facts, sections_for
from visionrt.plans.resolve import layered
from visionrt.postprocess import PostprocessOptions
from visionrt.preprocess.letterbox import aligned_sizes
from visionrt.sources import SourceOptions, open_source
from visionrt.tasks import DetectTask
from visionrt.tasks.base import run_one
from visionrt.types import Detections

CHECK_FRAMES = 60
CONTROLLED = "openvino-int8-ac"  # INT8 with accuracy control (export/accuracy_control.py)
# The check's frames are spread over this many of a file's first frames (a minute at 25 FPS; a
# second or two of decoding).
SPREAD_FRAMES = 1500
# The check's bound: frames past this many seconds of reference inference are not scored (a slow
# CPU scores fewer frames, never waits minutes). 10 frames at least, or nothing is proven.
CHECK_SECONDS = 20.0
MIN_FRAMES = 10
# `tune SOURCES…` proves the plan on each other frame size with a longer check.
TUNE_CHECK_FRAMES, TUNE_CHECK_SECONDS = 150, 90.0
Image = npt.NDArray[np.uint8]
Say = Callable[[str], None]
# Makes the plan's artifact `recipe` of `source` at an input size (None: the model's own),
# calibrated on the videos given, and returns its path: `tune` passes its exporter
# (`tune.evaluate.export_sized`: it builds what a proof needs); a run passes none and builds
# nothing.
Build = Callable[[Path, str, str | list[str], tuple[int, int] | None], Path]


@dataclass(frozen=True, slots=True)
class Option:
    """One configuration to try on a geometry: `run` as a proof records it ("plan",
    "reference" or the sections), `sections` what runs (None: the reference)."""

    label: str
    run: str | dict[str, Any]
    sections: dict[str, Any] | None
    input_hw: tuple[int, int] | None = None  # None: the reference, at the model's size
    missing: str = ""  # why it cannot be tried without building an artifact (a run builds none)


def first_size(spec: str) -> tuple[int, int] | None:
    try:
        first = next(_frames(spec, 1), None)
    except VisionRTError:
        return None  # the run itself says what is wrong with it
    return None if first is None else (int(first.shape[0]), int(first.shape[1]))


def _frames(spec: str, count: int, spread: bool = False) -> Iterator[Image]:
    """The first `count` frames of `spec`; with `spread`, `count` frames evenly spaced over its
    first SPREAD_FRAMES (a file that says its length): the first seconds of a clip can be
    easier than the rest (a camera that pans, people who come closer)."""
    options = SourceOptions(mode="file", workers="thread")
    source = open_source(spec, 0, replace(options, max_frames=count))
    span = min(int(getattr(source, "frame_count", 0) or 0), SPREAD_FRAMES) if spread else 0
    step = max(1, span // count) if span else 1
    if step > 1:
        source.close()
        source = open_source(spec, 0, replace(options, max_frames=step * count))
    try:
        for index, frame in enumerate(source.frames()):
            if index % step == 0:
                yield frame.image
    finally:
        source.close()


def prove(
    plan: Plan,
    sections: Mapping[str, Any],
    hw: tuple[int, int],
    spec: str,
    conf: float,
    say: Say,
    frames: int = CHECK_FRAMES,
    seconds: float = CHECK_SECONDS,
    past: Sequence[str] = (),
    build: Build | None = None,
) -> dict[str, Any]:
    """Score the options on `frames` frames spread over the start of `spec` (of size `hw`)
    against the FP32 reference: the proof for `hw` (`plans.proof.record` keeps it) names the
    first within the plan's budget (the reference when none is) and what the others scored;
    options labelled in `past` (refuted by a run's audit) are skipped, and so is one whose
    artifact is not cached unless `build` (`tune`: a run builds nothing)."""
    started = time.monotonic()
    reference_model = Path(str(plan.tuned.get("source_model") or ""))
    name = Path(spec).name
    entry: dict[str, Any] = {"source": name, "by": "check", "at": now()}
    if not reference_model.is_file():
        # Nothing to compare with: the plan runs as it is, and says so.
        return {**entry, "run": "plan", "fidelity": 0.0, "frames": 0, "unchecked": True}
    say(f"checking the plan on {hw[0]}×{hw[1]} ({frames} frames of {name})")
    images, reference = reference_detections(reference_model, spec, frames, conf, seconds)
    limit, tried = budget(plan), []
    model_hw = read_model_spec(reference_model).input_size
    for option in options(plan, sections, hw, model_hw, spec, say, build):
        if option.label in past:  # refuted by a run's audit on this size: not again
            tried.append({"label": option.label, "refuted": True})
            continue
        if option.missing:
            tried.append({"label": option.label, "missing": option.missing})
            continue
        score, error = 1.0, ""
        if option.sections is not None:
            try:
                score = fidelity(reference, _detect(option.sections, images, conf)).map50
            except VisionRTError as err:  # it cannot run here: the next option
                score, error = 0.0, (str(err).splitlines() or [type(err).__name__])[0]
        tried.append({"label": option.label, "fidelity": round(score, 4)})
        if error:
            tried[-1]["error"] = error
        if score >= limit:
            size = option.input_hw or model_hw
            return {
                **entry,
                "run": option.run,
                "label": option.label,
                "fidelity": round(score, 4),
                "frames": len(images),
                "input_hw": list(size),
                "letterbox": letterbox_facts(hw, size),
                "tried": tried,
                "seconds": round(time.monotonic() - started, 1),
            }
    raise AssertionError("the reference always passes")  # pragma: no cover


def options(
    plan: Plan,
    sections: Mapping[str, Any],
    hw: tuple[int, int],
    model_hw: tuple[int, int],
    spec: str,
    say: Say,
    build: Build | None = None,
) -> Iterator[Option]:
    """What to try on a geometry, in order (built lazily: an artifact is exported, where
    `build`, only when the options before it failed; else taken from the export cache)."""
    current = input_hw(plan, sections) or model_hw
    aligned = next(iter(aligned_sizes(hw, model_hw)), model_hw)
    seen = set()
    for size, what in ((aligned, "aligned"), (model_hw, "own")):
        if size in seen:
            continue
        seen.add(size)
        if size == current:
            yield Option(f"the plan ({size_text(size)})", "plan", dict(sections), size)
            continue
        at = "the model's own size" if what == "own" else "the size aligned for this source"
        label = f"the plan's configuration at {size_text(size)}"
        change = _resized(plan, size, model_hw, spec, say, at, build)
        if isinstance(change, str):
            yield Option(label, "plan", None, size, missing=change)
            continue
        yield Option(label, change, sections_for(sections, {"run": change}), size)
    recipe = str((plan.tuned.get("artifact") or {}).get("export") or "")
    if recipe == "openvino-int8" and build is not None:
        # Quantization that fell short here: its costliest layers back in float (issue #49),
        # at the model's own size (on the 640×480 cameras INT8 held least at the smaller one).
        why = "its costliest layers in float"
        change = _resized(plan, model_hw, model_hw, spec, say, why, build, CONTROLLED)
        label = f"the plan's configuration with accuracy control at {size_text(model_hw)}"
        yield Option(label, change, sections_for(sections, {"run": change}), model_hw)
    if (sections.get("inference") or {}).get("precision") == "int8":
        yield from _in_float(plan, sections, aligned, model_hw)
    yield Option("the FP32 reference", "reference", None)


def _in_float(
    plan: Plan, sections: Mapping[str, Any], aligned: tuple[int, int], model_hw: tuple[int, int]
) -> Iterator[Option]:
    """Quantization is what fails most often on footage it was not calibrated on: the plan's
    runtime in float before the (much slower) reference — BF16 where the CPU has it at the
    aligned size and the model's own, then FP32 at the model's own (the reference's arithmetic
    on a faster runtime)."""
    backend = str(sections.get("backend"))
    on_cpu = "cpu" in str((sections.get("inference") or {}).get("device", "cpu"))
    has_bf16 = bool(hardware.BF16_FEATURES & hardware.cpu_features())
    bf16 = backend == "openvino" and on_cpu and has_bf16
    tries = [("bf16", aligned), ("bf16", model_hw)] if bf16 else [("fp32", aligned)]
    for precision, size in dict.fromkeys([*tries, ("fp32", model_hw)]):
        change = {
            "model": str(plan.tuned.get("source_model")),
            "inference": {
                "precision": precision,
                "input_size": None if size == model_hw else list(size),
            },
        }
        label = f"{backend} {precision} at {size_text(size)}"
        yield Option(label, change, sections_for(sections, {"run": change}), size)


def _resized(
    plan: Plan,
    size: tuple[int, int],
    model_hw: tuple[int, int],
    spec: str,
    say: Say,
    why: str,
    build: Build | None = None,
    recipe: str = "",
) -> dict[str, Any] | str:
    """The change that runs the plan's configuration at another input size: its artifact
    recipe (or `recipe`) at that size (from the export cache; exported there where `build`), or
    that input size; without `build`, why none is cached and what makes one."""
    recipe = recipe or str((plan.tuned.get("artifact") or {}).get("export") or "")
    if not recipe:
        return {"inference": {"input_size": None if size == model_hw else list(size)}}
    if build is None:
        from visionrt.models.cache import default_root, sized_export

        cached = sized_export(Path(str(plan.run.get("model"))), size, (default_root(),))
        if cached is None:
            return (
                f"no {size_text(size)} {recipe} export cached, and a run builds none:"
                f" `{_export_command(plan, recipe, size)}` or `visionrt tune` makes it"
            )
        return {"model": str(cached), "inference": {"input_size": None}}
    source = Path(str(plan.tuned.get("source_model")))
    video = Path(str(plan.tuned.get("video") or ""))
    # Calibrated as the plan's artifact was: on every video tune was given, where it had several.
    videos = [str(v) for v in plan.tuned.get("videos") or [] if Path(str(v)).is_file()]
    say(f"the plan's {recipe} artifact at {size_text(size)} ({why}): exporting, or reusing it")
    calibrate = videos if len(videos) > 1 else str(video) if video.is_file() else spec
    built = build(source, recipe, calibrate, None if size == model_hw else size)
    return {"model": str(built), "inference": {"input_size": None}}


def _export_command(plan: Plan, recipe: str, size: tuple[int, int]) -> str:
    """`visionrt export [MODEL] --to RECIPE --imgsz HxW [--calibrate VIDEO …]`: the plan's
    artifact made at `size`, calibrated as it was where that was on several videos (the model
    left out where it is the demo's)."""
    words = ["visionrt export"]
    source = Path(str(plan.tuned.get("source_model") or ""))
    try:
        demo = demo_model_path().resolve()
    except ModelLoadError:
        demo = None
    words += [] if not source.is_file() or source.resolve() == demo else [str(source)]
    words += [f"--to {recipe}", f"--imgsz {size[0]}x{size[1]}"]
    videos = [str(v) for v in plan.tuned.get("videos") or []]
    words += [f"--calibrate {video}" for video in videos] if len(videos) > 1 else []
    return " ".join(words)


def reference_detections(
    model: Path, spec: str, frames: int, conf: float, seconds: float = CHECK_SECONDS
) -> tuple[list[Image], list[Detections]]:
    """Frames spread over the start of `spec` and the FP32 reference's detections on them,
    bounded by `seconds` of inference (at least MIN_FRAMES)."""
    task = DetectTask(model, REFERENCE_BACKEND, BackendOptions(), PostprocessOptions(conf=conf))
    images: list[Image] = []
    found: list[Detections] = []
    started = time.monotonic()
    try:
        buffer = task.new_buffer()
        for image in _frames(spec, frames, spread=True):
            images.append(image.copy())
            found.append(run_one(task, image, buffer))
            if len(images) >= MIN_FRAMES and time.monotonic() - started > seconds:
                break
    finally:
        task.close()
    return images, found


def _detect(sections: Mapping[str, Any], images: list[Image], conf: float) -> list[Detections]:
    inference = {**(sections.get("inference") or {}), "batch": 1}
    task = DetectTask(
        str(sections["model"]),
        str(sections.get("backend", "")),
        layered(BackendOptions(), inference),
        PostprocessOptions(conf=conf),
    )
    try:
        buffer = task.new_buffer()
        return [run_one(task, image, buffer) for image in images]
    finally:
        task.close()


def size_text(hw: tuple[int, int]) -> str:
    return f"{hw[0]}×{hw[1]}"


def now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
