"""One audit record as one compact JSON line, made on the caller's thread in a few µs.

Why not json.dumps: the components emit audit records on their event loops, between the
steps of a produce round trip. json.dumps of a record after coercing its values costs
~12 µs; this costs a third of that, so records are encoded inline, at the moment they are
emitted, instead of being handed to a later loop turn (which cost a wake-up of the loop
per record on trio and put the encoding back on the data path in between its steps).

The output is byte for byte what `json.dumps(coerce(kind, record), separators=(",", ":"))`
gives (tests/unit/spark_audit/test_jsonline.py checks it against the json module with
generated records): keys in the record's order, strings through the json module's own
ASCII escaper, numbers by their repr, NaN/Infinity as the json module writes them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from json.encoder import encode_basestring_ascii as _quote  # the json module's C escaper
from typing import Any

_TRUE, _FALSE, _NULL = "true", "false", "null"


def _long(name: str, value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name}: expected an integer, got {type(value).__name__}")
    if isinstance(value, float) and not value.is_integer():
        raise ValueError(f"{name}: expected an integer, got {value!r}")
    return int.__repr__(int(value))


def _double(name: str, value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name}: expected a number, got {type(value).__name__}")
    f = float(value)
    if math.isfinite(f):
        return float.__repr__(f)
    return "NaN" if f != f else ("Infinity" if f > 0 else "-Infinity")


def _boolean(name: str, value: Any) -> str:
    if not isinstance(value, bool):
        raise TypeError(f"{name}: expected a boolean, got {type(value).__name__}")
    return _TRUE if value else _FALSE


class LineEncoder:
    """Encodes records whose field types are known: {field name: "string" | "long" | "double" | "boolean"}."""

    def __init__(self, field_types: Mapping[str, str]) -> None:
        unknown = {t for t in field_types.values()} - {"string", "long", "double", "boolean"}
        if unknown:
            raise ValueError(f"unknown field types {sorted(unknown)}")
        self._types = dict(field_types)
        self._keys = {name: _quote(name) + ":" for name in field_types}  # '"name":'

    def encode(self, record: Mapping[str, Any]) -> bytes:
        """The record's JSON line, newline included.

        Raises KeyError for a field without a declared type, TypeError or ValueError for a
        value that does not fit its type (a fractional float in a long field, say).
        """
        types, keys = self._types, self._keys
        parts = []
        for name, value in record.items():
            declared = types[name]
            if value is None:
                text = _NULL
            elif declared == "string":
                text = _quote(value if type(value) is str else str(value))
            elif declared == "long":
                text = int.__repr__(value) if type(value) is int else _long(name, value)
            elif declared == "double":
                text = float.__repr__(value) if type(value) is float and math.isfinite(value) \
                    else _double(name, value)
            else:
                text = _boolean(name, value)
            parts.append(keys[name] + text)
        return ("{" + ",".join(parts) + "}\n").encode("ascii")
