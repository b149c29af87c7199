"""How `visionrt run` reads its configuration: flags as a config layer over `--set` and
`--config`, handed to the library's plan decision (`pipeline.plan_run`), and the demo defaults
for what is still unset."""

from __future__ import annotations

import dataclasses
import sys
import typing
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

from visionrt.config import RunConfig
from visionrt.config.pipeline import FLAT_KEYS
from visionrt.errors import ConfigError
from visionrt.pipeline.plan_run import PlannedRun, planned_config


def flag_values(**flags: Any) -> dict[str, Any]:
    """Explicit `run` flags, by parameter name, as a nested config dict; flags left unset are
    None and do not override. A flag named as its config key (`flag_key`) needs no mapping of
    its own: adding one is adding the parameter."""
    values: dict[str, Any] = {}
    for name, given in flags.items():
        _refuse_a_flag_as_value(name, given)
        key, convert = _RENAMED.get(name) or (flag_key(name), _as_given)
        *sections, leaf = key.split(".")
        node = values
        for section in sections:
            node = node.setdefault(section, {})
        node[leaf] = convert(given)
    return values


def _refuse_a_flag_as_value(name: str, given: Any) -> None:
    """A flag right after one that takes a value is taken as that value (`--out --no-video`
    wrote into a folder named `--no-video`): refused, naming both. (`--ray`'s address check
    says so in its own words, with what an address looks like.)"""
    if name in ("sources", "ray"):
        return
    for value in given if isinstance(given, list | tuple) else [given]:
        if isinstance(value, str | Path) and str(value).startswith("--"):
            flag = "--" + name.rstrip("_").replace("_", "-")
            raise ConfigError(
                f"{flag}: expected a value, got the flag {value} ({flag} was given none)"
            )


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
    sections share the name. The pipeline's flags are named after its keys of before each
    policy had a section (`--detect-every` → pipeline.tracking.detect_every: FLAT_KEYS)."""
    if name in FLAT_KEYS:
        return f"pipeline.{FLAT_KEYS[name]}"
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


def configure_run(
    plan: Path | None,
    no_plan: bool,
    config: Path | None,
    overrides: list[str] | None,
    values: dict[str, Any],
) -> tuple[RunConfig, str]:
    """`configure_with_plan` without the plan decision: the configuration and its lines."""
    planned = configure_with_plan(plan, no_plan, config, overrides, values)
    return planned.config, "\n".join(planned.notes)


def configure_with_plan(
    plan: Path | None,
    no_plan: bool,
    config: Path | None,
    overrides: list[str] | None,
    values: dict[str, Any],
    fingerprint: dict[str, Any] | None = None,
) -> PlannedRun:
    """The run's configuration, the lines saying which plan it uses and why (or why not), and
    the plan decision itself (`PlannedRun.use`: what an audit's verdict goes back into), as
    the library decides it for every entry point (`pipeline.plan_run.planned_config`). A
    proof's progress goes to stderr as it happens (it takes seconds)."""

    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    return planned_config(config, overrides or (), values, plan, no_plan, say, fingerprint)
