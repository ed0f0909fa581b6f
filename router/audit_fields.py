"""What a produce_batch audit record says about a batch's time and bytes: pure functions.

wire_bytes: direct_cross the batch and its Produce entries; wal its equal share of its
notification round trip (from the sender's answer); local 0.

The backend measures instants with `time.perf_counter()`; these functions turn them into
the record's fields so each field's interval is defined in one place and table-tested
(docs/audit-records.md, "produce_batch" lists them):

- queue_ms:         received -> in the WAL buffer
- linger_wait_ms:   in the buffer -> its object sealed (the wait for size or linger)
- s3_put_ms:        sealed -> durable and released in sequence order (PUT slot wait, the
                    PUT with its retries, waiting for earlier objects); no linger in it
- notify_rtt_ms:    released -> the agent's result (queueing behind earlier notifications,
                    the agent's read and the leader's append included)
- leader_append_ms: direct routes: received -> the leader's answer; WAL: the agent's append
                    of the batch (its append call, retries included -> the leader's answer),
                    from the agent's answer (notify protocol v3); -1 when the answer did not
                    carry one (ack_mode wal answers on durability, a duplicate answered from
                    the agent's applied map, a failed append)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from core.audit_records import ProduceBatchRecord
from core.framing import PRODUCE_OVERHEAD_BYTES
from core.produce import PartitionBatches, PartitionResult

if TYPE_CHECKING:
    from router.decide import Route
    from router.wal_path import WalOutcome

NOT_APPLICABLE = -1.0


def wire_bytes(route: str, batch_bytes: int, notification_share: int = 0) -> int:
    """produce_batch.wire_bytes: the batch's own bytes on a cross-zone link, before TCP/IP.

    direct_cross: the batch plus its per-partition share of the Produce request and
    response (framing.PRODUCE_OVERHEAD_BYTES); wal: its share of its notification round
    trip (`notification_share`, 0 when the answer did not say); local: 0.
    """
    if route == "direct_cross":
        return batch_bytes + PRODUCE_OVERHEAD_BYTES
    return notification_share if route == "wal" else 0


def notification_share(request_bytes: int, response_bytes: int, entries: int) -> int:
    """One entry's share of a notification round trip: equal per entry (each entry is a
    fixed-size record plus its topic name each way), rounded to the nearest byte, halves up."""
    return (request_bytes + response_bytes + entries // 2) // entries if entries > 0 else 0


def wal_leader_append_ms(append_us: int) -> float:
    """produce_batch.leader_append_ms on the WAL route from the agent's answer (µs, -1 unknown)."""
    return append_us / 1000 if append_us >= 0 else NOT_APPLICABLE


def wal_timing_fields(started: float, buffered_at: float, sealed_at: float, durable_at: float,
                      notified_at: float) -> dict[str, float]:
    """The WAL route's timing fields in ms from perf_counter instants (0.0 = did not happen)."""
    fields = {"queue_ms": (buffered_at - started) * 1000, "linger_wait_ms": NOT_APPLICABLE,
              "s3_put_ms": NOT_APPLICABLE, "notify_rtt_ms": NOT_APPLICABLE}
    if sealed_at:
        fields["linger_wait_ms"] = max(0.0, sealed_at - buffered_at) * 1000
    if durable_at:
        put_from = max(sealed_at, buffered_at) if sealed_at else buffered_at
        fields["s3_put_ms"] = max(0.0, durable_at - put_from) * 1000
        if notified_at:
            fields["notify_rtt_ms"] = (notified_at - durable_at) * 1000
    return fields


def produce_batch_record(proxy_id: str, item: PartitionBatches, route: Route, dest: str | None,
                         result: PartitionResult, started: float, finished: float, outcome: WalOutcome | None,
                         would: Route | None, principal: str) -> ProduceBatchRecord:
    """The produce_batch audit record of one partition's batches of a request (core/audit.py
    lists its fields): `started`/`finished` perf_counter instants of the request and of the
    partition's own path, `outcome` its WAL outcome (None on a direct route), `would` the
    route shadow mode would have taken."""
    size = item.size
    record: ProduceBatchRecord = {
        "proxy_id": proxy_id, "leader_zone": dest or "", "topic": item.topic,
        "partition": item.partition, "route": route.path_name, "reason": route.reason,
        "bytes": size, "records": item.records,
        "wire_bytes": wire_bytes(route.path_name, size, outcome.wire_bytes if outcome else 0),
        "error_code": result.error_code, "latency_ms": (finished - started) * 1000,
        "queue_ms": -1.0, "s3_put_ms": -1.0, "notify_rtt_ms": -1.0, "leader_append_ms": -1.0,
        "wal_key": "", "linger_wait_ms": -1.0, "producer_wait_ms": -1.0,
        "shadow_route": would.path_name if would is not None else "",
        "shadow_reason": would.reason if would is not None else "",
        "principal": principal,
    }
    if outcome is not None:
        record["wal_key"] = outcome.key
        record["producer_wait_ms"] = outcome.producer_wait_s * 1000
        timing = wal_timing_fields(started, outcome.buffered_at, outcome.sealed_at, outcome.durable_at,
                                   outcome.notified_at)
        record["queue_ms"], record["linger_wait_ms"] = timing["queue_ms"], timing["linger_wait_ms"]
        record["s3_put_ms"], record["notify_rtt_ms"] = timing["s3_put_ms"], timing["notify_rtt_ms"]
        record["leader_append_ms"] = wal_leader_append_ms(outcome.append_us)
    else:
        record["leader_append_ms"] = (finished - started) * 1000
    return record
