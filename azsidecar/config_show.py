"""The effective config as TOML, each value followed by where it came from; secrets redacted.

Strategy: walk the validated Config (sections are nested dataclasses) and write each
setting as `key = value  # origin`, one table per section, so the output is itself a
config file that loads to the same Config. A secret (a field declared `repr=False`) is
never written: a comment says "<redacted>" when one is given, and where from. A setting whose value is None (unset: the code picks) is written as a comment, TOML
having no null.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

REDACTED = "<redacted>"


def render(config: DataclassInstance, origins: Mapping[str, str], secrets: Mapping[str, str | None]) -> str:
    """`config` (a dataclass) as TOML. `origins`: dotted key -> where its value came from;
    `secrets`: dotted key of each secret -> where it is given from outside the config (a
    variable's name) or None."""
    return "\n".join(_section(config, (), origins, secrets)) + "\n"


def _section(obj: DataclassInstance | type[DataclassInstance], path: tuple[str, ...], origins: Mapping[str, str],
             secrets: Mapping[str, str | None]) -> list[str]:
    """The lines of `obj`'s own settings, then its sub-sections' tables."""
    lines: list[str] = []
    sub: list[str] = []
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        key = ".".join((*path, f.name))
        if dataclasses.is_dataclass(value):
            sub += ["", f"[{key}]", *_section(value, (*path, f.name), origins, secrets)]
            continue
        origin = origins.get(key, "default")
        if not f.repr:  # a secret: a comment, so the output stays a file that loads
            given = origin if value else secrets.get(key)
            lines.append(f"# {f.name} = {REDACTED}  # {given}" if given else f"# {f.name}: a secret, none given")
        elif value is None:
            lines.append(f"# {f.name}: unset  # {origin}")
        else:
            lines.append(f"{f.name} = {toml_value(value)}  # {origin}")
    return lines + sub


def toml_value(value: Any) -> str:
    """`value` (str, bool, int, float, a sequence or mapping of them) in TOML."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)  # a JSON string is a TOML basic string
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, Mapping):
        return "{ " + ", ".join(f"{json.dumps(str(k))} = {toml_value(v)}" for k, v in value.items()) + " }" \
            if value else "{}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    raise TypeError(f"no TOML form for {value!r}")
