"""Build frozen config dataclasses from plain mappings (TOML), with precise errors.

Strategy: every config section is a frozen dataclass whose fields carry type hints and
defaults; `build()` walks the hints, converts lists to tuples (and a comma-separated string
where a field is marked COMMA_SEPARATED), rejects unknown keys and wrong types, then lets each section's `__post_init__` check ranges. Errors name the
dotted path of the offending key so a user can find it in their file.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

_D = TypeVar("_D", bound="DataclassInstance")


class ConfigError(ValueError):
    """The configuration given by the user is invalid (message names the key)."""


class CommaSeparated:
    """Marks a `tuple[str, ...]` setting that also takes one comma-separated string, as Kafka
    writes bootstrap.servers: `Annotated[tuple[str, ...], COMMA_SEPARATED]`. Items are
    stripped; empty items (a trailing comma) are dropped."""


COMMA_SEPARATED = CommaSeparated()


@functools.cache
def field_types(cls: type) -> Mapping[str, Any]:
    """The resolved type hints of a config dataclass (with Annotated extras), resolved once
    per class: resolving evaluates every annotation's string, and a process's start-up
    builds and layers its config sections many times (~0.1 CPU-s of a proxy's start, 2026-11-30).
    Not to be changed by callers."""
    return typing.get_type_hints(cls, include_extras=True)


def build(cls: type[_D], data: Mapping[str, Any] | None, path: str = "") -> _D:
    """Construct dataclass `cls` from `data`; raises ConfigError on any bad key or value."""
    data = dict(data or {})
    hints = field_types(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ConfigError(f"{_join(path, unknown[0])}: unknown setting (known: {', '.join(sorted(fields))})")
    kwargs = {}
    for name, value in data.items():
        kwargs[name] = _convert(hints[name], value, _join(path, name))
    try:
        return cls(**kwargs)
    except ConfigError:
        raise
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{path or cls.__name__}: {exc}") from exc


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _convert(hint: Any, value: Any, path: str) -> Any:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if hint is Any:
        return value
    if origin is typing.Annotated:
        if isinstance(value, str) and any(isinstance(m, CommaSeparated) for m in args[1:]):
            value = [item.strip() for item in value.split(",") if item.strip()]
        return _convert(args[0], value, path)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _convert(arg, value, path)
            except ConfigError as exc:
                errors.append(str(exc))
        raise ConfigError(errors[0] if errors else f"{path}: bad value {value!r}")
    if origin is typing.Literal:
        if value not in args:
            raise ConfigError(f"{path}: must be one of {', '.join(map(repr, args))}, got {value!r}")
        return value
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        if isinstance(value, hint):
            return value
        if not isinstance(value, Mapping):
            raise ConfigError(f"{path}: expected a table, got {type(value).__name__}")
        return build(hint, value, path)
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{path}: expected a list, got {type(value).__name__}")
        item = args[0] if args else Any
        return tuple(_convert(item, v, f"{path}[{i}]") for i, v in enumerate(value))
    if origin in (dict, Mapping) or hint is dict:
        if not isinstance(value, Mapping):
            raise ConfigError(f"{path}: expected a table, got {type(value).__name__}")
        kt, vt = args if args else (Any, Any)
        return types.MappingProxyType(
            {_convert(kt, k, path): _convert(vt, v, f"{path}.{k}") for k, v in value.items()}
        )
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{path}: expected a number, got {value!r}")
        return float(value)
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{path}: expected an integer, got {value!r}")
        return value
    if hint is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{path}: expected true or false, got {value!r}")
        return value
    if hint is str:
        if not isinstance(value, str):
            raise ConfigError(f"{path}: expected a string, got {value!r}")
        return value
    if isinstance(hint, type) and isinstance(value, hint):
        return value
    raise ConfigError(f"{path}: cannot use {value!r} as {hint}")


def require(condition: bool, message: str) -> None:
    """For `__post_init__` range checks: raise ConfigError(message) unless condition holds."""
    if not condition:
        raise ConfigError(message)
