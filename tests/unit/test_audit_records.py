"""core/audit_records.py is what core/audit_records_gen.py renders from the schema, and the
types it gives are the schema's: a field the schema lists is a field of its kind's TypedDict
with the Python type of its Spark type, written out by hand here for two kinds."""

from __future__ import annotations

import typing
from pathlib import Path

from core import audit_records
from core.audit import KINDS
from core.audit_records_gen import REGENERATE, class_name, render

ROOT = Path(__file__).resolve().parents[2]


def test_the_generated_module_is_current():
    assert (ROOT / "core" / "audit_records.py").read_text() == render(), f"regenerate it: {REGENERATE}"


def test_every_kind_has_its_record_type_with_the_schemas_fields():
    for kind, fields in KINDS.items():
        hints = typing.get_type_hints(getattr(audit_records, class_name(kind)))
        assert set(hints) == {"ts_ms", "zone"} | {name for name, _type in fields}, kind


def test_two_kinds_by_hand():
    assert typing.get_type_hints(audit_records.MetadataLookupRecord) == {
        "ts_ms": int, "zone": str, "topic": str, "partition": int, "leader_zone": str, "cache": str}
    assert typing.get_type_hints(audit_records.S3RequestRecord) == {
        "ts_ms": int, "zone": str, "operation": str, "purpose": str, "requests": int}
