"""When the writer seals its open object (pure functions, no I/O, no clock).

Three triggers, in this order: the object reached `max_bytes` ("size"); an entry's oldest
record has waited `linger_ms` ("linger", the latency bound: counted from the entry's arrival,
less what its records had already waited in the producer, `producer_wait_s`, when
`wal.linger_counts_producer_wait`); or it is big enough that its requests cost at
most `max_request_cost_share` of the cross-zone transfer it replaces ("cost"). A bigger
object would save a little more on requests but make every entry in it wait longer.

An object's requests: its PUT, and per share (a destination zone's, or with several agents in
a zone each owning agent's) one ranged GET and (at most) one GC checkpoint PUT, priced in the
class of the WAL bucket (core/prices.py). `zones` below counts those shares. The transfer it
replaces: its bytes billed out of one zone and into the other. S3 Express One Zone's
per-byte upload and retrieval charges grow with the object, so no size lowers their share;
they are not part of the bound (the router's cost policy counts them).
"""

from __future__ import annotations

from core.prices import StorePrices

GB = 1_000_000_000  # AWS bills transfer per decimal GB


def request_usd(zones: int, store: StorePrices) -> float:
    """USD for the requests of one object with `zones` destination zones."""
    put = store.put_per_1000 / 1000.0
    get = store.get_per_1000 / 1000.0
    return put + zones * (get + put)


def request_cost_share(object_bytes: float, zones: int, store: StorePrices, cross_az_per_gb_each_way: float) -> float:
    """The object's request cost over the transfer its bytes would have cost (inf if none)."""
    avoided = object_bytes * 2 * cross_az_per_gb_each_way / GB
    if avoided <= 0:
        return float("inf")
    return request_usd(zones, store) / avoided


def cost_seal_bytes(zones: int, max_share: float, store: StorePrices, cross_az_per_gb_each_way: float) -> float:
    """The smallest object (bytes) with `zones` destination zones whose requests cost at most
    `max_share` of the transfer it replaces; inf when the bound is off (share 0) or transfer is free."""
    per_byte_avoided = 2 * cross_az_per_gb_each_way / GB
    if max_share <= 0 or per_byte_avoided <= 0 or zones <= 0:
        return float("inf")
    return request_usd(zones, store) / (max_share * per_byte_avoided)


def seal_reason(nbytes: int, age_s: float, *, max_bytes: int, linger_s: float, cost_bound_bytes: float) -> str | None:
    """Why to seal an open object of `nbytes`, `age_s` after it opened, or None to keep filling
    it. `cost_bound_bytes`: cost_seal_bytes for the object's number of destination zones."""
    if nbytes >= max_bytes:
        return "size"
    if age_s >= linger_s:
        return "linger"
    if nbytes > 0 and nbytes >= cost_bound_bytes:
        return "cost"
    return None


def producer_wait_s(now_ms: float, first_timestamp_ms: int, since_previous_s: float | None) -> float:
    """How long a request's oldest record had waited in its producer when the proxy got it, as
    far as the proxy can trust that.

    The batch's first timestamp says when the record was made, on the producer's clock. A
    producer keeping one request in flight per partition holds new records until the previous
    request is answered, so they can have waited for us at most since that previous request
    reached the proxy (`since_previous_s`): the bound keeps an old timestamp (a backfill, a
    clock behind ours) from sealing every object at once. 0 for a partition's first request,
    a batch without a timestamp (-1), or a timestamp ahead of our clock."""
    if since_previous_s is None or first_timestamp_ms < 0:
        return 0.0
    age_s = (now_ms - first_timestamp_ms) / 1000.0
    return max(0.0, min(age_s, since_previous_s))


def linger_due(arrival_s: float, linger_s: float, waited_s: float) -> float:
    """When an entry that arrived at `arrival_s`, whose oldest record had waited `waited_s` in
    the producer, must be sealed: `linger_s` after the record was made, and never before the
    entry arrived."""
    return arrival_s + linger_s - min(max(waited_s, 0.0), linger_s)
