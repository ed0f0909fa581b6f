"""Writes core/audit_records.py, the typed form of the audit schema in core/audit.py: one
TypedDict per record kind and an `AuditSink` protocol whose `emit` is overloaded per kind,
so mypy checks every emitted record's field names and value types against the schema.

The schema stays the one source (core/audit.py `KINDS`; Spark's StructTypes are made from it
too); the generated module is checked in, and tests/unit/test_audit_records.py fails when it
differs from what this renders. Regenerate with:

    .venv/bin/python -m core.audit_records_gen --write core/audit_records.py
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from core.audit import COMMON_FIELDS, KINDS

PYTHON_TYPES = {"string": "str", "long": "int", "double": "float", "boolean": "bool"}
WRITER_FIELDS = ("schema_version", "kind")  # always the writer's; an emitter may set ts_ms and zone
REGENERATE = ".venv/bin/python -m core.audit_records_gen --write core/audit_records.py"


def class_name(kind: str) -> str:
    return "".join(part.capitalize() for part in kind.split("_")) + "Record"


def render() -> str:
    out = ['"""The audit record kinds of core/audit.py as types. GENERATED: do not edit; regenerate with',
           f"`{REGENERATE}`.", "",
           "Fields are optional (total=False): the writer fills a missing one with null, adds",
           "schema_version and kind, and ts_ms and zone when the emitter left them out; a name or a",
           'type the schema does not have is a type error."""', "",
           "from __future__ import annotations", "",
           "from collections.abc import Mapping",
           "from typing import Any, Literal, Protocol, TypedDict, overload", ""]
    for kind, fields in KINDS.items():
        out += ["", f"class {class_name(kind)}(TypedDict, total=False):"]
        common = tuple(f for f in COMMON_FIELDS if f[0] not in WRITER_FIELDS)
        out += [f"    {name}: {PYTHON_TYPES[kind_type]}" for name, kind_type in common + fields]
        out.append("")
    out += ["", "class AuditSink(Protocol):",
            '    """Where components put audit records. `emit` never blocks the data path."""', ""]
    for kind in KINDS:
        out += ["    @overload",
                f'    def emit(self, kind: Literal["{kind}"], fields: {class_name(kind)}) -> None: ...', ""]
    out += ["    def emit(self, kind: str, fields: Mapping[str, Any]) -> None: ...", ""]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m core.audit_records_gen")
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--write", metavar="FILE")
    group.add_argument("--check", metavar="FILE")
    args = parser.parse_args(argv)
    text = render()
    if args.write:
        Path(args.write).write_text(text)
        return 0
    if Path(args.check).read_text() != text:
        print(f"{args.check} is not current; regenerate it: {REGENERATE}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
