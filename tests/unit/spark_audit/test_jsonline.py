"""The audit line encoder against the json module, byte for byte.

The reference is `json.dumps(values, separators=(",", ":"))` of the record with each value
converted to its declared type as the writer promises (integral floats in long fields
become ints, ints in double fields become floats). Nothing of spark_audit but the encoder
is imported: the types come from the test's own tables.
"""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spark_audit._jsonline import LineEncoder

TYPES = {"s": "string", "n": "long", "x": "double", "b": "boolean", "zone": "string", "ts_ms": "long"}


def reference(record: dict) -> bytes:
    converted = {}
    for name, value in record.items():
        declared = TYPES[name]
        if value is None:
            converted[name] = None
        elif declared == "long":
            converted[name] = int(value)
        elif declared == "double":
            converted[name] = float(value)
        elif declared == "string":
            converted[name] = str(value)
        else:
            converted[name] = value
    return json.dumps(converted, separators=(",", ":")).encode() + b"\n"


longs = st.one_of(st.integers(min_value=-(2**70), max_value=2**70),
                  st.integers(min_value=-(2**52), max_value=2**52).map(float))
doubles = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(min_value=-(2**60), max_value=2**60))
values = {"s": st.text(), "n": longs, "x": doubles, "b": st.booleans(), "zone": st.text(max_size=20),
          "ts_ms": st.integers(min_value=0, max_value=2**45)}


@st.composite
def records(draw):
    names = draw(st.permutations(list(TYPES)))  # any key order: the line keeps the record's
    names = names[:draw(st.integers(min_value=0, max_value=len(names)))]
    return {n: draw(st.one_of(st.none(), values[n])) for n in names}


@given(records())
def test_lines_equal_the_json_module_byte_for_byte(record):
    assert LineEncoder(TYPES).encode(record) == reference(record)


def test_a_known_line_field_by_field():
    line = LineEncoder(TYPES).encode({"s": 'a"\\\n\u00e9\U0001f600', "n": 3.0, "x": 5, "b": False,
                                      "zone": None, "ts_ms": 1764000000000})
    assert line == (b'{"s":"a\\"\\\\\\n\\u00e9\\ud83d\\ude00",'  # quote, backslash, newline, e-acute, surrogate pair
                    b'"n":3,'  # an integral float in a long field is written as an integer
                    b'"x":5.0,'  # an int in a double field is written as a float
                    b'"b":false,"zone":null,"ts_ms":1764000000000}\n')


def test_special_floats_are_written_as_the_json_module_writes_them():
    enc = LineEncoder({"x": "double"})
    assert [enc.encode({"x": v}) for v in (math.nan, math.inf, -math.inf, -0.0)] == [
        b'{"x":NaN}\n', b'{"x":Infinity}\n', b'{"x":-Infinity}\n', b'{"x":-0.0}\n']


@pytest.mark.parametrize("field, value, error", [
    ("n", 1.5, ValueError),  # a fractional float in a long field
    ("n", math.nan, ValueError),
    ("n", "7", TypeError),
    ("n", True, TypeError),  # a bool is not a count
    ("x", "1.0", TypeError),
    ("x", False, TypeError),
    ("b", 1, TypeError),
])
def test_values_that_do_not_fit_their_type_raise(field, value, error):
    with pytest.raises(error, match=field):
        LineEncoder(TYPES).encode({field: value})


def test_an_undeclared_field_raises_key_error():
    with pytest.raises(KeyError):
        LineEncoder(TYPES).encode({"other": 1})


def test_an_unknown_declared_type_is_refused():
    with pytest.raises(ValueError, match="timestamp"):
        LineEncoder({"t": "timestamp"})
