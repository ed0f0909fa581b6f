"""docs/audit-records.md documents the record contract of core/audit.py: its schema version,
every kind under a heading of its own, and every field of a kind in that kind's table."""

from __future__ import annotations

import re
from pathlib import Path

from core.audit import COMMON_FIELDS, KINDS, SCHEMA_HISTORY, SCHEMA_VERSION

DOC = (Path(__file__).resolve().parents[2] / "docs" / "audit-records.md").read_text()
KINDS_PART = DOC.split("## Record kinds")[1].split("\n## ")[0]


def sections() -> dict[str, str]:
    """kind -> its section's text, from the `### kind — ...` headings."""
    parts = re.split(r"^### (\w+) — .*$", KINDS_PART, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2]))


def documented_fields(section: str) -> set[str]:
    """The names in the first column of the section's table (`topic, partition` names two)."""
    rows = [line.split("|")[1] for line in section.splitlines() if line.startswith("| ") and "---" not in line]
    return {name.strip() for row in rows[1:] for name in row.split(",")}


def test_the_heading_names_the_schema_version_and_the_history_reaches_it():
    assert KINDS_PART.startswith(f" (schema version {SCHEMA_VERSION})")
    assert max(SCHEMA_HISTORY) == SCHEMA_VERSION
    assert f"v{SCHEMA_VERSION}:" in DOC.split("## Versioning")[1]


def test_every_kind_and_every_field_is_documented():
    documented = sections()
    assert set(documented) == set(KINDS)
    missing = {kind: sorted({n for n, _ in fields} - documented_fields(documented[kind]))
               for kind, fields in KINDS.items()}
    assert {k: v for k, v in missing.items() if v} == {}
    assert {n for n, _ in COMMON_FIELDS} <= documented_fields(KINDS_PART.split("\n### ")[0])
