"""The produce batches of an audit, whether written one per batch or as interval summaries (pure).

Strategy: the planner's models (flows per host, the writer replay) take batches one by one.
A `produce_batch` record (schema v1..) is one; a `produce_summary` record (v13: one per
proxy, key and `audit.interval_s`) is expanded into its `batches` spread evenly in time from
its first to its last batch's end (first_ts_ms..last_ts_ms), each with the mean latency and
producer wait, and its bytes shared out so their sum is exact (the first `bytes % batches`
carry one byte more). The timeline is at interval resolution: within an interval the
batches of a key are evenly paced, whatever their real arrival was.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass


def field_number(record: Mapping[str, object], key: str) -> float:
    """A numeric field of an audit record; 0 when absent or null (older schema versions)."""
    value = record.get(key) or 0
    if not isinstance(value, (int, float, str)):
        raise TypeError(f"audit record field {key!r}: a number, got {value!r}")
    return float(value)


def record_ts_ms(record: Mapping[str, object]) -> int:
    """An audit record's timestamp (ms since the epoch); every record has one."""
    value = record["ts_ms"]
    if not isinstance(value, (int, float, str)):
        raise TypeError(f"audit record field 'ts_ms': a number, got {value!r}")
    return int(value)


@dataclass(frozen=True)
class AuditedBatch:
    """One successful partition batch: when it ended (ms), what it waited, where it went."""

    ended_ms: float
    latency_ms: float
    proxy_id: str
    zone: str
    leader_zone: str
    nbytes: int
    producer_wait_ms: float

    @property
    def received_s(self) -> float:
        return (self.ended_ms - max(self.latency_ms, 0.0)) / 1000.0


def _ok(record: Mapping[str, object]) -> bool:
    return record.get("error_code", 0) in (0, None)


def successful_batches(records: Iterable[Mapping[str, object]]) -> Iterator[AuditedBatch]:
    """Every successful batch of produce_batch and produce_summary records, in record order."""
    for r in records:
        kind = r.get("kind")
        if kind not in ("produce_batch", "produce_summary") or not _ok(r):
            continue
        host = str(r.get("proxy_id") or r.get("zone"))
        zone = str(r.get("zone"))
        leader = str(r.get("leader_zone") or r.get("zone"))
        if kind == "produce_batch":
            yield AuditedBatch(float(record_ts_ms(r)), field_number(r, "latency_ms"), host, zone, leader,
                               int(field_number(r, "bytes")), max(field_number(r, "producer_wait_ms"), 0.0))
            continue
        n = int(field_number(r, "batches"))
        if n <= 0:
            continue
        total = int(field_number(r, "bytes"))
        last = field_number(r, "last_ts_ms") or float(record_ts_ms(r))
        first = field_number(r, "first_ts_ms") or last
        step = (last - first) / (n - 1) if n > 1 else 0.0
        latency = field_number(r, "latency_ms_sum") / n
        waited = field_number(r, "producer_wait_ms_sum") / n
        share, extra = divmod(total, n)
        for i in range(n):
            yield AuditedBatch(first + i * step, latency, host, zone, leader, share + (1 if i < extra else 0), waited)
