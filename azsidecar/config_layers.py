"""The config's layers: file, environment, flags, merged into one mapping with each setting's origin.

Strategy: each layer is a list of assignments (a key path, a value, where it came from);
they are applied in order of precedence (file, then environment, then flags) onto one
plain mapping, which `core.configload.build` validates as a whole, so a value from the
environment gets the same checks and messages as the same value in the file. The origin of
every setting is computed from the same assignments (for `azsidecar config show` and for
error messages); nothing here reads the environment, the caller passes it.

The environment's naming rule: `AZSIDECAR__<KEY>__<KEY>...=value`, the key path in upper
or lower case, one `__` between levels (`AZSIDECAR__WAL__LINGER_MS=100` sets
`wal.linger_ms`; `AZSIDECAR__ROUTER__PRICES__S3_PUT_PER_1000` sets
`router.prices.s3_put_per_1000`). The value is read as a TOML value where it is one (`100`,
`true`, `["a:9092", "b:9092"]`, `{ "1" = "use1-az1" }`, `"123"`), else taken as the string
it is (`use1-az1`, `acme-wal`).
"""

from __future__ import annotations

import dataclasses
import functools
import tomllib
import types
import typing
from collections.abc import Mapping
from typing import Any

from core.configload import ConfigError

ENV_PREFIX = "AZSIDECAR__"
ENV_SEPARATOR = "__"
DEFAULT = "default"
FILE = "file"
FLAGS = "command line"

KeyPath = tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class Assignment:
    """One layer's value for the key at `path` (a whole table when `value` is one)."""

    path: KeyPath
    value: Any
    origin: str  # FILE, FLAGS, or "$AZSIDECAR__..." (the variable's name)


def env_name(path: KeyPath) -> str:
    """The variable that sets `path`: ("wal", "linger_ms") -> AZSIDECAR__WAL__LINGER_MS."""
    return ENV_PREFIX + ENV_SEPARATOR.join(part.upper() for part in path)


def parse_env_value(raw: str) -> Any:
    """`raw` as a TOML value if it is exactly one, else the string itself."""
    try:
        parsed = tomllib.loads(f"value = {raw}")
    except tomllib.TOMLDecodeError:
        return raw
    return parsed["value"] if list(parsed) == ["value"] else raw


def env_assignments(environ: Mapping[str, str]) -> list[Assignment]:
    """The `AZSIDECAR__...` variables of `environ`, in name order. Raises ConfigError for a
    name with an empty level (`AZSIDECAR__WAL____X`)."""
    out = []
    for name in sorted(environ):
        if not name.startswith(ENV_PREFIX):
            continue
        parts = name[len(ENV_PREFIX):].split(ENV_SEPARATOR)
        if not all(parts):
            raise ConfigError(f"${name}: a config key's levels are separated by one {ENV_SEPARATOR!r}, "
                              f"as in {env_name(('wal', 'linger_ms'))}")
        out.append(Assignment(tuple(p.lower() for p in parts), parse_env_value(environ[name]), f"${name}"))
    return out


def dotted_assignments(overrides: Mapping[str, Any] | None, origin: str = FLAGS) -> list[Assignment]:
    """{"wal.bucket": "b", ...} (None values skipped: a flag not given)."""
    return [Assignment(tuple(k.split(".")), v, origin) for k, v in (overrides or {}).items() if v is not None]


def merge(base: Mapping[str, Any], assignments: list[Assignment]) -> dict[str, Any]:
    """A copy of `base` with each assignment applied in turn; a table value replaces the table
    at its path. Raises ConfigError if a path goes through a value that is not a table."""
    data: dict[str, Any] = _copy(base)  # a Mapping is copied into a dict
    for a in assignments:
        node = data
        for depth, part in enumerate(a.path[:-1]):
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ConfigError(f"{'.'.join(a.path[:depth + 1])} is not a table, so {a.origin} cannot set "
                                  f"{'.'.join(a.path)}")
            node = child
        node[a.path[-1]] = _copy(a.value)
    return data


def origins(cls: type, file_data: Mapping[str, Any], assignments: list[Assignment]) -> dict[str, str]:
    """Dotted key of every setting of dataclass `cls` (nested sections included) -> where its
    value came from: DEFAULT, FILE, or the origins of the assignments that made it, joined
    with " + " (a table set in the file with one entry added by a variable)."""
    layers = [Assignment(path, None, FILE) for path in _settings(cls, (), file_data)] + assignments
    out = {".".join(path): DEFAULT for path in _settings(cls, (), None)}
    for i, a in enumerate(layers):
        if any(_prefix(b.path, a.path) for b in layers[i + 1:]):
            continue  # replaced by a later layer
        touched = _settings(cls, a.path, a.value) if a.origin != FILE else [a.path]
        for path in touched:
            key = ".".join(path)
            out[key] = a.origin if out.get(key, DEFAULT) == DEFAULT else f"{out[key]} + {a.origin}"
    return out


def origin_of_key(message: str, assignments: list[Assignment]) -> str | None:
    """The origin of the last assignment whose key the error `message` starts with (or
    is inside of), so the message can say which variable to fix."""
    for a in reversed(assignments):
        key = ".".join(a.path)
        if message.startswith(key) and message[len(key):len(key) + 1] in (":", ".", "[", " "):
            return a.origin
    return None


def _prefix(short: KeyPath, long: KeyPath) -> bool:
    return long[:len(short)] == short


@functools.cache
def _hints(section: type) -> dict[str, Any]:
    """A config section's resolved type hints, once per class (resolving evaluates every
    annotation; a start-up walks the sections for each value set). Not to be changed."""
    return typing.get_type_hints(section)


def _settings(cls: type, path: KeyPath, value: Any) -> list[KeyPath]:
    """The settings (leaves of the dataclass tree) that a value at `path` sets; with `value`
    None, every setting under `path`. Unknown keys are skipped (build() reports them)."""
    hint: Any = cls
    for depth, part in enumerate(path):
        section = _dataclass(hint)
        if section is None:
            return [path[:depth]]  # inside a table setting (router.broker_zones.1)
        hints = _hints(section)
        if part not in hints:
            return []
        hint = hints[part]
    section = _dataclass(hint)
    if section is None:
        return [path]
    if value is not None and not isinstance(value, Mapping):
        return [path]  # a section given a non-table: build() refuses it
    hints = _hints(section)
    names = [f.name for f in dataclasses.fields(section) if f.init]
    keys = names if value is None else [k for k in value if k in hints]
    return [p for k in keys for p in _settings(cls, (*path, k), None if value is None else value[k])]


def _dataclass(hint: Any) -> type | None:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        hint = args[0] if len(args) == 1 else None
    return hint if isinstance(hint, type) and dataclasses.is_dataclass(hint) else None


def _copy(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _copy(v) for k, v in value.items()}
    return value
