"""Explicit Spark schemas built from the record contract in `core.audit`.

Only the Spark jobs import this module (it imports pyspark); writers use `records`.
One StructType per kind, and one "all records" union that the jobs read every file with:
audit files mix kinds, so the reader takes the union and each job filters on `kind`.
Fields missing from a line (older schema versions) read as null.
"""

from __future__ import annotations

from pyspark.sql.types import (
    BooleanType,
    DataType,
    DoubleType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from core.audit import COMMON_FIELDS, KINDS

CORRUPT_COLUMN = "_corrupt_record"  # the PERMISSIVE reader puts unparseable lines here

_SPARK_TYPES: dict[str, DataType] = {
    "string": StringType(),
    "long": LongType(),
    "double": DoubleType(),
    "boolean": BooleanType(),
}


def all_records_schema() -> StructType:
    """Union of every kind's fields, in first-seen order.

    Raises ValueError if two kinds declare the same field name with different types
    (the union could not hold both; records.py must keep names consistent).
    """
    types: dict[str, str] = {}
    for name, t in COMMON_FIELDS + tuple(f for fields in KINDS.values() for f in fields):
        if types.setdefault(name, t) != t:
            raise ValueError(f"audit field {name!r} declared as {types[name]} and {t}")
    return StructType([StructField(name, _SPARK_TYPES[t], nullable=True) for name, t in types.items()])


def input_schema() -> StructType:
    """`all_records_schema()` plus the corrupt-record column the reader fills."""
    return StructType(all_records_schema().fields + [StructField(CORRUPT_COLUMN, StringType(), True)])
