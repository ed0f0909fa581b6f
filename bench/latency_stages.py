"""Where a WAL-routed batch's time goes, from the audit records of a run (pure, no I/O).

The proxy's `produce_batch` records time each batch in the proxy (queue_ms, linger_wait_ms,
s3_put_ms, notify_rtt_ms; latency_ms from the request read to the answer), `wal_flush`
each object's PUT (put_wait_ms: sealed -> PUT sent; put_ms), the agent's `agent_read` and
`agent_apply` the destination's side of the notification (get_ms: the ranged GET;
append_ms: the leader's answer). `stage_summary` gives p50/p99 of each for the batches of
one topic, so a run shows which stage moved, and how the proxy's time compares with what
the producer saw (the difference is the producer's own: linger.ms, waiting for its
previous request of the partition, delivery callback).
"""

from __future__ import annotations

from collections.abc import Iterable

# (record kind, field) per stage, in the batch's order through the WAL route.
STAGES = (
    ("produce_batch", "latency_ms"),
    ("produce_batch", "queue_ms"),
    ("produce_batch", "producer_wait_ms"),
    ("produce_batch", "linger_wait_ms"),
    ("produce_batch", "s3_put_ms"),
    ("produce_batch", "notify_rtt_ms"),
    ("produce_batch", "records"),
    ("wal_flush", "put_wait_ms"),
    ("wal_flush", "put_ms"),
    ("agent_read", "get_ms"),
    ("agent_apply", "append_ms"),
    ("agent_apply", "handle_ms"),
)


def percentile(values: list[float], q: float) -> float:
    """The value at rank int(q * n) of the sorted values (nan for none)."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def stage_summary(records: Iterable[dict], topic: str) -> dict[str, dict[str, float]]:
    """{"kind.field": {"n", "p50", "p99"}} over the records of `topic`'s batches: the proxy's
    produce_batch records of `topic` and the flush/read/apply records of their WAL objects.
    Negative values (the audit's "did not happen") are left out."""
    records = list(records)
    batches = [r for r in records if r.get("kind") == "produce_batch" and r.get("topic") == topic]
    keys = {r["wal_key"] for r in batches if r.get("wal_key")}
    out: dict[str, dict[str, float]] = {}
    for kind, field in STAGES:
        mine = batches if kind == "produce_batch" else [r for r in records if r.get("kind") == kind
                                                         and r.get("key") in keys]
        values = [float(r[field]) for r in mine if field in r and r[field] is not None and r[field] >= 0]
        if values:
            out[f"{kind}.{field}"] = {"n": len(values), "p50": percentile(values, 0.50),
                                      "p99": percentile(values, 0.99)}
    return out


# The five stages a reader asks about first, as named in the printed table: (column, stage key).
NAMED_STAGES = (
    ("linger", "produce_batch.linger_wait_ms"),
    ("PUT", "wal_flush.put_ms"),
    ("notification", "produce_batch.notify_rtt_ms"),
    ("GET", "agent_read.get_ms"),
    ("append", "agent_apply.append_ms"),
)


def named_stages(stages: dict[str, dict[str, float]], q: str = "p50") -> dict[str, float]:
    """{column: the stage's `q` (p50 or p99)} for NAMED_STAGES, nan where the run has none; plus
    "notify wait": the notification's round trip less the agent's handling of it (reading
    and appending), both at `q`: the time the notification spent on the wire and queued
    behind earlier objects."""
    out = {name: stages.get(key, {}).get(q, float("nan")) for name, key in NAMED_STAGES}
    handle = stages.get("agent_apply.handle_ms", {}).get(q, float("nan"))
    out["notify wait"] = out["notification"] - handle
    return out
