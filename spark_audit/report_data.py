"""What the report says, computed from the collected tables: pure functions, no drawing.

`spark_audit.report` renders these (text, matplotlib, HTML); the tests check them with
numbers worked out by hand. Inputs are the tables' rows as dicts (`Table.dicts()`).

Money is as the savings table has it. The projection per month and per year scales the
period's net savings by (month or year) / (the period the records cover: first to last
record timestamp), i.e. it assumes the observed traffic and mix continue.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

SECONDS_PER_MONTH = 30.4375 * 86_400  # 365.25 / 12 days
SECONDS_PER_YEAR = 365.25 * 86_400
SHARED_LABEL = "(shared)"  # jobs.SHARED_ZONE: S3 requests that serve no single zone pair
SHARED_PAIRS_LABEL = "epochs, GC (all zones)"  # S3 requests of no single pair, in one entry
TOP_PAIRS = 8  # zone pairs drawn and listed one by one; the rest are summed as "other pairs"
MAX_HOURS_LISTED = 48  # rows of the per-hour table in the report (the CSV has all)

Row = Mapping[str, Any]


def _num(row: Row, column: str) -> float:
    value = row.get(column)
    return float(value) if value is not None else 0.0


def _sum(rows: Iterable[Row], column: str) -> float:
    return sum(_num(r, column) for r in rows)


@dataclass(frozen=True)
class Headline:
    """The numbers a FinOps reader looks for first."""

    period_s: float  # what the records cover (first to last timestamp)
    direct_transfer_usd: float  # the cross-zone bill a direct produce would have run up
    crossed_transfer_usd: float  # the cross-zone bill that remained (direct_cross + notifications)
    transfer_avoided_usd: float
    s3_usd: float  # every S3 request the product made
    net_savings_usd: float
    break_even_object_bytes: float | None  # WAL object size at which requests cost what they save
    wal_objects: int
    objects_below_break_even: int  # objects in size classes that lost money
    bytes_below_break_even: float
    wal_object_bytes: float
    loss_below_break_even_usd: float  # what those objects cost beyond what they saved (<= 0)

    @property
    def share_of_transfer_bill(self) -> float | None:
        """Net savings as a fraction of the direct-produce transfer bill."""
        return self.net_savings_usd / self.direct_transfer_usd if self.direct_transfer_usd else None

    @property
    def per_month_usd(self) -> float | None:
        return self.net_savings_usd * SECONDS_PER_MONTH / self.period_s if self.period_s > 0 else None

    @property
    def per_year_usd(self) -> float | None:
        return self.net_savings_usd * SECONDS_PER_YEAR / self.period_s if self.period_s > 0 else None


def period_seconds(first_ts_ms: int | None, last_ts_ms: int | None, hours: int) -> float:
    """The period the records cover: first to last timestamp, else the number of hours seen."""
    if first_ts_ms is not None and last_ts_ms is not None and last_ts_ms > first_ts_ms:
        return (last_ts_ms - first_ts_ms) / 1000
    return hours * 3600.0


def headline(savings: Sequence[Row], break_even: Sequence[Row], period_s: float) -> Headline:
    """Totals over the savings table and the WAL objects of the break-even table."""
    direct = _sum(savings, "direct_transfer_usd")
    avoided = _sum(savings, "transfer_avoided_usd")
    objects = int(_sum(break_even, "objects"))
    losing = [r for r in break_even if _num(r, "net_savings_usd") < 0]
    numerators = sum(_num(r, "break_even_object_bytes") * _num(r, "objects") for r in break_even)
    return Headline(
        period_s=period_s,
        direct_transfer_usd=direct,
        crossed_transfer_usd=direct - avoided,
        transfer_avoided_usd=avoided,
        s3_usd=_sum(savings, "s3_put_usd") + _sum(savings, "s3_get_usd"),
        net_savings_usd=_sum(savings, "net_savings_usd"),
        break_even_object_bytes=numerators / objects if objects else None,
        wal_objects=objects,
        objects_below_break_even=int(_sum(losing, "objects")),
        bytes_below_break_even=sum(_num(r, "mean_object_bytes") * _num(r, "objects") for r in losing),
        wal_object_bytes=sum(_num(r, "mean_object_bytes") * _num(r, "objects") for r in break_even),
        loss_below_break_even_usd=_sum(losing, "net_savings_usd"),
    )


@dataclass(frozen=True)
class PairSavings:
    label: str  # "use1-az1 → use1-az2", "S3 requests not tied to a pair", "other pairs (n)"
    direct_transfer_usd: float
    transfer_avoided_usd: float
    s3_usd: float
    net_savings_usd: float
    wal_bytes: float
    direct_cross_bytes: float


def pair_savings(savings: Sequence[Row], top: int = TOP_PAIRS) -> list[PairSavings]:
    """Per source -> leader zone pair over the whole period, largest net savings first.

    Same-zone pairs with nothing to save are left out; the S3 requests of no single pair
    (every zone's) are one entry, last; pairs beyond `top` are summed into one
    "other pairs (n)" entry.
    """
    sums: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0] * 6)
    for r in savings:
        pair = (r["source_zone"], r["leader_zone"])
        acc = sums[pair]
        for i, column in enumerate(("direct_transfer_usd", "transfer_avoided_usd", "s3_put_usd",
                                    "s3_get_usd", "bytes_wal", "bytes_direct_cross")):
            acc[i] += _num(r, column)
    entries, shared_s3 = [], 0.0
    for (source, leader), (direct, avoided, put, get, wal, dc) in sums.items():
        s3 = put + get
        if leader == SHARED_LABEL:
            shared_s3 += s3
        elif source != leader or direct or s3:
            entries.append(PairSavings(f"{source} → {leader}", direct, avoided, s3, avoided - s3, wal, dc))
    entries.sort(key=lambda p: (-p.net_savings_usd, p.label))
    if len(entries) > top:
        rest = entries[top - 1:]
        entries = entries[:top - 1] + [PairSavings(
            f"other pairs ({len(rest)})", *(sum(getattr(p, f) for p in rest) for f in (
                "direct_transfer_usd", "transfer_avoided_usd", "s3_usd", "net_savings_usd", "wal_bytes",
                "direct_cross_bytes")))]
    if shared_s3:
        entries.append(PairSavings(SHARED_PAIRS_LABEL, 0.0, 0.0, shared_s3, -shared_s3, 0.0, 0.0))
    return entries


@dataclass(frozen=True)
class HourSavings:
    hour: str
    net_savings_usd: float
    cumulative_usd: float
    direct_transfer_usd: float


def savings_by_hour(savings: Sequence[Row]) -> list[HourSavings]:
    """Net savings per hour (all pairs) and the running total, in time order."""
    net: dict[str, float] = defaultdict(float)
    direct: dict[str, float] = defaultdict(float)
    for r in savings:
        net[r["hour"]] += _num(r, "net_savings_usd")
        direct[r["hour"]] += _num(r, "direct_transfer_usd")
    out, total = [], 0.0
    for hour in sorted(net):
        total += net[hour]
        out.append(HourSavings(hour, net[hour], total, direct[hour]))
    return out


@dataclass(frozen=True)
class SizeClass:
    lower_bytes: int
    objects: int
    mean_object_bytes: float
    net_per_object_usd: float
    net_savings_usd: float


def size_classes(break_even: Sequence[Row]) -> list[SizeClass]:
    """The break-even table's buckets, smallest first."""
    return [SizeClass(int(_num(r, "size_bucket_bytes")), int(_num(r, "objects")), _num(r, "mean_object_bytes"),
                      _num(r, "net_savings_usd_per_object"), _num(r, "net_savings_usd"))
            for r in sorted(break_even, key=lambda r: _num(r, "size_bucket_bytes"))]


@dataclass(frozen=True)
class RouteLatency:
    route: str
    pair: str  # the zone pair with the highest p99 for that route
    batches: int
    p50_ms: float
    p95_ms: float
    p99_ms: float


def latency_by_route(latency: Sequence[Row]) -> list[RouteLatency]:
    """Per route, the zone pair with the highest p99 (the one a service owner feels), and
    the route's batches over all pairs; routes in the order local, direct_cross, wal."""
    order = {"local": 0, "direct_cross": 1, "wal": 2}
    worst: dict[str, Row] = {}
    batches: dict[str, int] = defaultdict(int)
    for r in latency:
        batches[r["route"]] += int(_num(r, "batches"))
        if r.get("p99_ms") is None:
            continue
        if r["route"] not in worst or _num(r, "p99_ms") > _num(worst[r["route"]], "p99_ms"):
            worst[r["route"]] = r
    return [RouteLatency(route, f"{r['source_zone']} → {r['leader_zone']}", batches[route], _num(r, "p50_ms"),
                         _num(r, "p95_ms"), _num(r, "p99_ms"))
            for route, r in sorted(worst.items(), key=lambda kv: (order.get(kv[0], 9), kv[0]))]


@dataclass(frozen=True)
class ZoneCache:
    zone: str
    reads: int
    hit_rate: float | None
    byte_hit_rate: float | None


def cache_by_zone(cache_agent: Sequence[Row]) -> list[ZoneCache]:
    """The agents' block cache per zone over the whole period."""
    acc: dict[str, list[float]] = defaultdict(lambda: [0.0] * 5)
    for r in cache_agent:
        a = acc[r["zone"]]
        for i, column in enumerate(("reads", "cache_hits", "lookups", "bytes_from_cache", "bytes")):
            a[i] += _num(r, column)
    return [ZoneCache(zone, int(reads), hits / lookups if lookups else None, cached / total if total else None)
            for zone, (reads, hits, lookups, cached, total) in sorted(acc.items())]
