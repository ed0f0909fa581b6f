"""What the report says, computed from the collected tables: pure functions, no drawing.

`spark_audit.report` renders these (text, matplotlib, HTML); the tests check them with
numbers worked out by hand. Inputs are the tables' rows as dicts (`Table.dicts()`).

Money is as the savings table has it, less the sidecar's own compute
(`spark_audit.compute_costs`): net savings = transfer avoided - S3 - agent tasks - proxy
CPU. The projection per month and per year scales the window's net savings by (month or
year) / (the window the records cover: first to last record timestamp), i.e. it assumes the
observed traffic and mix continue, and only from a window of at least an hour
(`spark_audit.projection`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from leader_placement.plan import Constraints, LeaderPrices, PartitionKey, PartitionPlacement, Placement, plan_leaders
from spark_audit.applied_placement import LastApply
from spark_audit.compute_costs import ComputeCost
from spark_audit.projection import MIN_PROJECTION_WINDOW_S, Projection, project

SHARED_LABEL = "(shared)"  # jobs.SHARED_ZONE: S3 requests that serve no single zone pair
SHARED_PAIRS_LABEL = "epochs, GC (all zones)"  # S3 requests of no single pair, in one entry
TOP_PAIRS = 8  # zone pairs drawn and listed one by one; the rest are summed as "other pairs"
MAX_HOURS_LISTED = 48  # rows of the per-hour table in the report (the CSV has all)
MAX_PLACEMENT_ROWS = 20  # leader moves listed in the report (leader_traffic.csv has every partition)
BYTES_PER_GB = 10**9  # AWS transfer GB (spark_audit.jobs.BYTES_PER_GB)

Row = Mapping[str, Any]


def _num(row: Row, column: str) -> float:
    value = row.get(column)
    return float(value) if value is not None else 0.0


def _sum(rows: Iterable[Row], column: str) -> float:
    return sum(_num(r, column) for r in rows)


@dataclass(frozen=True)
class Headline:
    """The numbers a FinOps reader looks for first."""

    period_s: float  # the window the records cover (first to last timestamp)
    direct_transfer_usd: float  # the cross-zone bill a direct produce would have run up
    crossed_transfer_usd: float  # the cross-zone bill that remained (direct_cross + notifications)
    transfer_avoided_usd: float
    s3_usd: float  # every S3 request the product made
    before_compute_usd: float  # transfer avoided - S3
    break_even_object_bytes: float | None  # WAL object size at which requests cost what they save
    wal_objects: int
    objects_below_break_even: int  # objects in size classes that lost money
    bytes_below_break_even: float
    wal_object_bytes: float
    loss_below_break_even_usd: float  # what those objects cost beyond what they saved (<= 0)
    compute: ComputeCost | None = None  # agent tasks and proxy CPU; None: not counted
    min_projection_window_s: float = MIN_PROJECTION_WINDOW_S

    @property
    def agent_usd(self) -> float:
        return self.compute.agent_usd if self.compute is not None else 0.0

    @property
    def cpu_usd(self) -> float:
        return self.compute.cpu_usd if self.compute is not None else 0.0

    @property
    def net_savings_usd(self) -> float:
        """Transfer avoided - S3 requests - agent tasks - proxy CPU."""
        return self.before_compute_usd - self.agent_usd - self.cpu_usd

    @property
    def share_of_transfer_bill(self) -> float | None:
        """Net savings as a fraction of the direct-produce transfer bill."""
        return self.net_savings_usd / self.direct_transfer_usd if self.direct_transfer_usd else None

    @property
    def projection(self) -> Projection:
        return project(self.net_savings_usd, self.period_s, self.min_projection_window_s)

    @property
    def per_month_usd(self) -> float | None:
        return self.projection.per_month_usd

    @property
    def per_year_usd(self) -> float | None:
        return self.projection.per_year_usd


def period_seconds(first_ts_ms: int | None, last_ts_ms: int | None, hours: int) -> float:
    """The period the records cover: first to last timestamp, else the number of hours seen."""
    if first_ts_ms is not None and last_ts_ms is not None and last_ts_ms > first_ts_ms:
        return (last_ts_ms - first_ts_ms) / 1000
    return hours * 3600.0


def headline(savings: Sequence[Row], break_even: Sequence[Row], period_s: float, compute: ComputeCost | None = None,
             min_projection_window_s: float = MIN_PROJECTION_WINDOW_S) -> Headline:
    """Totals over the savings table and the WAL objects of the break-even table, less
    `compute` (None: not counted); projected only from windows of `min_projection_window_s`."""
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
        before_compute_usd=_sum(savings, "net_savings_usd"),
        break_even_object_bytes=numerators / objects if objects else None,
        wal_objects=objects,
        objects_below_break_even=int(_sum(losing, "objects")),
        bytes_below_break_even=sum(_num(r, "mean_object_bytes") * _num(r, "objects") for r in losing),
        wal_object_bytes=sum(_num(r, "mean_object_bytes") * _num(r, "objects") for r in break_even),
        loss_below_break_even_usd=_sum(losing, "net_savings_usd"),
        compute=compute,
        min_projection_window_s=min_projection_window_s,
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


# -- leader placement ----------------------------------------------------------------------

@dataclass(frozen=True)
class PlacementMove:
    """A leader move the planner proposes for the period's traffic."""

    topic: str
    partition: int
    from_zone: str
    to_zone: str
    saving_bytes: int
    saving_usd: float


@dataclass(frozen=True)
class ObservedMove:
    """A partition whose leader zone changed within the period, and what that saved.

    `saved_bytes`: of the bytes produced after the move, those from the new leader's zone
    (they stopped crossing) less those from the old leader's zone (they started to), i.e.
    what the same traffic would have crossed under the old leader, minus what it crossed.
    The cross shares compare the period before the move with the period after it.
    """

    topic: str
    partition: int
    from_zone: str
    to_zone: str
    moved_at_ms: int
    cross_share_before: float | None
    cross_share_after: float | None
    bytes_after: int
    saved_bytes: int
    saved_usd: float


@dataclass(frozen=True)
class LeaderPlacementSection:
    partitions: int  # with produce traffic and a known leader zone
    produce_bytes: int  # to a known leader zone
    cross_bytes: int  # of which to a leader in another zone than the producer's, as the leaders were
    available: tuple[PlacementMove, ...]  # every leader in its producers' zone (a replica in every zone assumed)
    balanced: tuple[PlacementMove, ...]  # the same, no zone leading more than ceil(partitions / zones) + 1
    observed: tuple[ObservedMove, ...]
    moved_and_back: int  # partitions whose leader left a zone and came back within the period
    period_s: float
    min_projection_window_s: float = MIN_PROJECTION_WINDOW_S
    last_apply: LastApply | None = None  # the last `plan leaders --apply` in the period, before against after

    @staticmethod
    def _bytes(moves: Iterable[PlacementMove | ObservedMove]) -> int:
        return sum(m.saving_bytes if isinstance(m, PlacementMove) else m.saved_bytes for m in moves)

    @property
    def available_bytes(self) -> int:
        return self._bytes(self.available)

    @property
    def available_usd(self) -> float:
        return sum(m.saving_usd for m in self.available)

    @property
    def balanced_bytes(self) -> int:
        return self._bytes(self.balanced)

    @property
    def balanced_usd(self) -> float:
        return sum(m.saving_usd for m in self.balanced)

    @property
    def observed_bytes(self) -> int:
        return self._bytes(self.observed)

    @property
    def observed_usd(self) -> float:
        return sum(m.saved_usd for m in self.observed)

    def projection(self, usd: float) -> Projection:
        return project(usd, self.period_s, self.min_projection_window_s)

    def per_month(self, usd: float) -> float | None:
        return self.projection(usd).per_month_usd


def leader_placement(leader_traffic: Sequence[Row], usd_per_byte: float, period_s: float,
                     min_projection_window_s: float = MIN_PROJECTION_WINDOW_S) -> LeaderPlacementSection:
    """The saving leader moves could still make over the period, and what the moves seen in it made.

    `leader_traffic`: the rows of jobs.leader_traffic. A partition's current leader zone is
    the one its last batch named. The planner (leader_placement.plan) runs on a placement
    made from the audit alone: one replica per zone seen, all in sync, so its savings are
    what placement could reach if every zone holds a replica (replication factor 3 over
    three racks). `usd_per_byte`: what a byte produced across zones costs (transfer both ways).
    """
    traffic: dict[PartitionKey, dict[str, int]] = defaultdict(dict)
    periods: dict[PartitionKey, dict[str, list[int]]] = defaultdict(dict)  # leader zone -> [first, last]
    by_leader: dict[PartitionKey, dict[str, dict[str, int]]] = defaultdict(lambda: defaultdict(dict))
    zones: set[str] = set()
    for r in leader_traffic:
        key = (str(r["topic"]), int(r["partition"]))
        source, leader, size = r["source_zone"] or "", r["leader_zone"] or "", int(_num(r, "bytes"))
        traffic[key][source] = traffic[key].get(source, 0) + size
        zones.update(z for z in (source, leader) if z)
        if not leader:
            continue
        by_leader[key][leader][source] = by_leader[key][leader].get(source, 0) + size
        first_ms, last_ms = int(_num(r, "first_ts_ms")), int(_num(r, "last_ts_ms"))
        span = periods[key].setdefault(leader, [first_ms, last_ms])
        span[0], span[1] = min(span[0], first_ms), max(span[1], last_ms)
    broker_of = {zone: i for i, zone in enumerate(sorted(zones))}
    parts, produced, crossed = [], 0, 0
    observed: list[ObservedMove] = []
    moved_and_back = 0
    for key, spans in sorted(periods.items()):
        current = max(spans, key=lambda z: (spans[z][1], z))
        first = min(spans, key=lambda z: (spans[z][0], z))
        others = tuple(broker_of[z] for z in sorted(zones) if z != current)
        parts.append(PartitionPlacement(key[0], key[1], (broker_of[current], *others), broker_of[current],
                                        tuple(broker_of.values())))
        produced += sum(b for sources in by_leader[key].values() for b in sources.values())
        crossed += sum(b for leader, sources in by_leader[key].items() for zone, b in sources.items() if zone != leader)
        if len(spans) > 1 and first == current:
            moved_and_back += 1
        elif len(spans) > 1:
            before, after = by_leader[key][first], by_leader[key][current]
            saved = after.get(current, 0) - after.get(first, 0)
            observed.append(ObservedMove(key[0], key[1], first, current, spans[current][0],
                                         _cross_share(before, first), _cross_share(after, current),
                                         sum(after.values()), saved, saved * usd_per_byte))
    placement = Placement(tuple(parts), {i: zone for zone, i in broker_of.items()})
    prices = LeaderPrices(direct_usd_per_byte=usd_per_byte)
    n = len(parts)

    def planned(skew: int) -> tuple[PlacementMove, ...]:
        plan = plan_leaders(traffic, placement, prices, Constraints(skew=skew, max_moves=n), period_s)
        return tuple(PlacementMove(m.topic, m.partition, m.from_zone, m.to_zone, m.saving_bytes, m.saving_usd)
                     for m in plan.moves)

    return LeaderPlacementSection(n, produced, crossed, planned(n), planned(1), tuple(observed), moved_and_back,
                                  period_s, min_projection_window_s)


def _cross_share(sources: Mapping[str, int], leader: str) -> float | None:
    total = sum(sources.values())
    return 1 - sources.get(leader, 0) / total if total else None


# -- zone episodes -------------------------------------------------------------------------

EPISODE_GAP_MINUTES = 2  # trouble minutes of a zone pair this close (at most one quiet minute between) are one episode
MAX_EPISODE_ROWS = 20  # episodes listed in the report (zone_trouble.csv has every minute)
MINUTE_MS = 60_000  # spark_audit.jobs.MINUTE_MS


@dataclass(frozen=True)
class ZoneEpisode:
    """Consecutive minutes in which the WAL path from one zone to another was in trouble
    (jobs.zone_trouble), and what they cost: the fallback's transfer and the PUTs of
    objects nobody read."""

    source_zone: str
    dest_zone: str
    start_ms: int  # the first trouble minute's start
    end_ms: int  # the last trouble minute's end
    fallback_batches: int
    fallback_bytes: int
    fallback_wire_bytes: int
    failed_wal_batches: int
    unread_objects: int
    fallback_transfer_usd: float
    unread_put_usd: float
    open_at_end: bool  # its last minute is the window's: it may go on (or objects be read) after it

    @property
    def minutes(self) -> int:
        return (self.end_ms - self.start_ms) // MINUTE_MS

    @property
    def cost_usd(self) -> float:
        return self.fallback_transfer_usd + self.unread_put_usd


def zone_episodes(rows: Sequence[Row], window_end_ms: int | None = None,
                  gap_minutes: int = EPISODE_GAP_MINUTES) -> list[ZoneEpisode]:
    """Group the zone_trouble minutes of each (source zone, destination zone) into episodes:
    minutes at most `gap_minutes` apart belong to one. Sorted by cost, largest first (ties:
    earliest). `window_end_ms`: the input's last record; an episode whose last minute holds it
    is marked open_at_end."""
    by_pair: dict[tuple[str, str], list[Row]] = defaultdict(list)
    for r in rows:
        by_pair[(str(r["source_zone"] or ""), str(r["dest_zone"] or ""))].append(r)
    episodes: list[ZoneEpisode] = []
    for (source, dest), minutes in by_pair.items():
        minutes.sort(key=lambda r: int(_num(r, "minute_ms")))
        run: list[Row] = []
        for r in minutes:
            if run and int(_num(r, "minute_ms")) - int(_num(run[-1], "minute_ms")) > gap_minutes * MINUTE_MS:
                episodes.append(_episode(source, dest, run, window_end_ms))
                run = []
            run.append(r)
        if run:
            episodes.append(_episode(source, dest, run, window_end_ms))
    return sorted(episodes, key=lambda e: (-e.cost_usd, e.start_ms, e.source_zone, e.dest_zone))


def _episode(source: str, dest: str, run: Sequence[Row], window_end_ms: int | None) -> ZoneEpisode:
    start = int(_num(run[0], "minute_ms"))
    end = int(_num(run[-1], "minute_ms")) + MINUTE_MS
    return ZoneEpisode(
        source, dest, start, end,
        int(_sum(run, "fallback_batches")), int(_sum(run, "fallback_bytes")), int(_sum(run, "fallback_wire_bytes")),
        int(_sum(run, "failed_wal_batches")), int(_sum(run, "unread_objects")),
        _sum(run, "fallback_transfer_usd"), _sum(run, "unread_put_usd"),
        window_end_ms is not None and end > window_end_ms)
