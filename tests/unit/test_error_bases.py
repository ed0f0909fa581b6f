"""Every error the product defines is either bad input (a ValueError: fixing the input is the
only cure) or a SidecarError, whose `retriable` says whether trying again may succeed.

Read from the source (ast), not imported: some modules do work at import (proxy/memory.py
asks the C library for malloc_trim) that the unit tier refuses."""

from __future__ import annotations

import ast
import builtins
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PRODUCT_PACKAGES = ("azsidecar", "core", "kafka_protocol", "kafka_upstream", "planner", "leader_placement",
                    "proxy", "router", "leader_notify", "wal_s3", "spark_audit")
BUILTIN_ERRORS = {name for name, value in vars(builtins).items()
                  if isinstance(value, type) and issubclass(value, BaseException)}


def _bases_by_class() -> dict[str, set[str]]:
    """Simple class name -> the simple names of its bases, over every product module."""
    bases: dict[str, set[str]] = {}
    for package in PRODUCT_PACKAGES:
        for path in (REPO / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.ClassDef):
                    names = {b.attr if isinstance(b, ast.Attribute) else getattr(b, "id", "") for b in node.bases}
                    bases.setdefault(f"{path.relative_to(REPO)}:{node.name}", set()).update(names)
    return bases


def _ancestors(qualified: str, bases: dict[str, set[str]]) -> set[str]:
    by_name: dict[str, list[str]] = {}
    for key in bases:
        by_name.setdefault(key.rsplit(":", 1)[1], []).append(key)
    seen: set[str] = set()
    todo = list(bases[qualified])
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for key in by_name.get(name, []):
            todo.extend(bases[key])
    return seen


def test_every_product_error_is_bad_input_or_says_whether_to_retry():
    bases = _bases_by_class()
    errors = {key: _ancestors(key, bases) for key in bases}
    errors = {key: up for key, up in errors.items() if up & BUILTIN_ERRORS or "SidecarError" in up}
    assert "wal_s3/errors.py:WalWriteError" in errors and "core/msk_iam.py:MskIamError" in errors  # the scan sees them
    neither = sorted(key for key, up in errors.items()
                     if "SidecarError" not in up and not ({"ValueError", "UnicodeError"} & up)
                     and key != "core/errors.py:SidecarError"
                     and not key.rsplit(":", 1)[1].startswith("_"))  # a module's private control-flow signal
    assert neither == []


def test_what_retriable_says_for_errors_of_a_kind():
    from spark_audit._io import AuditJobError
    from wal_s3.writer import WalFencedError, WalWriteError

    assert WalWriteError("stopped").retriable is True
    assert WalWriteError("full", retriable=False).retriable is False
    assert WalFencedError("superseded").retriable is False  # a new writer, not this one, may go on
    assert AuditJobError("no input").retriable is False
