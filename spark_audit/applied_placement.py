"""What the last applied leader plan saved: its moved partitions' cross-zone produce bytes in
the window after the apply against the same-length window before it.

Pure Python over the rows of `jobs.last_apply` (no Spark here), for the report's "Leader
placement" section. A batch crossed zones when the leader zone it named is known and is not
the producer's zone. Both windows are measured, not modelled: a change of traffic between
them (more or fewer producers, a leader that moved again) shows up in the comparison, which
is why the bytes produced are reported beside the bytes that crossed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Row = Mapping[str, Any]


@dataclass(frozen=True)
class AppliedPartition:
    topic: str
    partition: int
    from_zone: str
    to_zone: str
    before_bytes: int
    before_cross_bytes: int
    after_bytes: int
    after_cross_bytes: int

    @property
    def saved_bytes(self) -> int:
        return self.before_cross_bytes - self.after_cross_bytes


@dataclass(frozen=True)
class LastApply:
    plan_id: str
    applied_from_ms: int
    applied_to_ms: int
    window_ms: int  # each window's length; 0: the audit has no traffic before or after the apply
    partitions: tuple[AppliedPartition, ...]  # by topic and partition
    usd_per_byte: float  # what a byte produced across zones costs

    def _sum(self, field: str) -> int:
        return sum(int(getattr(p, field)) for p in self.partitions)

    @property
    def before_bytes(self) -> int:
        return self._sum("before_bytes")

    @property
    def before_cross_bytes(self) -> int:
        return self._sum("before_cross_bytes")

    @property
    def after_bytes(self) -> int:
        return self._sum("after_bytes")

    @property
    def after_cross_bytes(self) -> int:
        return self._sum("after_cross_bytes")

    @property
    def saved_bytes(self) -> int:
        return self.before_cross_bytes - self.after_cross_bytes

    def usd(self, cross_bytes: int) -> float:
        return cross_bytes * self.usd_per_byte


def last_apply(rows: Sequence[Row], usd_per_byte: float) -> LastApply | None:
    """The comparison around the last apply, from `jobs.last_apply` rows; None without rows
    (no leader_move record in the input)."""
    if not rows:
        return None
    first = rows[0]
    sums: dict[tuple[str, int], list[int]] = {}  # before, before cross, after, after cross
    zones: dict[tuple[str, int], tuple[str, str]] = {}
    for r in rows:
        key = (str(r["topic"]), int(r["partition"]))
        zones[key] = (str(r["from_zone"] or ""), str(r["to_zone"] or ""))
        acc = sums.setdefault(key, [0, 0, 0, 0])
        if r["window"] not in ("before", "after"):
            continue  # the row of a moved partition without traffic in either window
        size = int(r["bytes"] or 0)
        leader, source = r["leader_zone"] or "", r["source_zone"] or ""
        at = 0 if r["window"] == "before" else 2
        acc[at] += size
        if leader and leader != source:
            acc[at + 1] += size
    parts = tuple(AppliedPartition(t, p, *zones[(t, p)], *sums[(t, p)]) for t, p in sorted(sums))
    return LastApply(str(first["plan_id"]), int(first["applied_from_ms"]), int(first["applied_to_ms"]),
                     int(first["window_ms"] or 0), parts, usd_per_byte)
