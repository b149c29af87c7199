"""How `visionrt run` builds its configuration: flags as a config layer, the tuned plan's layer
under them, and the demo defaults for what is still unset."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from visionrt.backends import BackendOptions
from visionrt.config import RunConfig, load_config
from visionrt.errors import ConfigError, SourceError
from visionrt.model import DEMO_VIDEO, demo_model_path
from visionrt.tune.plan import Plan, cached_plan, fingerprint_differences


def flag_values(**flags: Any) -> dict[str, Any]:
    """Explicit flags as a nested config dict; flags left unset are None and do not override."""
    imgsz = flags.pop("imgsz")
    values: dict[str, Any] = {
        "model": flags["model"],
        "backend": flags["backend"],
        "source": {
            "mode": flags["mode"],
            "max_frames": flags["max_frames"],
            "realtime": True if flags["realtime"] else None,
        },
        "inference": {
            "device": flags["device"],
            "precision": flags["precision"],
            "threads": flags["threads"],
            "batch": flags["batch"],
            "input_size": parse_size(imgsz) if imgsz else None,
        },
        "postprocess": {"conf": flags["conf"], "iou": flags["iou"]},
        "output": {
            "dir": flags["out"],
            "telemetry": flags["telemetry"],
            "video": False if flags["no_video"] else None,
            "jsonl": False if flags["no_jsonl"] else None,
        },
    }
    values["pipeline"] = {
        "track": True if flags["track"] else None,
        "detect_every": flags["detect_every"],
        "tracker": flags["tracker"],
        "slo_ms": flags["slo_ms"],
        "tile": flags["tile"],
        "tile_overlap": flags["tile_overlap"],
    }
    values["output"]["mot"] = True if flags["mot"] else None
    values["output"]["metrics_port"] = flags["metrics_port"]
    if flags["sources"]:
        values["sources"] = list(flags["sources"])
    depth_on = flags["depth_on"]
    values["depth"] = {
        "model": flags["depth"],
        "on": [n.strip() for n in depth_on.split(",") if n.strip()] if depth_on else None,
        "short_side": flags["depth_size"],
        "smoothing": flags["depth_smoothing"],
    }
    return values


def parse_size(text: str) -> list[int]:
    parts = text.lower().replace("x", ",").split(",")
    try:
        sizes = [int(p) for p in parts if p]
    except ValueError as err:
        raise ConfigError(
            f"--imgsz '{text}': expected SIZE or HEIGHTxWIDTH, e.g. 640 or 512x640"
        ) from err
    if len(sizes) == 1:
        sizes = sizes * 2
    if len(sizes) != 2:
        raise ConfigError(f"--imgsz '{text}': expected SIZE or HEIGHTxWIDTH")
    return sizes


def with_defaults(config: RunConfig) -> RunConfig:
    if not config.model:
        config = replace(config, model=str(demo_model_path()))
    if not config.sources:
        if not DEMO_VIDEO.is_file():
            raise SourceError(
                f"no source given and the demo video {DEMO_VIDEO} is missing:"
                " apt-get install opencv-doc (or `make setup`)"
            )
        config = replace(config, sources=(str(DEMO_VIDEO),))
    return config


# Settings that choose the configuration: given any of them, the user's choice wins over a plan.
_CHOICES = ("backend", "device", "precision", "input_size", "fold_preprocess", "settings")


def plan_layer(
    plan: Path | None,
    no_plan: bool,
    config: Path | None,
    overrides: list[str] | None,
    values: dict[str, Any],
) -> tuple[dict[str, Any] | None, str]:
    """The plan's sections to run under the user's own settings, and the line saying so.

    `--plan FILE` runs that plan (flags still override single settings). Otherwise, when the
    user chose no backend, precision, size or runtime setting, the plan cached for the model on
    this machine is used; `--no-plan` runs the reference."""
    if plan is not None and no_plan:
        raise ConfigError("--plan and --no-plan: expected one of them")
    if plan is not None:
        loaded = Plan.load(plan)
        note = f"plan {plan}: {loaded.summary_line()}"
        for difference in fingerprint_differences(loaded):
            note += f"\nwarning: this machine differs from the plan's: {difference}"
        return loaded.run, note
    if no_plan:
        return None, ""
    chosen = load_config(config, overrides, values)
    inference = {f: getattr(chosen.inference, f) for f in _CHOICES if f != "backend"}
    defaults = {f: getattr(BackendOptions(), f) for f in inference}
    if chosen.backend or inference != defaults:
        return None, ""
    model = Path(chosen.model) if chosen.model else demo_model_path()
    if model.suffix != ".onnx" or not model.is_file():
        return None, ""
    found = cached_plan(model)
    if found is None:
        return None, (
            f"no tuned plan for {model.name} on this machine: running the FP32 reference;"
            " `visionrt tune` finds the fastest configuration here (minutes, once)"
        )
    cached, path = found
    return cached.run, f"plan {path.name}: {cached.summary_line()} (--no-plan: the reference)"
