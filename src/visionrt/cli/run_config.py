"""How `visionrt run` builds its configuration: flags as a config layer, the tuned plan's layer
under them (when it serves the run), and the demo defaults for what is still unset."""

from __future__ import annotations

import dataclasses
import sys
import typing
from collections.abc import Callable
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Any

from visionrt.config import RunConfig, given_options, load_config
from visionrt.config.sizes import SizedDetector, size_key
from visionrt.errors import ConfigError, SourceError
from visionrt.models import demo_model_path
from visionrt.paths import DEMO_VIDEO
from visionrt.plans import PlanRequest, PlanUse, use_depth_plan, use_gating, use_plan
from visionrt.plans.resolve import CHOICES, layered
from visionrt.plans.store import PIPELINE_KEY
from visionrt.sources.naming import split_name
from visionrt.sources.registry import LIVE_KINDS, source_kind


def flag_values(**flags: Any) -> dict[str, Any]:
    """Explicit `run` flags, by parameter name, as a nested config dict; flags left unset are
    None and do not override. A flag named as its config key (`flag_key`) needs no mapping of
    its own: adding one is adding the parameter."""
    values: dict[str, Any] = {}
    for name, given in flags.items():
        key, convert = _RENAMED.get(name) or (flag_key(name), _as_given)
        *sections, leaf = key.split(".")
        node = values
        for section in sections:
            node = node.setdefault(section, {})
        node[leaf] = convert(given)
    return values


def _as_given(value: Any) -> Any:
    """A flag's value as set; a switch left off (False) and an empty list are unset: a flag can
    turn an option on, never off (`--no-…` flags say so by name)."""
    if value is False or (isinstance(value, list | tuple) and not value):
        return None
    return list(value) if isinstance(value, list | tuple) else value


def _off(value: bool) -> bool | None:
    return False if value else None


def _names(text: str | None) -> list[str] | None:
    return [name.strip() for name in text.split(",")] if text is not None else None


# The flags not named as their config key, with the key and how their value reads.
_RENAMED: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "imgsz": ("inference.input_size", lambda text: parse_size(text) if text else None),
    "out": ("output.dir", _as_given),
    "no_video": ("output.video", _off),
    "no_jsonl": ("output.jsonl", _off),
    "depth": ("depth.model", _as_given),
    "depth_on": ("depth.on", _names),
    "depth_size": ("depth.short_side", _as_given),
    "ray": ("cluster.address", _as_given),
    "workers": ("cluster.workers", _as_given),
}


@cache
def _config_keys() -> dict[str, list[str]]:
    """Every top-level config key and every key of a section, by the flag names that reach it:
    the key's own name and `section_key`."""
    names: dict[str, list[str]] = {}
    hints = typing.get_type_hints(RunConfig)
    for top in dataclasses.fields(RunConfig):
        section = hints[top.name]
        if not dataclasses.is_dataclass(section):
            names.setdefault(top.name, []).append(top.name)
            continue
        for field in dataclasses.fields(section):
            key = f"{top.name}.{field.name}"
            names.setdefault(field.name, []).append(key)
            names.setdefault(f"{top.name}_{field.name}", []).append(key)
    return names


def flag_key(name: str) -> str:
    """The config key a `run` flag's parameter `name` sets: the top-level key of that name or
    `section_key` (model → model, not depth.model; depth_smoothing → depth.smoothing), else the
    one section key of that name (conf → postprocess.conf). TypeError where none fits or two
    sections share the name."""
    keys = _config_keys().get(name, [])
    exact = [key for key in keys if key.replace(".", "_") == name]
    chosen = exact or keys
    if len(chosen) != 1:
        raise TypeError(
            f"run flag '{name}': expected a name of one config key, got"
            f" {', '.join(chosen) or 'none'} (name it so, or map it in _RENAMED)"
        )
    return chosen[0]


def parse_size(text: str) -> list[int]:
    """'640' or '512x640' (or '512,640') → [height, width], whole numbers of pixels from 1 to
    MAX_INPUT_SIDE; ConfigError otherwise (an empty side, '640x', included)."""
    from visionrt.tasks.detect import MAX_INPUT_SIDE

    parts = [p.strip() for p in text.lower().replace("x", ",").split(",")]
    if len(parts) not in (1, 2) or not all(p.isascii() and p.isdigit() for p in parts):
        raise ConfigError(f"--imgsz '{text}': expected SIZE or HEIGHTxWIDTH, e.g. 640 or 512x640")
    sizes = [int(p) for p in parts]
    if len(sizes) == 1:
        sizes *= 2
    if min(sizes) < 1 or max(sizes) > MAX_INPUT_SIDE:
        raise ConfigError(
            f"--imgsz '{text}': expected sides of 1 to {MAX_INPUT_SIDE} pixels (a 4K frame fits"
            " whole; --tile for larger frames)"
        )
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


def configure_run(
    plan: Path | None,
    no_plan: bool,
    config: Path | None,
    overrides: list[str] | None,
    values: dict[str, Any],
) -> tuple[RunConfig, str]:
    """`configure_with_plan` without the plan decision: the configuration and its lines."""
    cfg, notes, _ = configure_with_plan(plan, no_plan, config, overrides, values)
    return cfg, notes


def configure_with_plan(
    plan: Path | None,
    no_plan: bool,
    config: Path | None,
    overrides: list[str] | None,
    values: dict[str, Any],
    fingerprint: dict[str, Any] | None = None,
) -> tuple[RunConfig, str, PlanUse]:
    """The run's configuration, the lines saying which plan it uses and why (or why not), and
    the plan decision itself (`PlanUse`: what an audit's verdict goes back into). The plans
    are this machine's, or those of the machine `fingerprint` describes (a cluster's node).

    The user's own settings (defaults < `--config` < `--set` < flags) are read first; the plan
    (`--plan FILE`, or the one cached for the model on this machine when the user chose no
    backend, precision, size or runtime setting) is layered under them and its artifact runs
    in place of the model the user named — when it was tuned for that model (by content) and
    can serve the run (`plans.use_plan`); otherwise it is set aside with the reason."""
    if plan is not None and no_plan:
        raise ConfigError("--plan and --no-plan: expected one of them")
    own = load_config(config, overrides, values)
    if no_plan:
        return with_defaults(own), "", PlanUse(None, "")
    given = given_options(config, overrides, values)
    request = PlanRequest(
        model=Path(own.model) if own.model else None,
        chosen=_chosen(given),
        batch=own.inference.batch,
        tile=bool(own.pipeline.tile),
        live=_live(own),
    )
    use = _with_geometry(use_plan(request, plan, fingerprint=fingerprint), own)
    cfg, gating_note, regions_note = own, "", ""
    if use.runs:
        cfg, gating_note = _with_gating(use, given, config, overrides, values)
        if use.sections is not None:
            cfg = replace(cfg, model=str(use.sections["model"]))
        cfg = _with_sizes(cfg, use, (config, overrides, values))
        cfg, regions_note = _with_regions(cfg, use, own.model)
    cfg, depth_note = _with_depth_plan(cfg, given.get("depth") or {}, fingerprint)
    cfg = _with_audit(cfg, use)
    notes = "\n".join(n for n in (use.note, gating_note, regions_note, depth_note) if n)
    return with_defaults(cfg), notes, use


def _with_sizes(
    cfg: RunConfig, use: PlanUse, layers: tuple[Path | None, list[str] | None, dict[str, Any]]
) -> RunConfig:
    """The detectors the sources of some frame sizes run instead of the run's own (what the plan
    proved there: `PlanUse.by_size`), each under the user's settings as the run's own is; the
    reference runs the model the user named, with the user's settings alone."""
    if not use.by_size or cfg.sizes:  # a `sizes` section of the user's own wins
        return cfg
    sizes = dict(cfg.sizes)
    for size, sections in use.by_size.items():
        if sections is None:
            mine = with_defaults(load_config(*layers))
        else:
            mine = replace(load_config(*layers, base=sections), model=str(sections["model"]))
        sizes[size_key(size)] = SizedDetector(mine.model, mine.backend, mine.inference)
    return replace(cfg, sizes=sizes)


def _with_gating(
    use: PlanUse,
    given: dict[str, Any],
    config: Path | None,
    overrides: list[str] | None,
    values: dict[str, Any],
) -> tuple[RunConfig, str]:
    """The user's settings over the plan's sections, and over the plan's motion gating unless
    the user chose the mode (`plans.use_gating`); a gating section that does not compose with
    the user's options is set aside with the reason, never an error."""
    sections = use.sections or {}  # {}: the sources of some sizes only run the plan's
    gating = use_gating(use.plan, given.get(PIPELINE_KEY) or {})
    if not gating.section:
        return load_config(config, overrides, values, base=sections), gating.note
    try:
        layers = {**sections, PIPELINE_KEY: gating.section}
        return load_config(config, overrides, values, base=layers), gating.note
    except ConfigError as err:
        cfg = load_config(config, overrides, values, base=sections)
        return cfg, f"plan's motion gating set aside: {err}"


def _with_regions(cfg: RunConfig, use: PlanUse, asked: str) -> tuple[RunConfig, str]:
    """The detector `--motion regions` runs on its windows under the plan, where the user named
    none (`pipeline.planned.planned_regions`), and the line saying which."""
    from visionrt.pipeline.planned import planned_regions

    options, note = planned_regions(cfg.pipeline, use.plan, cfg.model, asked or None)
    return replace(cfg, pipeline=options), note


def _with_geometry(use: PlanUse, own: RunConfig) -> PlanUse:
    """The plan as proven on the run's source sizes (`accuracy.geometry.settle`); a check's
    progress goes to stderr as it happens (it takes seconds)."""
    if use.sections is None:
        return use
    from visionrt.accuracy.geometry import settle

    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    specs = list(own.sources) or [str(DEMO_VIDEO)]
    return settle(use, specs, own.postprocess.conf, say)


def _with_audit(cfg: RunConfig, use: PlanUse) -> RunConfig:
    """The live audit's reference and budget from the detector plan that runs (the model it was
    tuned from, the fidelity it was tuned to), where the user set none."""
    if not use.runs:
        return cfg
    from visionrt.pipeline.audit import planned_audit

    return replace(cfg, pipeline=planned_audit(cfg.pipeline, use.plan))


def _with_depth_plan(
    cfg: RunConfig, given: dict[str, Any], fingerprint: dict[str, Any] | None = None
) -> tuple[RunConfig, str]:
    """The depth model's plan (`tune --depth`) in place of FP32, unless the user chose its
    backend or inference settings (`plans.use_depth_plan`)."""
    if not cfg.depth.model:
        return cfg, ""
    use = use_depth_plan(
        Path(cfg.depth.model), _chosen(given), cfg.depth.short_side, fingerprint=fingerprint
    )
    if use.sections is None:
        return cfg, use.note
    depth = replace(
        cfg.depth,
        model=str(use.sections["model"]),
        backend=str(use.sections["backend"]),
        inference=layered(cfg.depth.inference, use.sections.get("inference") or {}),
        short_side=int(use.sections["short_side"]),
    )
    from visionrt.pipeline.audit import planned_audit  # its reference and budget

    return replace(cfg, depth=planned_audit(depth, use.plan)), use.note


def _chosen(section: dict[str, Any]) -> tuple[str, ...]:
    """The configuration-picking keys a section of the user's own settings gives (explicit
    values count: `--precision fp32` is a choice although fp32 is the default)."""
    chosen = ("backend",) if "backend" in section else ()
    return chosen + tuple(key for key in CHOICES if key in (section.get("inference") or {}))


def _live(config: RunConfig) -> bool:
    """Whether the run will be live (mode, --realtime, or a camera/stream among the sources),
    told from the strings alone: the plan is chosen before any source opens."""
    if config.source.mode != "auto":
        return config.source.mode == "live"
    kinds = [source_kind(split_name(spec)[1]) for spec in config.sources]
    return config.source.realtime or any(kind in LIVE_KINDS for kind in kinds)
