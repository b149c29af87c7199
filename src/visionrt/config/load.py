"""A `RunConfig` from its layers: defaults < YAML file < `--set key=value` < the command line's
flags, each value checked against its option's type, with one-line errors naming the key."""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from visionrt.config.pipeline import PipelineOptions, nested_key
from visionrt.config.run import RunConfig
from visionrt.config.serve import ServeOptions
from visionrt.config.sizes import SizedDetector, parse_size_key, size_key
from visionrt.config.values import coerce
from visionrt.errors import ConfigError
from visionrt.fuse.shapes import parse_analytics
from visionrt.yaml_text import load_yaml


def _build(cls: type[Any], values: dict[str, Any], prefix: str) -> Any:
    hints = typing.get_type_hints(cls)
    fields = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - fields)
    if cls is RunConfig and "tasks" in unknown:  # read from a file by _tasks_as_sections
        raise ConfigError(
            "tasks: a list of tasks is read from a --config file; with --set, give its"
            " sections (model, depth.model, depth.on)"
        )
    if unknown:
        # A config file may also hold `tasks:` (read into the sections before this).
        known = sorted({*fields, "tasks"} if cls is RunConfig else fields)
        raise ConfigError(
            f"unknown option '{prefix}{unknown[0]}': expected one of"
            f" {', '.join(prefix + f for f in known)}"
        )
    kwargs: dict[str, Any] = {}
    for name, value in values.items():
        hint = hints[name]
        if dataclasses.is_dataclass(hint):
            if not isinstance(value, dict):
                raise ConfigError(f"{prefix}{name}: expected a section of options, got {value!r}")
            kwargs[name] = _build(hint, value, f"{prefix}{name}.")  # type: ignore[arg-type]
        elif cls is RunConfig and name == "sizes":
            kwargs[name] = _sizes(value)
        elif cls is RunConfig and name == "analytics":
            parse_analytics(value)  # its one-line errors, before anything loads
            kwargs[name] = value
        elif cls is ServeOptions and name == "events":  # checked by sinks.events, at start
            if not isinstance(value, dict):
                raise ConfigError(
                    f"serve.events: expected a section (mqtt, webhooks), got {value!r}"
                )
            kwargs[name] = value
        elif name == "backend" and value is None:  # the run's, depth's, a frame size's
            kwargs[name] = "null"  # YAML reads `backend: null` as None; it names the backend
        else:
            kwargs[name] = coerce(f"{prefix}{name}", value, hint)
    return cls(**kwargs)


def _sizes(value: Any) -> dict[str, SizedDetector]:
    """The `sizes` section: per frame size "HEIGHTxWIDTH", a detector with its model."""
    if not isinstance(value, dict):
        raise ConfigError(f"sizes: expected a section of frame sizes, e.g. 480x640, got {value!r}")
    sizes = {}
    for key, detector in value.items():
        size = size_key(parse_size_key(key))
        if not isinstance(detector, dict) or not detector.get("model"):
            raise ConfigError(f"sizes.{key}: expected a section with a model, got {detector!r}")
        sizes[size] = _build(SizedDetector, detector, f"sizes.{key}.")
    return sizes


def _set_dotted(tree: dict[str, Any], key: str, value: Any) -> None:
    if not isinstance(value, dict):
        key = nested_key(key)  # a flat pipeline key of before, as its section's
    parts = key.split(".")
    if not all(parts):
        raise ConfigError(f"option '{key}': expected section.key, e.g. postprocess.conf")
    node = tree
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"option {key}: '{part}' is not a section")
        node = child
    if value == {} and isinstance(node.get(parts[-1]), dict):
        return  # an empty section merges nothing: it must not erase what a lower layer set
    node[parts[-1]] = value


def load_config(
    path: str | Path | None = None,
    overrides: list[str] | None = None,
    values: dict[str, Any] | None = None,
    base: dict[str, Any] | None = None,
) -> RunConfig:
    """Defaults, then `base` (a plan's sections), then the YAML file at `path`, then
    `KEY=VALUE` overrides (values parsed as YAML), then `values` (a nested dict, e.g. explicit
    command-line flags)."""
    return _build(RunConfig, _layers(path, overrides, values, base), "")


def pipeline_options(**values: Any) -> PipelineOptions:
    """The `pipeline` section from keys as a config file gives them — sections
    (`tracking={"enabled": True}`) or the flat keys of before (`track=True`) — checked as
    `load_config` checks them."""
    tree: dict[str, Any] = {}
    for key, value in _flatten({"pipeline": values}, keep_empty=True):
        _set_dotted(tree, key, value)
    return _build(PipelineOptions, tree.get("pipeline", {}), "pipeline.")


def config_over(base: Mapping[str, Any], given: Mapping[str, Any]) -> RunConfig:
    """`given` (the user's settings as `given_options` reads them) over `base` (a plan's
    sections): what `load_config` makes of the same layers."""
    tree: dict[str, Any] = {}
    for key, value in _flatten(dict(base)):
        _set_dotted(tree, key, value)
    for key, value in _flatten(dict(given), keep_empty=True):
        _set_dotted(tree, key, value)
    return _build(RunConfig, tree, "")


def given_options(
    path: str | Path | None = None,
    overrides: list[str] | None = None,
    values: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """What the user set, as a nested dict of the keys given in the file, `--set` and flags —
    defaults left out (`--precision fp32` is a choice even though fp32 is the default)."""
    return _layers(path, overrides, values, None)


def _layers(
    path: str | Path | None,
    overrides: list[str] | None,
    values: dict[str, Any] | None,
    base: dict[str, Any] | None,
) -> dict[str, Any]:
    tree: dict[str, Any] = {}
    for key, value in _flatten(base or {}):
        _set_dotted(tree, key, value)
    if path is not None:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as err:
            raise ConfigError(f"cannot read config {path}: {err.strerror or err}") from err
        except UnicodeDecodeError as err:
            raise ConfigError(f"config {path} is not a text file ({err.reason})") from err
        loaded = load_yaml(text, f"config {path}") or {}
        if not isinstance(loaded, dict):
            raise ConfigError(f"config {path}: expected a mapping at the top level")
        loaded = _tasks_as_sections(loaded)
        for key, value in _flatten(loaded, keep_empty=True):
            _set_dotted(tree, key, value)
    for override in overrides or []:
        key, sep, raw = override.partition("=")
        if not sep or not key:
            raise ConfigError(f"--set '{override}': expected KEY=VALUE, e.g. postprocess.conf=0.4")
        value = load_yaml(raw, f"--set {key.strip()}: '{raw}'") if raw else ""
        # Mappings merge key by key, as in the YAML file: `--set inference.settings={a: 1}`
        # keeps the other settings a lower layer gave.
        for dotted, leaf in _flatten({key.strip(): value}, keep_empty=True):
            _set_dotted(tree, dotted, leaf)
    for key, value in _flatten(values or {}):
        _set_dotted(tree, key, value)
    return tree


TASK_KINDS = ("detect", "depth")


def _tasks_as_sections(loaded: dict[str, Any]) -> dict[str, Any]:
    """A config's `tasks:` list — each `{kind: detect|depth, model: …, sources: [names], …}` —
    as the sections the run reads: the detector's `model`/`backend`/`inference`, and `depth`
    with `on` = its sources. The detector runs on every source; depth on those listed (all when
    none are)."""
    tasks = loaded.pop("tasks", None)
    if tasks is None:
        return loaded
    if not isinstance(tasks, list) or not all(isinstance(t, dict) for t in tasks):
        raise ConfigError(
            "tasks: expected a list of mappings, e.g. - {kind: detect, model: m.onnx}"
        )
    loaded = dict(loaded)
    seen: set[str] = set()
    for index, task in enumerate(tasks):
        task = dict(task)
        kind = task.pop("kind", None)
        if kind not in TASK_KINDS:
            raise ConfigError(f"tasks[{index}].kind: expected detect or depth, got {kind!r}")
        if kind in seen:
            raise ConfigError(f"tasks[{index}]: a second {kind} task (one of each is supported)")
        seen.add(kind)
        sources = task.pop("sources", None) or []
        if not isinstance(sources, list):
            raise ConfigError(f"tasks[{index}].sources: expected a list of source names")
        if kind == "detect":
            if sources:
                raise ConfigError(
                    f"tasks[{index}].sources: the detector runs on every source; leave it out"
                )
            for key in ("model", "backend"):
                if key in task and key in loaded:
                    raise ConfigError(f"tasks[{index}].{key}: also given at the top level")
            unknown = set(task) - {"model", "backend", "inference"}
            if unknown:
                raise ConfigError(f"tasks[{index}]: unknown detect key {sorted(unknown)[0]!r}")
            inference = {**loaded.get("inference", {}), **task.pop("inference", {})}
            loaded.update(task)
            if inference:
                loaded["inference"] = inference
        else:
            loaded["depth"] = {**loaded.get("depth", {}), **task, "on": sources}
    return loaded


def _flatten(
    tree: dict[str, Any], prefix: str = "", keep_empty: bool = False
) -> list[tuple[str, Any]]:
    """Dotted keys and leaf values; None leaves are dropped unless `keep_empty` (a file's own
    `key: null` is a value, an unset flag is not)."""
    flat: list[tuple[str, Any]] = []
    for key, value in tree.items():
        if isinstance(value, dict) and value:
            flat.extend(_flatten(value, f"{prefix}{key}.", keep_empty))
        elif value is not None or keep_empty:
            flat.append((f"{prefix}{key}", value))
    return flat
