"""Route decisions for one partition batch (pure functions, no I/O, no clock).

Paths: LOCAL (leader in our zone: forward), DIRECT_CROSS (forward across zones, billed
transfer), WAL (through S3: request costs instead of transfer). Policy `cost` compares,
per destination zone, the predicted S3 cost of a byte sent through the WAL (its share of
one PUT per object plus one ranged GET per zone per object, and for S3 Express One Zone
its per-byte upload and retrieval charges) with the transfer
cost of sending it across (billed on both sides), with a hysteresis band so that the
choice does not flap around the break-even point.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from core.audit import FALLBACK_DIRECT_REASON
from core.prices import Prices

GB = 1_000_000_000  # AWS bills transfer per decimal GB
HYSTERESIS = 0.2  # leave the current path only when the other is 20% cheaper


class Path(str, Enum):
    LOCAL = "local"
    DIRECT_CROSS = "direct_cross"
    WAL = "wal"


@dataclass(frozen=True)
class Route:
    path: Path
    reason: str
    # path.value, kept as a plain attribute: metrics, audit records and the route counts name
    # the path of every batch, and an Enum's .value is a Python call per use.
    path_name: str = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "path_name", self.path.value)


SAME_ZONE = Route(Path.LOCAL, "same zone")  # every batch whose leader is in the proxy's zone


@dataclass(frozen=True)
class ObjectShape:
    """Expected WAL object sizes: whole object, and the part bound for one zone."""

    object_bytes: float
    zone_bytes: float


def predicted_shape(zone_rate_bps: float, total_rate_bps: float, linger_ms: int, max_bytes: int) -> ObjectShape:
    """Object sizes a writer will produce at these byte rates (flush at linger or max_bytes).

    Rates are bytes per second of cross-zone traffic: to one zone, and to all zones.
    """
    if total_rate_bps <= 0 or zone_rate_bps <= 0:
        return ObjectShape(0.0, 0.0)
    object_bytes = min(float(max_bytes), total_rate_bps * linger_ms / 1000.0)
    return ObjectShape(object_bytes, object_bytes * zone_rate_bps / total_rate_bps)


def wal_cost_per_byte(shape: ObjectShape, prices: Prices, storage_class: str = "standard") -> float:
    """USD per payload byte through the WAL in `storage_class` ("standard" or "express"):
    the object's PUT shared by the whole object; per zone share one ranged GET and the
    agent's GC checkpoint PUT (wal_s3/gc.py); S3 Express adds its per-byte upload and
    retrieval charges (each payload byte is uploaded once and read once, by its zone's
    agent; the checkpoint's few bytes are left out). The checkpoint is an upper bound: a
    manifest names every object an agent applied in its interval, so it is one PUT per
    object only when traffic is thin - where this choice is close - and almost nothing
    per object when it is heavy."""
    if shape.object_bytes <= 0 or shape.zone_bytes <= 0:
        return float("inf")
    store = prices.store(storage_class)
    put = store.put_per_1000 / 1000.0
    get = store.get_per_1000 / 1000.0
    return (put / shape.object_bytes + (get + put) / shape.zone_bytes
            + store.upload_per_byte + store.retrieval_per_byte)


def direct_cost_per_byte(prices: Prices) -> float:
    """USD per byte sent across zones directly: billed out of one zone and into the other."""
    return 2 * prices.cross_az_per_gb_each_way / GB


def choose_cost(current: Path | None, shape: ObjectShape, prices: Prices, storage_class: str = "standard") -> Route:
    """`cost` policy between WAL and DIRECT_CROSS, sticky within the hysteresis band; the WAL
    is priced in `storage_class` (the class of wal.bucket)."""
    wal = wal_cost_per_byte(shape, prices, storage_class)
    direct = direct_cost_per_byte(prices)
    if current == Path.WAL:
        if wal > direct * (1 + HYSTERESIS):
            return Route(Path.DIRECT_CROSS, "cost: objects too small")
        return Route(Path.WAL, "cost: wal cheaper")
    if wal < direct * (1 - HYSTERESIS):
        return Route(Path.WAL, "cost: wal cheaper")
    return Route(Path.DIRECT_CROSS, "cost: objects too small")


@dataclass(frozen=True)
class ZoneView:
    """What the router knows when deciding one batch."""

    proxy_zone: str
    leader_zone: str | None
    zone_healthy: bool  # circuit breaker of the destination zone is closed or half-open
    fallback: str  # "direct" | "fail"


def decide(policy: str, view: ZoneView, current: Path | None, shape: ObjectShape, prices: Prices,
           transactional: bool = False, storage_class: str = "standard", topic_refusal: str | None = None) -> Route:
    """The path for one partition batch; `storage_class` prices the WAL (wal.storage_class).
    `topic_refusal`: why the batch's topic may not take the WAL route (router/pilot.py), or None.

    Transactional batches never go through the WAL: the proxy serves no transaction
    coordinator APIs, and the WAL ack mode must never apply to them.
    """
    if view.leader_zone is None:
        return Route(Path.DIRECT_CROSS if view.proxy_zone else Path.LOCAL, "leader zone unknown")
    if view.leader_zone == view.proxy_zone:
        return SAME_ZONE
    if transactional:
        return Route(Path.DIRECT_CROSS, "transactional")
    if topic_refusal is not None:
        return Route(Path.DIRECT_CROSS, topic_refusal)
    if policy == "direct":
        return Route(Path.DIRECT_CROSS, "policy direct")
    if not view.zone_healthy:
        if view.fallback == "fail":
            return Route(Path.WAL, "zone unhealthy, fallback fail")
        return Route(Path.DIRECT_CROSS, FALLBACK_DIRECT_REASON)
    if policy == "wal":
        return Route(Path.WAL, "policy wal")
    return choose_cost(current, shape, prices, storage_class)


SHADOW_REASON = "shadow"


def shadow(route: Route) -> Route:
    """Shadow mode (router.shadow): the route a batch takes when `route` is what the policy
    would have chosen. Nothing goes through the WAL: a WAL choice goes direct (reason
    "shadow"); LOCAL and DIRECT_CROSS choices stand."""
    if route.path is Path.WAL:
        return Route(Path.DIRECT_CROSS, SHADOW_REASON)
    return route
