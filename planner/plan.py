"""The savings planner: a month's transfer and S3 request bill per deployment mode (pure).

Input: a traffic profile (one `Flow` per producer host and leader zone, in bytes and
partition batches per second), the list prices of each WAL storage class, and the WAL
settings. Output: one `Bill` per mode and storage class - direct produce, one sidecar
per producer host, one gateway per zone (its traffic spread over `writers_per_zone`
instances x workers, each with its own WAL writer) - and the break-even rate per host.

How a writer's objects are predicted (wal_s3/writer.py): the first arrival (a produce
request when the profile gives request rates, else a batch) opens an object, which is
sealed at `linger_ms` after it or when it reaches `max_bytes`: it collects for
W = min(linger, max_bytes / r) (r bytes per second) and the next one opens with the next
arrival, `idle` later: objects per second = 1 / (W + idle). Arrivals at random (Poisson,
rate lam): idle = 1/lam, and an object holds a share for zone z (one ranged GET, one
notification) unless none of its batches went there: P(share) = 1 - (1 - lam_z/lam) *
exp(-lam_z * W). Closed-loop producers (each sends its next request when the last is
answered, one per WAL latency): `closed_loop_idle_s`. Each agent writes a checkpoint
manifest (one PUT) `checkpoint_interval_ms` after the first object it applied since its
last one (a timer, like the writer's linger), and at once every `checkpoint_max_keys`. The money model is the audit's (spark_audit/jobs.py): a
byte across zones costs 2 x the per-GB price, a direct produce of a batch puts
`bytes + PRODUCE_OVERHEAD_BYTES` across, notifications cross in both directions.

`cost` routing is modelled per writer and destination zone as the router does it
(router/decide.py): a zone whose WAL share would cost more per byte than sending it
across stays direct (without the router's hysteresis band).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

from core.prices import Prices

GB = 1_000_000_000  # AWS bills transfer per decimal GB
SECONDS_PER_MONTH = 730 * 3600  # AWS's month: 730 hours
# What a direct produce puts on the link per partition batch beyond its bytes: the audit's
# lower bound (spark_audit/jobs.py PRODUCE_OVERHEAD_BYTES), so prediction and audit agree.
PRODUCE_OVERHEAD_BYTES = 41
# One notification round trip per (object, zone) share (leader_notify/protocol.py): two frames
# of 66 bytes (length, header, MAC), request 173 bytes with an 80-byte key and short zone,
# proxy and bucket names, response 15 bytes: ~320; per entry 50 bytes of request (10-character
# topic) and 11 of response.
NOTIFY_BYTES_PER_SHARE = 320
NOTIFY_BYTES_PER_ENTRY = 61
DEFAULT_BATCH_BYTES = 16_384  # a producer's batch.size default, for profiles without batch counts

MODES = ("direct", "sidecar", "gateway")


class PlanError(ValueError):
    """The profile or the settings cannot be planned (message says which value)."""


@dataclass(frozen=True)
class Flow:
    """Traffic of one producer host to the partitions led in one zone."""

    host: str
    zone: str  # the host's zone
    leader_zone: str
    bytes_per_s: float
    batches_per_s: float  # partition batches per second (each is one WAL entry)
    # produce requests per second carrying this flow's batches (0: unknown, each batch is its own
    # arrival); a host's requests are one stream, its rate the largest of its flows' (see _arrivals)
    requests_per_s: float = 0.0
    # the requests come from a closed-loop producer (one per 1/requests_per_s s, each sent when the
    # last was answered: `closed_loop_requests_per_s`), not at random
    closed_loop: bool = False

    def __post_init__(self) -> None:
        if not self.host or not self.zone or not self.leader_zone:
            raise PlanError(f"flow {self!r}: host, zone and leader_zone must be set")
        if self.bytes_per_s < 0 or self.batches_per_s < 0 or self.requests_per_s < 0:
            raise PlanError(f"flow {self.host}->{self.leader_zone}: rates must be >= 0")
        if self.bytes_per_s > 0 and self.batches_per_s <= 0:
            raise PlanError(f"flow {self.host}->{self.leader_zone}: bytes without batches")

    @property
    def cross(self) -> bool:
        return self.zone != self.leader_zone


@dataclass(frozen=True)
class ClassPrices:
    """What one WAL storage class costs: requests, and bytes written or read (S3 Express)."""

    name: str
    put_per_1000: float
    get_per_1000: float
    upload_per_gb: float = 0.0  # per GB PUT (S3 Express One Zone); Standard: free in-region
    retrieval_per_gb: float = 0.0  # per GB read by GET

    @property
    def put(self) -> float:
        return self.put_per_1000 / 1000.0

    @property
    def get(self) -> float:
        return self.get_per_1000 / 1000.0


def storage_classes(prices: Prices) -> list[ClassPrices]:
    """The classes to plan for: S3 Standard and S3 Express One Zone, at `prices` (core.prices)."""
    return [ClassPrices("standard", prices.s3_put_per_1000, prices.s3_get_per_1000),
            ClassPrices("express", prices.express_put_per_1000, prices.express_get_per_1000,
                        prices.express_upload_per_gb, prices.express_retrieval_per_gb)]


@dataclass(frozen=True)
class WalSettings:
    linger_ms: int = 250
    max_bytes: int = 8 * 1024 * 1024
    checkpoint_interval_ms: int = 1_000  # agent.checkpoint_interval_ms
    checkpoint_max_keys: int = 1_000  # agent.checkpoint_max_keys
    agents_per_zone: int = 1  # each writes its own manifests
    writers_per_zone: int = 1  # gateway mode: instances x worker processes per zone
    policy: str = "cost"  # "cost" (per zone, cheaper path) or "wal" (every cross-zone batch)
    # a notification's bytes across zones (request + response): per share and per entry; the
    # defaults are worked out from the protocol, `notify_sizes_from_records` measures a run's
    notify_bytes_per_share: float = NOTIFY_BYTES_PER_SHARE
    notify_bytes_per_entry: float = NOTIFY_BYTES_PER_ENTRY

    def __post_init__(self) -> None:
        if self.linger_ms < 1 or self.max_bytes < 1 or self.checkpoint_interval_ms < 1:
            raise PlanError("linger_ms, max_bytes and checkpoint_interval_ms must be >= 1")
        if self.checkpoint_max_keys < 1 or self.agents_per_zone < 1 or self.writers_per_zone < 1:
            raise PlanError("checkpoint_max_keys, agents_per_zone and writers_per_zone must be >= 1")
        if self.policy not in ("cost", "wal"):
            raise PlanError(f"policy: 'cost' or 'wal', got {self.policy!r}")
        if self.notify_bytes_per_share < 0 or self.notify_bytes_per_entry < 0:
            raise PlanError("notify_bytes_per_share and notify_bytes_per_entry must be >= 0")


@dataclass(frozen=True)
class Usage:
    """Per-second quantities a mode causes; `Bill` prices them."""

    crossed_bytes: float = 0.0  # on cross-zone links: direct batches + notifications
    direct_equivalent_bytes: float = 0.0  # what direct produce of the same traffic would cross
    wal_bytes: float = 0.0  # payload through the WAL
    objects: float = 0.0  # WAL object PUTs
    shares: float = 0.0  # (object, zone) shares: one ranged GET and one notification each
    checkpoints: float = 0.0  # checkpoint manifest PUTs
    share_bytes: float = 0.0  # bytes read by agents

    def __add__(self, other: Usage) -> Usage:
        return Usage(*(a + b for a, b in zip(_values(self), _values(other))))


def _values(u: Usage) -> tuple[float, ...]:
    return (u.crossed_bytes, u.direct_equivalent_bytes, u.wal_bytes, u.objects, u.shares, u.checkpoints,
            u.share_bytes)


@dataclass(frozen=True)
class Bill:
    """A month of one mode on one storage class, in USD and counts."""

    mode: str
    storage_class: str
    usage: Usage  # per second
    transfer_usd: float
    s3_put_requests: float
    s3_get_requests: float
    s3_request_usd: float
    s3_data_usd: float
    direct_transfer_usd: float  # what direct produce would cost (the baseline)
    writers: int = 0

    @property
    def total_usd(self) -> float:
        return self.transfer_usd + self.s3_request_usd + self.s3_data_usd

    @property
    def net_savings_usd(self) -> float:
        return self.direct_transfer_usd - self.total_usd


def cross_byte_usd(prices: Prices) -> float:
    return 2 * prices.cross_az_per_gb_each_way / GB


@dataclass(frozen=True)
class _ZoneStream:
    bytes_per_s: float
    batches_per_s: float


@dataclass(frozen=True)
class HostArrivals:
    """How one producer host's traffic reaches its writer: per destination zone, the arrivals per
    second that carry batches for it. `requests`: they are produce requests, one stream per host (a
    request carries every zone it has batches for, so the host's rate is its largest zone's);
    otherwise every batch arrives on its own (the host's rate is the sum). `closed_loop`: the
    requests come one period (1 / rate) apart, each sent when the last was answered."""

    by_zone: dict[str, float]
    requests: bool = False
    closed_loop: bool = False  # requests sent as the last is answered: one every 1/rate s, not at random

    def rate(self, zones: Iterable[str]) -> float:
        rates = [self.by_zone[z] for z in zones if z in self.by_zone]
        if not rates:
            return 0.0
        return max(rates) if self.requests else sum(rates)


@dataclass(frozen=True)
class WriterLoad:
    """One WAL writer's cross-zone traffic by destination zone, and its hosts' arrivals
    (empty: each batch of `by_dest` arrives on its own)."""

    zone: str
    by_dest: dict[str, _ZoneStream] = field(default_factory=dict)
    hosts: tuple[HostArrivals, ...] = ()

    def arrivals(self, zones: Iterable[str]) -> tuple[float, dict[str, float]]:
        """(arrivals per second, arrivals carrying zone z per second) of the traffic to `zones`."""
        zones = [z for z in zones if z in self.by_dest]
        hosts = self.hosts or (HostArrivals({z: s.batches_per_s for z, s in self.by_dest.items()}),)
        return (sum(h.rate(zones) for h in hosts),
                {z: sum(h.by_zone.get(z, 0.0) for h in hosts) for z in zones})


def closed_loop_idle_s(periods: Sequence[float], window_s: float) -> float:
    """Mean time from an object's seal to the next arrival at a writer whose hosts each send a
    request every P_i seconds, each when its last was answered (closed loop). The host that
    opened the object (host i with probability r_i / R, r_i = 1/P_i) sends again P_i - W after the
    seal; every other host at a uniformly random point of its period:

        idle = sum_i (r_i / R) * integral_0^max(P_i - W, 0) prod_(j != i) max(1 - t / P_j, 0) dt

    For n hosts of one period P: (P / n) * (1 - (W / P)^n); one host: P - W, so it makes an
    object per request."""
    groups: dict[float, int] = {}
    for p in periods:
        if p > 0:
            groups[p] = groups.get(p, 0) + 1
    if not groups:
        return math.inf
    total_rate = sum(n / p for p, n in groups.items())
    idle = 0.0
    for p, n in groups.items():
        end = max(p - window_s, 0.0)
        if end <= 0:
            continue
        if len(groups) == 1:
            integral = (p / n) * (1.0 - (window_s / p) ** n)
        else:  # midpoint rule over the opener's remaining period
            steps = 400
            dt = end / steps
            integral = 0.0
            for k in range(steps):
                t = (k + 0.5) * dt
                survive = max(1.0 - t / p, 0.0) ** (n - 1)
                for q, m in groups.items():
                    if q != p:
                        survive *= max(1.0 - t / q, 0.0) ** m
                integral += survive * dt
        idle += (n / p) / total_rate * integral
    return idle


def _objects(load: WriterLoad, zones: Iterable[str], wal: WalSettings) -> tuple[float, dict[str, float]]:
    """(objects per second, shares per second by zone) of a writer carrying `load`'s traffic to
    `zones` via the WAL: an object collects for W = min(linger, max_bytes / r) from the arrival
    that opens it, the next opens with the next arrival, `idle` later: objects/s = 1 / (W + idle).
    Random arrivals (rate lam): idle = 1 / lam. Closed-loop hosts: `closed_loop_idle_s`."""
    zones = [z for z in zones if z in load.by_dest]
    r = sum(load.by_dest[z].bytes_per_s for z in zones)
    lam, lam_z = load.arrivals(zones)
    if r <= 0 or lam <= 0:
        return 0.0, {z: 0.0 for z in zones}
    window = min(wal.linger_ms / 1000.0, wal.max_bytes / r)
    hosts = [h for h in load.hosts if h.rate(zones) > 0]
    if hosts and all(h.closed_loop for h in hosts):
        per_s = 1.0 / (window + closed_loop_idle_s([1.0 / h.rate(zones) for h in hosts], window))
        # a share for z unless the opener has no batch for z and no host with one comes within W
        shares = {}
        for z in zones:
            with_z = [h for h in hosts if h.by_zone.get(z, 0.0) > 0]
            none_join = math.prod(1.0 - min(window * h.rate(zones), 1.0) for h in with_z)
            opener_has = sum(h.rate(zones) for h in with_z) / lam
            shares[z] = per_s * (1.0 - (1.0 - min(opener_has, 1.0)) * none_join)
        return per_s, shares
    per_s = 1.0 / (window + 1.0 / lam)
    shares = {z: per_s * (1.0 - (1.0 - min(lam_z[z] / lam, 1.0)) * math.exp(-lam_z[z] * window)) for z in zones}
    return per_s, shares


def _wal_zone_cost(load: WriterLoad, zones: set[str], wal: WalSettings, cls: ClassPrices,
                   prices: Prices) -> dict[str, float]:
    """USD per second each destination zone's WAL share costs (PUT split by bytes)."""
    objects, shares = _objects(load, zones, wal)
    r = sum(load.by_dest[z].bytes_per_s for z in zones)
    byte_usd = cross_byte_usd(prices)
    out = {}
    for z in zones:
        s = load.by_dest[z]
        put_share = objects * cls.put * (s.bytes_per_s / r if r else 0.0)
        out[z] = (put_share + shares[z] * (cls.get + cls.put)  # GET and (at most) a checkpoint PUT
                  + (shares[z] * wal.notify_bytes_per_share + s.batches_per_s * wal.notify_bytes_per_entry) * byte_usd
                  + s.bytes_per_s * (cls.upload_per_gb + cls.retrieval_per_gb) / GB)
    return out


def _wal_zones(load: WriterLoad, wal: WalSettings, cls: ClassPrices, prices: Prices) -> set[str]:
    """The destination zones a writer sends through the WAL under `wal.policy`."""
    chosen = {z for z, s in load.by_dest.items() if s.bytes_per_s > 0}
    if wal.policy == "wal":
        return chosen
    byte_usd = cross_byte_usd(prices)
    for _ in range(len(load.by_dest) + 1):
        costs = _wal_zone_cost(load, chosen, wal, cls, prices)
        streams = load.by_dest
        keep = {z for z in chosen
                if costs[z] < (streams[z].bytes_per_s + streams[z].batches_per_s * PRODUCE_OVERHEAD_BYTES) * byte_usd}
        if keep == chosen:
            break
        chosen = keep
    return chosen


def writer_usage(load: WriterLoad, wal: WalSettings, cls: ClassPrices, prices: Prices) -> Usage:
    """Per-second usage of one writer (checkpoints are added per zone by `plan_mode`)."""
    direct = {z: s.bytes_per_s + s.batches_per_s * PRODUCE_OVERHEAD_BYTES for z, s in load.by_dest.items()}
    via_wal = _wal_zones(load, wal, cls, prices)
    objects, shares = _objects(load, via_wal, wal)
    crossed = sum(b for z, b in direct.items() if z not in via_wal)
    crossed += sum(shares[z] * wal.notify_bytes_per_share + load.by_dest[z].batches_per_s * wal.notify_bytes_per_entry
                   for z in via_wal)
    wal_bytes = sum(load.by_dest[z].bytes_per_s for z in via_wal)
    return Usage(crossed_bytes=crossed, direct_equivalent_bytes=sum(direct.values()), wal_bytes=wal_bytes,
                 objects=objects, shares=sum(shares.values()), share_bytes=wal_bytes)


def _host_arrivals(flows: Sequence[Flow], scale: float = 1.0) -> HostArrivals:
    """One host's arrivals: its produce requests when every flow says how many, else its batches."""
    requests = all(f.requests_per_s > 0 for f in flows)
    by_zone: dict[str, float] = {}
    for f in flows:
        by_zone[f.leader_zone] = by_zone.get(f.leader_zone, 0.0) + (
            f.requests_per_s if requests else f.batches_per_s) * scale
    return HostArrivals(by_zone, requests, requests and all(f.closed_loop for f in flows))


def writers_of(flows: Sequence[Flow], mode: str, wal: WalSettings) -> list[WriterLoad]:
    """Who writes WAL objects: one writer per host (sidecar) or `writers_per_zone` per zone
    (gateway, the zone's traffic - each host's arrivals too - spread evenly over them).
    Same-zone flows are left out."""
    groups: dict[tuple[str, str], dict[tuple[str, str], list[Flow]]] = {}
    for f in flows:
        if not f.cross or f.bytes_per_s <= 0:
            continue
        owner = (f.host, f.zone) if mode == "sidecar" else (f.zone, f.zone)
        groups.setdefault(owner, {}).setdefault((f.host, f.zone), []).append(f)
    k = 1 if mode == "sidecar" else wal.writers_per_zone
    out = []
    for (_, zone), hosts in sorted(groups.items()):
        dests: dict[str, list[float]] = {}
        for host_flows in hosts.values():
            for f in host_flows:
                acc = dests.setdefault(f.leader_zone, [0.0, 0.0])
                acc[0] += f.bytes_per_s / k
                acc[1] += f.batches_per_s / k
        arrivals = tuple(_host_arrivals(fs, 1.0 / k) for _, fs in sorted(hosts.items()))
        out += [WriterLoad(zone, {z: _ZoneStream(b, n) for z, (b, n) in sorted(dests.items())}, arrivals)
                for _ in range(k)]
    return out


def checkpoints_per_s(shares_per_s: float, wal: WalSettings) -> float:
    """Manifest PUTs per second of one zone's agents, which receive `shares_per_s` in all."""
    if shares_per_s <= 0:
        return 0.0
    per_agent = shares_per_s / wal.agents_per_zone
    interval_s = wal.checkpoint_interval_ms / 1000.0
    # the first applied object starts the interval's timer; the next manifest's timer starts with
    # the next object after it, on average 1/per_agent later (leader_notify/agent/agent.py)
    timed = 1.0 / (interval_s + 1.0 / per_agent)
    return wal.agents_per_zone * max(timed, per_agent / wal.checkpoint_max_keys)


def plan_mode(flows: Sequence[Flow], mode: str, wal: WalSettings, cls: ClassPrices, prices: Prices) -> Bill:
    """The bill of one mode on one storage class. Raises PlanError for an unknown mode."""
    if mode not in MODES:
        raise PlanError(f"mode: one of {', '.join(MODES)}, got {mode!r}")
    byte_usd = cross_byte_usd(prices)
    direct_bytes = sum(f.bytes_per_s + f.batches_per_s * PRODUCE_OVERHEAD_BYTES for f in flows if f.cross)
    if mode == "direct":
        usage = Usage(crossed_bytes=direct_bytes, direct_equivalent_bytes=direct_bytes)
        writers: list[WriterLoad] = []
    else:
        writers = writers_of(flows, mode, wal)
        usage = Usage()
        shares_into: dict[str, float] = {}
        for w in writers:
            u = writer_usage(w, wal, cls, prices)
            usage += u
            for z, s in _objects(w, _wal_zones(w, wal, cls, prices), wal)[1].items():
                shares_into[z] = shares_into.get(z, 0.0) + s
        usage = replace(usage, checkpoints=sum(checkpoints_per_s(s, wal) for s in shares_into.values()))
    m = SECONDS_PER_MONTH
    puts = (usage.objects + usage.checkpoints) * m
    gets = usage.shares * m
    return Bill(
        mode=mode, storage_class=cls.name if mode != "direct" else "-", usage=usage,
        transfer_usd=usage.crossed_bytes * m * byte_usd,
        s3_put_requests=puts, s3_get_requests=gets,
        s3_request_usd=puts * cls.put + gets * cls.get if mode != "direct" else 0.0,
        s3_data_usd=(usage.wal_bytes * m * cls.upload_per_gb + usage.share_bytes * m * cls.retrieval_per_gb) / GB,
        direct_transfer_usd=direct_bytes * m * byte_usd, writers=len(writers),
    )


def plan(flows: Sequence[Flow], wal: WalSettings, prices: Prices,
         classes: Sequence[ClassPrices] | None = None) -> list[Bill]:
    """Direct, then sidecar and gateway on every storage class."""
    classes = list(classes) if classes is not None else storage_classes(prices)
    bills = [plan_mode(flows, "direct", wal, classes[0], prices)]
    for cls in classes:
        bills += [plan_mode(flows, mode, wal, cls, prices) for mode in ("sidecar", "gateway")]
    return bills


def break_even_bytes_per_s(flows: Sequence[Flow], wal: WalSettings, cls: ClassPrices, prices: Prices) -> float | None:
    """The cross-zone byte rate at which one writer carrying `flows`' mix (zones, batch size)
    through the WAL saves exactly nothing; None when it never pays (within 1 B/s..100 GB/s).

    Per host this is the rate its own sidecar needs; a gateway needs it from its zone as a whole.
    """
    cross = [f for f in flows if f.cross and f.bytes_per_s > 0]
    total = sum(f.bytes_per_s for f in cross)
    if total <= 0:
        return None
    wal_all = replace(wal, policy="wal", writers_per_zone=1)

    def net(rate: float) -> float:
        k = rate / total
        # a closed-loop host sends its requests (and their batches) at the pace of the answers,
        # whatever its rate: only the batches grow
        scaled = [replace(f, host="one", zone="here", bytes_per_s=f.bytes_per_s * k) if f.closed_loop
                  else replace(f, host="one", zone="here", bytes_per_s=f.bytes_per_s * k,
                               batches_per_s=f.batches_per_s * k, requests_per_s=f.requests_per_s * k)
                  for f in cross]
        return plan_mode(scaled, "sidecar", wal_all, cls, prices).net_savings_usd

    lo, hi = 1.0, 1e11
    if net(hi) <= 0:
        return None
    if net(lo) > 0:
        return lo
    for _ in range(200):  # bisection on a log scale: the saving grows with the rate
        mid = math.sqrt(lo * hi)
        if net(mid) > 0:
            hi = mid
        else:
            lo = mid
        if hi / lo < 1.0001:
            break
    return hi


@dataclass(frozen=True)
class HostVerdict:
    host: str
    zone: str
    cross_bytes_per_s: float
    break_even_bytes_per_s: float | None

    @property
    def sidecar_pays(self) -> bool:
        return self.break_even_bytes_per_s is not None and self.cross_bytes_per_s >= self.break_even_bytes_per_s


def host_verdicts(flows: Sequence[Flow], wal: WalSettings, cls: ClassPrices, prices: Prices) -> list[HostVerdict]:
    """Per producer host: its cross-zone rate and the rate at which its own sidecar breaks even."""
    by_host: dict[tuple[str, str], list[Flow]] = {}
    for f in flows:
        by_host.setdefault((f.host, f.zone), []).append(f)
    return [HostVerdict(host, zone, sum(f.bytes_per_s for f in fs if f.cross),
                        break_even_bytes_per_s(fs, wal, cls, prices))
            for (host, zone), fs in sorted(by_host.items())]


# ---- profiles ----------------------------------------------------------------------------------

def closed_loop_requests_per_s(wal_latency_ms: float, in_flight: int = 1) -> float:
    """Produce requests per second a closed-loop producer sends to one leader zone: it keeps
    `in_flight` requests outstanding and each takes `wal_latency_ms` (linger + PUT + notification
    + append) to be answered, so it sends in_flight / latency per second, each carrying everything
    produced since the last: batches of rate x latency / in_flight bytes. Raises PlanError."""
    if not math.isfinite(wal_latency_ms) or wal_latency_ms <= 0 or in_flight < 1:
        raise PlanError(f"wal latency {wal_latency_ms!r} ms must be > 0 and in-flight {in_flight!r} >= 1")
    return in_flight * 1000.0 / wal_latency_ms
