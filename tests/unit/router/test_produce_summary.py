"""The produce batch and lookup summaries (router.produce_summary) and the sink that writes
them every interval (router.summary_sink), driven by a virtual clock."""

from __future__ import annotations

import pytest

from core import latency_histogram
from core.audit import LATENCY_BUCKETS_MS, MemoryAuditSink
from router.produce_summary import ProduceSummaries
from router.summary_sink import SummarizingAuditSink


def batch(**fields):
    base = {"proxy_id": "p1", "leader_zone": "az2", "topic": "t", "partition": 0, "route": "wal",
            "reason": "cost", "bytes": 16384, "records": 10, "wire_bytes": 20, "error_code": 0,
            "latency_ms": 30.0, "queue_ms": 1.0, "s3_put_ms": 12.0, "notify_rtt_ms": 9.0,
            "leader_append_ms": 2.0, "wal_key": "k", "linger_wait_ms": 5.0, "producer_wait_ms": -1.0,
            "shadow_route": "", "shadow_reason": "", "principal": "User:a"}
    return {**base, **fields}


def test_batches_of_one_key_are_summed_exactly():
    summaries = ProduceSummaries()
    summaries.add_batch(batch(), now_ms=1_000)
    summaries.add_batch(batch(bytes=100, records=1, wire_bytes=22, latency_ms=45.5, queue_ms=-1.0), now_ms=1_400)
    summaries.add_batch(batch(bytes=7, records=2, wire_bytes=0, latency_ms=0.1), now_ms=2_000)
    produce, lookups = summaries.take(now_ms=10_000)
    assert lookups == []
    (record,) = produce
    # 16384 + 100 + 7 bytes; 10 + 1 + 2 records; 20 + 22 + 0 wire; latency 30 + 45.5 + 0.1;
    # queue 1 + (-1: not applicable, adds nothing) + 1; producer_wait -1 three times -> 0.
    assert record == {
        "ts_ms": 10_000, "proxy_id": "p1", "leader_zone": "az2", "topic": "t", "partition": 0, "route": "wal",
        "reason": "cost", "error_code": 0, "principal": "User:a", "shadow_route": "", "shadow_reason": "",
        "batches": 3, "bytes": 16_491, "records": 13, "wire_bytes": 42,
        "latency_ms_sum": 75.6, "queue_ms_sum": 2.0, "s3_put_ms_sum": 36.0, "notify_rtt_ms_sum": 27.0,
        "leader_append_ms_sum": 6.0, "linger_wait_ms_sum": 15.0, "producer_wait_ms_sum": 0.0,
        "latency_max_ms": 45.5,
        # 0.1 ms -> bucket 0 (<= 0.25); 30 -> bucket 16 (25, 30]; 45.5 -> bucket 18 (40, 50]
        "latency_hist": "0:1,16:1,18:1",
        "first_ts_ms": 1_000, "last_ts_ms": 2_000, "interval_ms": 9_000,
    }
    assert summaries.take(now_ms=20_000) == ([], [])  # the counters started again


def test_each_key_field_splits_a_summary():
    summaries = ProduceSummaries()
    for changed in ({}, {"partition": 1}, {"route": "direct_cross"}, {"error_code": 6}, {"principal": "User:b"},
                    {"shadow_route": "wal"}, {"leader_zone": "az3"}, {"reason": "x"}, {"shadow_reason": "y"},
                    {"proxy_id": "p2"}, {"topic": "u"}):
        summaries.add_batch(batch(**changed), now_ms=5)
    produce, _ = summaries.take(now_ms=6)
    assert len(produce) == 11
    assert sum(r["batches"] for r in produce) == 11


def test_lookups_are_counted_per_partition_zone_and_cache_outcome():
    summaries = ProduceSummaries()
    for cache in ("hit", "hit", "miss"):
        summaries.add_lookup({"topic": "t", "partition": 0, "leader_zone": "az2", "cache": cache}, now_ms=100)
    summaries.add_lookup({"topic": "t", "partition": 1, "leader_zone": "az2", "cache": "hit"}, now_ms=300)
    _, lookups = summaries.take(now_ms=1_100)
    assert lookups == [
        {"ts_ms": 1_100, "topic": "t", "partition": 0, "leader_zone": "az2", "cache": "hit", "lookups": 2,
         "interval_ms": 1_000},
        {"ts_ms": 1_100, "topic": "t", "partition": 0, "leader_zone": "az2", "cache": "miss", "lookups": 1,
         "interval_ms": 1_000},
        {"ts_ms": 1_100, "topic": "t", "partition": 1, "leader_zone": "az2", "cache": "hit", "lookups": 1,
         "interval_ms": 1_000},
    ]


class Clock:
    def __init__(self) -> None:
        self.ms = 0

    def __call__(self) -> int:
        return self.ms


def test_the_sink_writes_summaries_when_flushed_and_passes_other_kinds_through():
    inner, clock = MemoryAuditSink(), Clock()
    sink = SummarizingAuditSink(inner, 10.0, clock_ms=clock)
    clock.ms = 1_000
    sink.emit("produce_batch", batch())
    sink.emit("metadata_lookup", {"topic": "t", "partition": 0, "leader_zone": "az2", "cache": "miss"})
    sink.emit("wal_flush", {"key": "k", "bytes": 5})
    assert [k for k, _ in inner.records] == ["wal_flush"]  # batches wait for the interval
    clock.ms = 11_000
    sink.emit("produce_batch", batch(bytes=4))
    sink.flush()
    assert [k for k, _ in inner.records] == ["wal_flush", "produce_summary", "metadata_summary"]
    (summary,) = inner.of("produce_summary")
    assert (summary["batches"], summary["bytes"], summary["ts_ms"], summary["interval_ms"]) == (2, 16_388, 11_000,
                                                                                              10_000)
    sink.flush()  # nothing new: no empty records
    assert len(inner.records) == 3


def test_a_full_key_table_flushes_early_and_loses_no_batch():
    inner, clock = MemoryAuditSink(), Clock()
    sink = SummarizingAuditSink(inner, 10.0, max_keys=2, clock_ms=clock)
    for partition in range(5):
        sink.emit("produce_batch", batch(partition=partition))
    # keys 0,1 -> full -> flushed; 2,3 -> flushed; 4 waits.
    assert [r["partition"] for r in inner.of("produce_summary")] == [0, 1, 2, 3]
    sink.close()
    assert [r["partition"] for r in inner.of("produce_summary")] == [0, 1, 2, 3, 4]


def test_after_close_each_batch_is_written_at_once():
    inner, clock = MemoryAuditSink(), Clock()
    sink = SummarizingAuditSink(inner, 10.0, clock_ms=clock)
    sink.close()
    clock.ms = 7
    sink.emit("produce_batch", batch(bytes=3))
    (summary,) = inner.of("produce_summary")
    assert (summary["batches"], summary["bytes"], summary["ts_ms"]) == (1, 3, 7)


def test_histogram_buckets_and_percentiles():
    # bounds are inclusive above: 1 ms is bucket 3 (0.75, 1], 1.01 ms bucket 4 (1, 1.5]
    assert (latency_histogram.bucket_of(1.0), latency_histogram.bucket_of(1.01)) == (3, 4)
    assert latency_histogram.bucket_of(1e9) == len(LATENCY_BUCKETS_MS) - 1
    counts = latency_histogram.decode("3:2,16:7,18:1")
    assert counts == {3: 2, 16: 7, 18: 1}
    assert latency_histogram.encode(counts) == "3:2,16:7,18:1"
    # 10 batches: p50 rank 5 -> bucket 16 (25, 30] -> 30; p99 rank 10 -> bucket 18 -> 50, capped at max 41
    assert latency_histogram.percentile(counts, 0.5, max_ms=41.0) == 30.0
    assert latency_histogram.percentile(counts, 0.99, max_ms=41.0) == 41.0
    assert latency_histogram.percentile({}, 0.5, max_ms=0.0) is None
    with pytest.raises(ValueError):
        latency_histogram.decode("99:1")
