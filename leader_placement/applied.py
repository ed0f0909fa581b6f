"""What earlier applies did, from their `leader_move` audit records, and which of it was undone.

Strategy. `--apply` writes one `leader_move` record per partition whose move it verified
(`leader_move_fields`, core/audit.py). A later run reads the audit (`AppliedMoves.watch`
passes the records through to the planner's sums and keeps these) and compares the latest
move of each partition with the cluster as it is now (`undone`): a partition no longer led
by the broker the move made leader had its placement undone, by a broker failure and
failover, a controller's rebalance or an operator. Pure: records and placements in, values out.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from core.audit_records import LeaderMoveRecord
from leader_placement.plan import Move, PartitionKey, PartitionPlacement

LEADER_MOVE: Literal["leader_move"] = "leader_move"  # the audit record kind (core/audit.py)


def leader_move_fields(move: Move, plan_id: str) -> LeaderMoveRecord:
    """The `leader_move` record of a verified move (the writer stamps ts_ms and zone)."""
    return {"topic": move.topic, "partition": move.partition, "from_broker": move.from_broker,
            "from_zone": move.from_zone, "to_broker": move.to_broker, "to_zone": move.to_zone, "plan_id": plan_id}


@dataclass(frozen=True)
class AppliedMove:
    topic: str
    partition: int
    from_broker: int
    from_zone: str
    to_broker: int
    to_zone: str
    plan_id: str
    applied_ms: int  # the record's ts_ms: when its batch was verified

    @property
    def key(self) -> PartitionKey:
        return (self.topic, self.partition)


@dataclass(frozen=True)
class Undone:
    """A partition an earlier apply moved whose leader is no longer the broker it made leader."""

    applied: AppliedMove
    leader: int | None  # now; None: the partition no longer exists, -1: it has no leader
    leader_zone: str  # "" when unknown


class AppliedMoves:
    """The latest `leader_move` record of each partition, kept while the records pass by."""

    def __init__(self) -> None:
        self.latest: dict[PartitionKey, AppliedMove] = {}

    def watch(self, records: Iterable[Mapping[str, Any]]) -> Iterator[Mapping[str, Any]]:
        """Every record, unchanged; the leader_move ones are kept (records of other kinds pass)."""
        for r in records:
            if r.get("kind") == LEADER_MOVE:
                self.add(r)
            yield r

    def add(self, r: Mapping[str, Any]) -> None:
        """Keep the record if it is its partition's latest (ties: the later plan id). A record
        without a topic, partition or target broker says nothing and is left out."""
        if not r.get("topic") or r.get("partition") is None or r.get("to_broker") is None:
            return
        from_broker = r.get("from_broker")
        move = AppliedMove(str(r["topic"]), int(r["partition"]), -1 if from_broker is None else int(from_broker),
                           str(r.get("from_zone") or ""), int(r["to_broker"]), str(r.get("to_zone") or ""),
                           str(r.get("plan_id") or ""), int(r.get("ts_ms") or 0))
        seen = self.latest.get(move.key)
        if seen is None or (move.applied_ms, move.plan_id) > (seen.applied_ms, seen.plan_id):
            self.latest[move.key] = move


def undone(applied: Mapping[PartitionKey, AppliedMove], now: Mapping[PartitionKey, PartitionPlacement],
           broker_zones: Mapping[int, str]) -> tuple[Undone, ...]:
    """The applied moves whose partition is not led by the move's target now, by partition.

    `now`: the partitions as the cluster describes them (a missing key: the partition no
    longer exists); `broker_zones`: broker id -> rack.
    """
    out = []
    for key, move in sorted(applied.items()):
        part = now.get(key)
        if part is not None and part.leader == move.to_broker:
            continue
        leader = None if part is None else part.leader
        out.append(Undone(move, leader, broker_zones.get(leader, "") if leader is not None else ""))
    return tuple(out)
