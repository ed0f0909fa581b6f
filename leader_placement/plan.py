"""Which partition leaders to move, and where: a pure plan from produce and consumer bytes by zone.

Strategy. A byte produced to a leader in another zone is paid for (inter-AZ transfer both
ways, or the WAL route's S3 requests); a byte produced to a leader in its own zone is not.
The same holds for a byte a consumer fetches from the leader: a leader in zone L costs the
leader-served bytes of consumers in zones other than L (fetch_bytes records with
from_leader). For a partition led in zone L that received B_z bytes from producers in zone z
and served F_z bytes to consumers in zone z over the audited window, making a replica in
zone Z the leader saves

    produce bytes = B_Z - B_L         (the bytes that stop crossing, less those that start)
    consumer bytes = F_Z - F_L
    saving_bytes = produce bytes + consumer bytes
    saving_usd   = produce bytes * LeaderPrices.usd_per_cross_byte
                   + consumer bytes * LeaderPrices.direct_usd_per_byte  (a fetch crosses as transfer)

Replication does not change with the leader (RF 3 over three zones: the leader sends to two
other zones wherever it is), and neither do fetches a follower served (KIP-392): both are
left out. F_L counts as crossing after a move: true for a consumer that fetches from the
leader wherever it is; one that sends its rack to a rack-aware replica selector would fetch
from the follower left in L instead, so with such consumers the saving is understated.
Candidates are ranked by saving_usd, then saving_bytes (prices of 0 rank by bytes).

Candidates are the partition's other replicas that are in its ISR (the replica set and the
replication factor stay; only the order changes, the new leader first). When the replica
that would save most is out of the ISR, the partition waits (held) rather than moving to a
second-best zone now and again once that replica has caught up. The plan is greedy:
every candidate with a positive saving, best first (ties: topic, partition, broker id), is
taken unless its partition already moves, its saving is below the minimum (bytes or USD),
the move cap is reached, or its broker would then lead more than
`ceil(partitions / brokers) + skew` of the placement's partitions. A move frees a slot on
the broker it leaves, so the passes repeat until one takes nothing. Greedy is not optimal
under the cap (a big move can take the slot two smaller ones needed), but the cap is slack
by `skew` and the order is the one an operator would review.

No I/O: the caller reads the audit (leader_placement.audit_input) and the cluster
(leader_placement.admin) and carries the moves out (leader_placement.apply).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

GB = 1_000_000_000  # AWS bills transfer per decimal GB
MONTH_S = 730 * 3600  # a billing month, as planner/plan.py projects

PartitionKey = tuple[str, int]  # (topic, partition)


class LeaderPlanError(ValueError):
    """The input contradicts itself (a leader outside its replicas, a negative price)."""


@dataclass(frozen=True)
class PartitionPlacement:
    """One partition as the cluster describes it: replicas in order (the first preferred), leader, ISR."""

    topic: str
    partition: int
    replicas: tuple[int, ...]
    leader: int  # -1: no leader
    isr: tuple[int, ...]

    @property
    def key(self) -> PartitionKey:
        return (self.topic, self.partition)


@dataclass(frozen=True)
class Placement:
    partitions: tuple[PartitionPlacement, ...]
    broker_zones: Mapping[int, str]  # broker id -> rack (the AZ id); every broker counts for the balance


@dataclass(frozen=True)
class LeaderPrices:
    """What one byte produced to a leader in another zone costs.

    `direct_usd_per_byte`: inter-AZ transfer out of one zone and into the other. When the WAL
    route carried a share of the audited cross-zone bytes, `wal_usd_per_byte` (its S3
    requests and notifications per byte, measured from the audit or given) prices that share.
    """

    direct_usd_per_byte: float = 2 * 0.01 / GB  # core.prices.Prices defaults: $0.01/GB each way
    wal_usd_per_byte: float | None = None
    wal_share: float = 0.0  # of the audited cross-zone bytes, the fraction that went through the WAL

    def __post_init__(self) -> None:
        if self.direct_usd_per_byte < 0 or (self.wal_usd_per_byte is not None and self.wal_usd_per_byte < 0):
            raise LeaderPlanError("prices must be >= 0")
        if not 0.0 <= self.wal_share <= 1.0:
            raise LeaderPlanError(f"wal_share {self.wal_share} is not within 0..1")

    @property
    def usd_per_cross_byte(self) -> float:
        if self.wal_usd_per_byte is None:
            return self.direct_usd_per_byte
        return (1 - self.wal_share) * self.direct_usd_per_byte + self.wal_share * self.wal_usd_per_byte


@dataclass(frozen=True)
class Constraints:
    skew: int = 1  # a broker may lead at most ceil(partitions / brokers) + skew partitions
    min_saving_bytes: int = 1  # per move, over the window; a move must save at least this
    min_saving_usd: float = 0.0  # per move, over the window
    max_moves: int = 50  # per run

    def __post_init__(self) -> None:
        if self.skew < 0 or self.min_saving_bytes < 1 or self.min_saving_usd < 0 or self.max_moves < 0:
            raise LeaderPlanError("skew >= 0, min_saving_bytes >= 1, min_saving_usd >= 0, max_moves >= 0")


@dataclass(frozen=True)
class Move:
    topic: str
    partition: int
    from_broker: int
    from_zone: str
    to_broker: int
    to_zone: str
    saving_bytes: int  # produce and consumer bytes together
    saving_usd: float
    replicas_before: tuple[int, ...]
    replicas_after: tuple[int, ...]  # the same set, to_broker first, the others in their order
    fetch_saving_bytes: int = 0  # of saving_bytes, the consumer (leader-served fetch) bytes

    @property
    def produce_saving_bytes(self) -> int:
        return self.saving_bytes - self.fetch_saving_bytes


# Why a partition that would save bytes is left where it is.
BELOW_MIN_SAVING = "below the minimum saving"
LEADER_CAP = "its broker would lead too many partitions"
MAX_MOVES = "the move cap is reached"
NOT_IN_ISR = "the replica in its producers' (or consumers') zone is not in the ISR"


@dataclass(frozen=True)
class Held:
    topic: str
    partition: int
    to_zone: str
    saving_bytes: int
    reason: str


@dataclass(frozen=True)
class TopicSaving:
    topic: str
    moves: int
    saving_bytes: int
    saving_usd: float
    fetch_saving_bytes: int = 0  # of saving_bytes, the consumer bytes


@dataclass(frozen=True)
class LeaderPlan:
    moves: tuple[Move, ...]
    held: tuple[Held, ...]
    topics: tuple[TopicSaving, ...]
    leader_cap: int
    window_s: float

    @property
    def saving_bytes(self) -> int:
        return sum(m.saving_bytes for m in self.moves)

    @property
    def fetch_saving_bytes(self) -> int:
        return sum(m.fetch_saving_bytes for m in self.moves)

    @property
    def saving_usd(self) -> float:
        return sum(m.saving_usd for m in self.moves)

    def per_month(self, usd: float) -> float | None:
        """`usd` saved over the window, as a month at the same rate; None without a window."""
        return usd * MONTH_S / self.window_s if self.window_s > 0 else None


@dataclass(frozen=True)
class _Candidate:
    saving_bytes: int
    part: PartitionPlacement
    to_broker: int
    to_zone: str
    fetch_saving_bytes: int = 0
    saving_usd: float = 0.0

    def saves(self) -> bool:
        return self.saving_usd > 0 or (self.saving_usd == 0 and self.saving_bytes > 0)

    def order(self) -> tuple[float, int, str, int, int]:
        return (-self.saving_usd, -self.saving_bytes, self.part.topic, self.part.partition, self.to_broker)


def leader_cap(placement: Placement, skew: int) -> int:
    """The most partitions one broker may lead after the plan: ceil(led partitions / brokers) + skew."""
    led = sum(1 for p in placement.partitions if p.leader >= 0)
    brokers = max(1, len(placement.broker_zones))
    return math.ceil(led / brokers) + skew


def plan_leaders(traffic: Mapping[PartitionKey, Mapping[str, int]], placement: Placement, prices: LeaderPrices,
                 constraints: Constraints, window_s: float = 0.0,
                 fetch_traffic: Mapping[PartitionKey, Mapping[str, int]] | None = None) -> LeaderPlan:
    """The moves, best first, and the partitions held back with why.

    `traffic`: produce bytes per partition and producer zone over the window; `fetch_traffic`:
    the bytes the partition's leader served to consumers per consumer zone (partitions
    without either never move). Raises LeaderPlanError if a leader is not one of its replicas.
    """
    usd = prices.usd_per_cross_byte
    fetches = fetch_traffic or {}
    cap = leader_cap(placement, constraints.skew)
    led: dict[int, int] = dict.fromkeys(placement.broker_zones, 0)
    candidates: list[_Candidate] = []
    first_reason: dict[PartitionKey, Held] = {}
    for part in placement.partitions:
        if part.leader < 0:
            continue
        if part.leader not in part.replicas:
            raise LeaderPlanError(f"{part.topic}-{part.partition}: leader {part.leader} is not a replica {part.replicas}")
        led[part.leader] = led.get(part.leader, 0) + 1
        by_zone = traffic.get(part.key, {})
        fetched = fetches.get(part.key, {})
        leader_zone = placement.broker_zones.get(part.leader, "")
        here, fetched_here = by_zone.get(leader_zone, 0), fetched.get(leader_zone, 0)
        best_out_of_isr: _Candidate | None = None
        mine: list[_Candidate] = []
        for broker in part.replicas:
            zone = placement.broker_zones.get(broker)
            if broker == part.leader or zone is None:
                continue
            produce, fetch = by_zone.get(zone, 0) - here, fetched.get(zone, 0) - fetched_here
            c = _Candidate(produce + fetch, part, broker, zone, fetch,
                           produce * usd + fetch * prices.direct_usd_per_byte)
            if not c.saves():
                continue
            if broker in part.isr:
                mine.append(c)
            elif best_out_of_isr is None or c.order() < best_out_of_isr.order():
                best_out_of_isr = c
        best_in_isr = min(mine, key=_Candidate.order, default=None)
        if best_out_of_isr is not None and (best_in_isr is None or best_out_of_isr.order() < best_in_isr.order()):
            # wait for it to rejoin rather than move to a second-best zone now and again later
            first_reason[part.key] = Held(part.topic, part.partition, best_out_of_isr.to_zone,
                                          best_out_of_isr.saving_bytes, NOT_IN_ISR)
        else:
            candidates += mine
    candidates.sort(key=_Candidate.order)

    moves: list[Move] = []
    moved: set[PartitionKey] = set()
    progress = True
    while progress:
        progress = False
        for c in candidates:
            key = c.part.key
            if key in moved:
                continue
            reason = None
            if c.saving_bytes < constraints.min_saving_bytes or c.saving_usd < constraints.min_saving_usd:
                reason = BELOW_MIN_SAVING
            elif len(moves) >= constraints.max_moves:
                reason = MAX_MOVES
            elif led.get(c.to_broker, 0) + 1 > cap:
                reason = LEADER_CAP
            if reason is not None:
                first_reason.setdefault(key, Held(c.part.topic, c.part.partition, c.to_zone, c.saving_bytes, reason))
                continue
            moves.append(_move(c, placement))
            moved.add(key)
            led[c.part.leader] -= 1
            led[c.to_broker] = led.get(c.to_broker, 0) + 1
            progress = True
    held = tuple(h for k, h in sorted(first_reason.items()) if k not in moved)
    return LeaderPlan(tuple(moves), held, topic_savings(moves), cap, window_s)


def _move(c: _Candidate, placement: Placement) -> Move:
    part = c.part
    after = (c.to_broker,) + tuple(r for r in part.replicas if r != c.to_broker)
    return Move(part.topic, part.partition, part.leader, placement.broker_zones.get(part.leader, ""), c.to_broker,
                c.to_zone, c.saving_bytes, c.saving_usd, part.replicas, after, c.fetch_saving_bytes)


def topic_savings(moves: list[Move] | tuple[Move, ...]) -> tuple[TopicSaving, ...]:
    out: dict[str, TopicSaving] = {}
    for m in moves:
        t = out.get(m.topic, TopicSaving(m.topic, 0, 0, 0.0))
        out[m.topic] = TopicSaving(m.topic, t.moves + 1, t.saving_bytes + m.saving_bytes, t.saving_usd + m.saving_usd,
                                   t.fetch_saving_bytes + m.fetch_saving_bytes)
    return tuple(out[t] for t in sorted(out))


def reassignment_json(moves: list[Move] | tuple[Move, ...]) -> dict[str, Any]:
    """The moves as `kafka-reassign-partitions --reassignment-json-file` reads them (version 1)."""
    return {"version": 1, "partitions": [{"topic": m.topic, "partition": m.partition,
                                          "replicas": list(m.replicas_after)} for m in moves]}
