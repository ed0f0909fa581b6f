"""Produce batches and leader-zone lookups aggregated per interval and key (pure).

Strategy: one audit record per partition batch is ~93,000 records per GB at 16 KiB batches;
the proxy instead adds each batch's produce_batch fields into a counter per key (proxy_id,
topic, partition, leader_zone, route, reason, error_code, principal, shadow_route,
shadow_reason) and each lookup into a counter per (topic, partition, leader_zone, cache);
every interval the counters become one `produce_summary` / `metadata_summary` record per
key (core/audit.py) and start again. Sums are exact integers or float sums; latency is a
fixed-bucket histogram (core.latency_histogram). Memory is bounded: at `max_keys` keys held
the caller is told to flush now (`full`), so a new key never drops or merges a batch.
No clock and no I/O here: the caller passes the time (`router.summary_sink` is the shell).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from core import latency_histogram
from core.audit_records import MetadataSummaryRecord, ProduceSummaryRecord

# Keys held between flushes: a proxy serving 10,000 partitions at one route each fills it in
# one interval; beyond, it flushes early (a record per key more, never a dropped batch).
MAX_KEYS = 10_000
PRODUCE_KEY_FIELDS = ("proxy_id", "topic", "partition", "leader_zone", "route", "reason", "error_code",
                      "principal", "shadow_route", "shadow_reason")
LOOKUP_KEY_FIELDS = ("topic", "partition", "leader_zone", "cache")
# produce_batch stage times summed into <stage>_sum (a -1, "not applicable", adds nothing).
STAGE_FIELDS = ("latency_ms", "queue_ms", "s3_put_ms", "notify_rtt_ms", "leader_append_ms", "linger_wait_ms",
                "producer_wait_ms")

ProduceKey = tuple[str, str, int, str, str, str, int, str, str, str]
LookupKey = tuple[str, int, str, str]


@dataclass
class ProduceSums:
    batches: int = 0
    bytes: int = 0
    records: int = 0
    wire_bytes: int = 0
    stage_ms: dict[str, float] = field(default_factory=lambda: dict.fromkeys(STAGE_FIELDS, 0.0))
    latency_max_ms: float = 0.0
    latency_buckets: dict[int, int] = field(default_factory=dict)
    first_ts_ms: int = 0
    last_ts_ms: int = 0


def produce_key(fields: Mapping[str, Any]) -> ProduceKey:
    return (str(fields.get("proxy_id", "")), str(fields.get("topic", "")), int(fields.get("partition", -1)),
            str(fields.get("leader_zone", "")), str(fields.get("route", "")), str(fields.get("reason", "")),
            int(fields.get("error_code", 0)), str(fields.get("principal", "")), str(fields.get("shadow_route", "")),
            str(fields.get("shadow_reason", "")))


class ProduceSummaries:
    """The produce_batch and metadata_lookup fields of one interval, summed per key."""

    def __init__(self, max_keys: int = MAX_KEYS) -> None:
        if max_keys < 1:
            raise ValueError("max_keys must be >= 1")
        self._max_keys = max_keys
        self._produce: dict[ProduceKey, ProduceSums] = {}
        self._lookups: dict[LookupKey, int] = {}
        self._since_ms: int | None = None

    @property
    def full(self) -> bool:
        """True when the keys held reached max_keys: take() before adding more."""
        return len(self._produce) + len(self._lookups) >= self._max_keys

    @property
    def empty(self) -> bool:
        return not self._produce and not self._lookups

    def add_batch(self, fields: Mapping[str, Any], now_ms: int) -> None:
        """Count one produce_batch record (core/audit.py fields) that ended at `now_ms`."""
        self._start(now_ms)
        key = produce_key(fields)
        sums = self._produce.get(key)
        if sums is None:
            sums = self._produce[key] = ProduceSums(first_ts_ms=now_ms)
        sums.batches += 1
        sums.bytes += int(fields.get("bytes", 0))
        sums.records += int(fields.get("records", 0))
        sums.wire_bytes += int(fields.get("wire_bytes", 0))
        for stage in STAGE_FIELDS:
            value = float(fields.get(stage, -1.0))
            if value >= 0:
                sums.stage_ms[stage] += value
        latency = max(0.0, float(fields.get("latency_ms", 0.0)))
        sums.latency_max_ms = max(sums.latency_max_ms, latency)
        bucket = latency_histogram.bucket_of(latency)
        sums.latency_buckets[bucket] = sums.latency_buckets.get(bucket, 0) + 1
        sums.last_ts_ms = now_ms

    def add_lookup(self, fields: Mapping[str, Any], now_ms: int) -> None:
        """Count one metadata_lookup record (core/audit.py fields)."""
        self._start(now_ms)
        key = (str(fields.get("topic", "")), int(fields.get("partition", -1)), str(fields.get("leader_zone", "")),
               str(fields.get("cache", "")))
        self._lookups[key] = self._lookups.get(key, 0) + 1

    def take(self, now_ms: int) -> tuple[list[ProduceSummaryRecord], list[MetadataSummaryRecord]]:
        """The records of everything added since the last take, ts_ms = `now_ms` and
        interval_ms = from the first add to `now_ms`, in key order; the counters start again."""
        interval_ms = max(0, now_ms - self._since_ms) if self._since_ms is not None else 0
        produce, self._produce = self._produce, {}
        lookups, self._lookups = self._lookups, {}
        self._since_ms = None
        summaries = [_produce_record(key, sums, now_ms, interval_ms) for key, sums in sorted(produce.items())]
        lookup_records: list[MetadataSummaryRecord] = [
            {"ts_ms": now_ms, "topic": topic, "partition": partition, "leader_zone": zone, "cache": cache,
             "lookups": count, "interval_ms": interval_ms}
            for (topic, partition, zone, cache), count in sorted(lookups.items())]
        return summaries, lookup_records

    def _start(self, now_ms: int) -> None:
        if self._since_ms is None:
            self._since_ms = now_ms


def _produce_record(key: ProduceKey, sums: ProduceSums, now_ms: int, interval_ms: int) -> ProduceSummaryRecord:
    proxy_id, topic, partition, leader_zone, route, reason, error_code, principal, shadow_route, shadow_reason = key
    return {
        "ts_ms": now_ms, "proxy_id": proxy_id, "leader_zone": leader_zone, "topic": topic, "partition": partition,
        "route": route, "reason": reason, "error_code": error_code, "principal": principal,
        "shadow_route": shadow_route, "shadow_reason": shadow_reason,
        "batches": sums.batches, "bytes": sums.bytes, "records": sums.records, "wire_bytes": sums.wire_bytes,
        "latency_ms_sum": sums.stage_ms["latency_ms"], "queue_ms_sum": sums.stage_ms["queue_ms"],
        "s3_put_ms_sum": sums.stage_ms["s3_put_ms"], "notify_rtt_ms_sum": sums.stage_ms["notify_rtt_ms"],
        "leader_append_ms_sum": sums.stage_ms["leader_append_ms"],
        "linger_wait_ms_sum": sums.stage_ms["linger_wait_ms"],
        "producer_wait_ms_sum": sums.stage_ms["producer_wait_ms"],
        "latency_max_ms": sums.latency_max_ms, "latency_hist": latency_histogram.encode(sums.latency_buckets),
        "first_ts_ms": sums.first_ts_ms, "last_ts_ms": sums.last_ts_ms, "interval_ms": interval_ms,
    }
