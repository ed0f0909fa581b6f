"""Savings and costs per topic, and per team: the report's totals apportioned to produce streams.

A stream is a (topic, principal) pair of produce_batch records (`jobs.topic_traffic`: bytes
per route and zone pair). Some figures belong to a stream's own bytes and some are shared by
many streams' batches, so every figure is apportioned from a total by a basis of bytes:

| figure                         | total                              | apportioned by                       |
|--------------------------------|------------------------------------|--------------------------------------|
| transfer a direct produce costs | per zone pair (`savings`)          | the stream's cross-zone bytes there  |
| transfer avoided, S3 requests  | per zone pair (`savings`)          | the stream's WAL bytes there         |
| S3 requests of no zone pair    | epochs, GC, recovery (`(shared)`)  | WAL bytes over the whole window      |
| agent tasks                    | `compute_costs.ComputeCost`        | WAL bytes over the whole window      |
| proxy CPU                      | `compute_costs.ComputeCost`        | the stream's CPU seconds (bytes per route x rate) |

A WAL object holds many streams' batches, so its PUT, its GETs and its notifications are
shared by bytes; a zone pair's figures that no stream's bytes can carry (a pair with S3
requests and no WAL bytes, e.g. an object written for a zone that went away) join the
window-wide pool. What no stream can carry at all (agents running while nothing went the
WAL route) is one entry, NOT_TIED. The entries add up to the report's totals.
Pure: rows in (dicts, as `Table.dicts()` gives them), entries out.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from spark_audit.compute_costs import ComputeCost
from spark_audit.teams import TeamRules

NOT_TIED = "(not tied to a topic)"  # costs no stream's bytes can carry
NO_TOPIC = "(no topic)"  # batches audited without a topic name

USD_COLUMNS = ("direct_transfer_usd", "transfer_avoided_usd", "s3_usd", "agent_usd", "cpu_usd")

Row = Mapping[str, Any]
StreamKey = tuple[str, str]  # (topic, principal); ("", "") of NOT_TIED never collides: it has its own entry


def _num(row: Row, column: str) -> float:
    value = row.get(column)
    return float(value) if value is not None else 0.0


@dataclass(frozen=True)
class CostShare:
    """One topic's, team's or stream's part of the window's figures."""

    name: str
    batches: int = 0
    bytes_local: int = 0
    bytes_direct_cross: int = 0
    bytes_wal: int = 0
    direct_transfer_usd: float = 0.0  # what a direct produce of its cross-zone batches would cost
    transfer_avoided_usd: float = 0.0
    s3_usd: float = 0.0
    agent_usd: float = 0.0
    cpu_usd: float = 0.0

    @property
    def net_savings_usd(self) -> float:
        return self.transfer_avoided_usd - self.s3_usd - self.agent_usd - self.cpu_usd

    def plus(self, other: CostShare) -> CostShare:
        return replace(self, batches=self.batches + other.batches, bytes_local=self.bytes_local + other.bytes_local,
                       bytes_direct_cross=self.bytes_direct_cross + other.bytes_direct_cross,
                       bytes_wal=self.bytes_wal + other.bytes_wal,
                       direct_transfer_usd=self.direct_transfer_usd + other.direct_transfer_usd,
                       transfer_avoided_usd=self.transfer_avoided_usd + other.transfer_avoided_usd,
                       s3_usd=self.s3_usd + other.s3_usd, agent_usd=self.agent_usd + other.agent_usd,
                       cpu_usd=self.cpu_usd + other.cpu_usd)


@dataclass(frozen=True)
class StreamShare:
    topic: str
    principal: str
    share: CostShare


class _Ledger:
    """Dollars per stream as they are apportioned; amounts no basis can carry go to NOT_TIED."""

    def __init__(self) -> None:
        self.usd: dict[StreamKey | None, dict[str, float]] = defaultdict(lambda: defaultdict(float))

    def spread(self, column: str, amount: float, basis: Mapping[StreamKey, float]) -> bool:
        """Share `amount` among `basis`'s streams in proportion; False (nothing done) when the basis is empty."""
        total = sum(basis.values())
        if total <= 0:
            return False
        for key, weight in basis.items():
            if weight:
                self.usd[key][column] += amount * weight / total
        return True

    def spread_or_untie(self, column: str, amount: float, basis: Mapping[StreamKey, float]) -> None:
        if amount and not self.spread(column, amount, basis):
            self.usd[None][column] += amount


def split_by_stream(savings: Iterable[Row], traffic: Iterable[Row], compute: ComputeCost) -> list[StreamShare]:
    """Every stream's share of the window's figures, plus a NOT_TIED entry (topic NOT_TIED,
    principal "") when some cost has no bytes to carry it.

    `savings`: rows of jobs.savings (source_zone, leader_zone, direct_transfer_usd,
    transfer_avoided_usd, s3_put_usd, s3_get_usd); `traffic`: rows of jobs.topic_traffic
    (source_zone, leader_zone, topic, principal, batches, bytes_local, bytes_direct_cross,
    bytes_wal); `compute`: the window's compute lines.
    """
    counts: dict[StreamKey, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    wal_in_pair: dict[tuple[str, str], dict[StreamKey, float]] = defaultdict(lambda: defaultdict(float))
    cross_in_pair: dict[tuple[str, str], dict[StreamKey, float]] = defaultdict(lambda: defaultdict(float))
    for r in traffic:
        key = (str(r.get("topic") or ""), str(r.get("principal") or ""))
        pair = (str(r.get("source_zone") or ""), str(r.get("leader_zone") or ""))
        c = counts[key]
        for i, column in enumerate(("batches", "bytes_local", "bytes_direct_cross", "bytes_wal")):
            c[i] += int(_num(r, column))
        wal_in_pair[pair][key] += _num(r, "bytes_wal")
        cross_in_pair[pair][key] += _num(r, "bytes_wal") + _num(r, "bytes_direct_cross")
    money: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
    for r in savings:
        m = money[(str(r.get("source_zone") or ""), str(r.get("leader_zone") or ""))]
        m[0] += _num(r, "direct_transfer_usd")
        m[1] += _num(r, "transfer_avoided_usd")
        m[2] += _num(r, "s3_put_usd") + _num(r, "s3_get_usd")
    ledger = _Ledger()
    pooled = {"direct_transfer_usd": 0.0, "transfer_avoided_usd": 0.0, "s3_usd": 0.0}
    for pair, (direct, avoided, s3) in money.items():
        if direct and not ledger.spread("direct_transfer_usd", direct, cross_in_pair.get(pair, {})):
            pooled["direct_transfer_usd"] += direct
        for column, amount in (("transfer_avoided_usd", avoided), ("s3_usd", s3)):
            if amount and not ledger.spread(column, amount, wal_in_pair.get(pair, {})):
                pooled[column] += amount
    wal = {key: float(c[3]) for key, c in counts.items()}
    cross = {key: float(c[2] + c[3]) for key, c in counts.items()}
    ledger.spread_or_untie("direct_transfer_usd", pooled["direct_transfer_usd"], cross)
    ledger.spread_or_untie("transfer_avoided_usd", pooled["transfer_avoided_usd"], wal)
    ledger.spread_or_untie("s3_usd", pooled["s3_usd"], wal)
    ledger.spread_or_untie("agent_usd", compute.agent_usd, wal)
    cpu_seconds = {key: compute.model.cpu_seconds(c[1] + c[2], c[3]) for key, c in counts.items()}
    ledger.spread_or_untie("cpu_usd", compute.cpu_usd, cpu_seconds)
    out = []
    for key in sorted(set(counts) | {k for k in ledger.usd if k is not None}):
        topic = key[0] or NO_TOPIC
        out.append(StreamShare(topic, key[1], _share(topic, counts[key], ledger.usd.get(key, {}))))
    if None in ledger.usd:
        out.append(StreamShare(NOT_TIED, "", _share(NOT_TIED, [0, 0, 0, 0], ledger.usd[None])))
    return out


def _share(name: str, counts: Sequence[int], usd: Mapping[str, float]) -> CostShare:
    return CostShare(name, counts[0], counts[1], counts[2], counts[3],
                     **{column: usd.get(column, 0.0) for column in USD_COLUMNS})


def _grouped(named: Iterable[tuple[str, CostShare]]) -> list[CostShare]:
    groups: dict[str, CostShare] = {}
    for name, share in named:
        groups[name] = groups[name].plus(share) if name in groups else replace(share, name=name)
    return sorted(groups.values(), key=lambda s: (s.name == NOT_TIED, -s.net_savings_usd, s.name))


def by_topic(streams: Sequence[StreamShare]) -> list[CostShare]:
    """Per topic (its principals together), largest net savings first, NOT_TIED last."""
    return _grouped((s.topic, s.share) for s in streams)


def by_team(streams: Sequence[StreamShare], rules: TeamRules) -> list[CostShare]:
    """Per team by `rules` (first match; unmatched streams are `teams.UNASSIGNED`), largest net
    savings first, NOT_TIED last."""
    return _grouped((s.topic if s.topic == NOT_TIED else rules.team_of(s.principal, "" if s.topic == NO_TOPIC
                                                                           else s.topic), s.share)
                    for s in streams)


def total(shares: Iterable[CostShare], name: str = "total") -> CostShare:
    out = CostShare(name)
    for s in shares:
        out = out.plus(s)
    return out


def top(shares: Sequence[CostShare], n: int, rest_label: str) -> list[CostShare]:
    """The first `n - 1` entries and the rest summed into one named "<rest_label> (k)" when
    there are more than `n`; NOT_TIED stays an entry of its own, last."""
    tied = [s for s in shares if s.name != NOT_TIED]
    untied = [s for s in shares if s.name == NOT_TIED]
    if len(tied) > n:
        rest = tied[n - 1:]
        tied = tied[:n - 1] + [total(rest, f"{rest_label} ({len(rest)})")]
    return tied + untied
