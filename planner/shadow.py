"""A shadow run (router.shadow): which cross-zone produce the policy would have sent through
the WAL, the part a plan prices (pure)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from core.audit import PRODUCE_KINDS
from planner.audit_batches import field_number


@dataclass(frozen=True)
class ShadowSplit:
    """A shadow run's cross-zone produce: what the policy would have sent through the WAL
    (`wal_bytes`, the part the plan prices) and what crosses directly either way."""

    wal_bytes: float
    direct_bytes: float


def _is_shadow_direct(r: Mapping[str, object]) -> bool:
    return r.get("kind") in PRODUCE_KINDS and r.get("shadow_route") == "direct_cross"


def shadow_split(records: Iterable[Mapping[str, object]]) -> ShadowSplit | None:
    """None unless the records come from shadow mode (a produce_batch or produce_summary with a shadow_route,
    audit v9); else the successful cross-zone bytes by the route the policy would have taken."""
    wal = direct = 0.0
    seen = False
    for r in records:
        if r.get("kind") not in PRODUCE_KINDS or not r.get("shadow_route"):
            continue
        seen = True
        if r.get("error_code", 0) not in (0, None):
            continue
        if r.get("shadow_route") == "wal":
            wal += field_number(r, "bytes")
        elif r.get("shadow_route") == "direct_cross":
            direct += field_number(r, "bytes")
    return ShadowSplit(wal, direct) if seen else None


def without_shadow_direct(records: Iterable[Mapping[str, object]]) -> Iterable[Mapping[str, object]]:
    """The records less the produce_batch / produce_summary records of a shadow run that the policy would have
    sent direct too (topics not piloted, transactional batches, `cost` keeping a zone direct):
    they cost the same in every plan, so the plan of the rest has the same net savings."""
    return (r for r in records if not _is_shadow_direct(r))
