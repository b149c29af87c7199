"""A configuration value as the type its option's hint names (bool, int, float, str, Path,
tuples, mappings, unions), or a one-line ConfigError naming the key and what it expected."""

from __future__ import annotations

import math
import types
import typing
from pathlib import Path
from typing import Any

from visionrt.errors import ConfigError

BOOL_WORDS = {"true": True, "false": False, "yes": True, "no": False, "on": True, "off": False}


def type_name(hint: Any) -> str:
    return getattr(hint, "__name__", str(hint).replace("typing.", ""))


def coerce(key: str, value: Any, hint: Any) -> Any:
    """`value` as the type `hint` names, or a ConfigError naming the key and what it expected."""
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in (a for a in args if a is not type(None)):
            try:
                return coerce(key, value, arg)
            except ConfigError as err:
                errors.append(str(err))
        raise ConfigError(errors[0])
    if origin is tuple:
        items = value if isinstance(value, list | tuple) else [value]
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(coerce(key, v, args[0]) for v in items)
        if len(items) != len(args):
            raise ConfigError(f"{key}: expected {len(args)} values, got {value!r}")
        return tuple(coerce(key, v, a) for v, a in zip(items, args, strict=True))
    if origin is not None and issubclass(origin, typing.Mapping | dict):
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping of key: value, got {value!r}")
        return {str(k): str(v) for k, v in value.items()}
    if hint is bool:
        if isinstance(value, bool):
            return value
        # Read as YAML 1.2 (visionrt.yaml_text), `on`/`yes` are words: a switch takes them too.
        word = BOOL_WORDS.get(value.lower()) if isinstance(value, str) else None
        if word is not None:
            return word
        raise ConfigError(f"{key}: expected true or false, got {value!r}")
    if hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise ConfigError(f"{key}: expected an integer, got {value!r}")
    if hint is float:
        number = as_number(value)
        if number is None:
            raise ConfigError(f"{key}: expected a number, got {value!r}")
        return number
    if hint is str:
        if isinstance(value, str | int | float) and not isinstance(value, bool):
            return str(value)
        raise ConfigError(f"{key}: expected a string, got {value!r}")
    if hint is Path:
        if isinstance(value, str) and value:
            return Path(value)
        raise ConfigError(f"{key}: expected a path, got {value!r}")
    raise ConfigError(f"{key}: unsupported option type {type_name(hint)}")


def as_number(value: Any) -> float | None:
    """`value` as a float, or None. YAML 1.1 reads `1e-3` as a string (its floats need a dot),
    so numeric strings count; NaN does not (every comparison with it is false, so range checks
    would let it through)."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        number = float(value)
    except ValueError:
        return None
    return None if math.isnan(number) else number
