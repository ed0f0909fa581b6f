"""The audit jobs on produce traffic written two ways: one produce_batch per batch (v12), and
the same batches partly as produce_summary / metadata_summary records (v13). Both inputs must
give the same tables; every expected number is worked out in comments.

Traffic, hour 0, proxy zone az1, principal User:a:
- WAL to az2, topic t partition 0: batches of 1000, 2000, 3000 bytes (1, 2, 3 records; 10, 20,
  30 ms) ending at +0, +4 s, +8 s. Mixed: the first as produce_batch, the other two as a summary.
- direct_cross fallback to az2 (the zone unhealthy), t/1: two batches of 100 bytes (1 record,
  5 ms) ending at +1 s, +2 s. Mixed: one summary of both.
- leader-zone lookups: 3 hits, 1 miss. Mixed: one metadata_lookup hit, summaries of 2 hits, 1 miss.
Latency buckets (core.audit.LATENCY_BUCKETS_MS): 5 ms -> 8 (4, 5]; 20 ms -> 14 (15, 20]; 30 ms -> 16 (25, 30].
Framing for a path MTU of 1092: MSS 1040, a produce stream costs at least 1 + 52/1040 = 1.05 wire bytes per byte.
"""

from __future__ import annotations

import pytest
from pyspark.sql import Row
from pyspark.testing import assertDataFrameEqual

from core.audit import FALLBACK_DIRECT_REASON
from core.framing import Framing
from core.prices import Prices
from spark_audit import jobs
from spark_audit._io import load, read_lines
from tests.integration.spark_audit.conftest import H0_MS, rec, write_jsonl

H0 = "2026-01-01T00:00Z"
EASY = Framing(path_mtu=1092)
COMMON = {"proxy_id": "p1", "principal": "User:a", "error_code": 0, "shadow_route": "", "shadow_reason": ""}
WAL = {**COMMON, "leader_zone": "az2", "topic": "t", "partition": 0, "route": "wal", "reason": "cost"}
FALLBACK = {**COMMON, "leader_zone": "az2", "topic": "t", "partition": 1, "route": "direct_cross",
            "reason": FALLBACK_DIRECT_REASON}


def batch(fields: dict, ts: int, size: int, records: int, latency: float) -> dict:
    return rec("produce_batch", "az1", H0_MS + ts, 12, **fields, bytes=size, records=records, wire_bytes=0,
               latency_ms=latency)


def lookup(cache: str) -> dict:
    return rec("metadata_lookup", "az1", H0_MS, 12, topic="t", partition=0, leader_zone="az2", cache=cache)


PER_BATCH = [
    batch(WAL, 0, 1000, 1, 10.0), batch(WAL, 4_000, 2000, 2, 20.0), batch(WAL, 8_000, 3000, 3, 30.0),
    batch(FALLBACK, 1_000, 100, 1, 5.0), batch(FALLBACK, 2_000, 100, 1, 5.0),
    lookup("hit"), lookup("hit"), lookup("hit"), lookup("miss"),
]
MIXED = [
    batch(WAL, 0, 1000, 1, 10.0),
    rec("produce_summary", "az1", H0_MS + 10_000, 13, **WAL, batches=2, bytes=5000, records=5, wire_bytes=0,
        latency_ms_sum=50.0, latency_max_ms=30.0, latency_hist="14:1,16:1", first_ts_ms=H0_MS + 4_000,
        last_ts_ms=H0_MS + 8_000, interval_ms=10_000),
    rec("produce_summary", "az1", H0_MS + 10_000, 13, **FALLBACK, batches=2, bytes=200, records=2, wire_bytes=0,
        latency_ms_sum=10.0, latency_max_ms=5.0, latency_hist="8:2", first_ts_ms=H0_MS + 1_000,
        last_ts_ms=H0_MS + 2_000, interval_ms=10_000),
    lookup("hit"),
    rec("metadata_summary", "az1", H0_MS + 10_000, 13, topic="t", partition=0, leader_zone="az2", cache="hit",
        lookups=2, interval_ms=10_000),
    rec("metadata_summary", "az1", H0_MS + 10_000, 13, topic="t", partition=0, leader_zone="az2", cache="miss",
        lookups=1, interval_ms=10_000),
]


@pytest.fixture(params=["per_batch", "mixed"])
def audit_path(request, tmp_path):
    records = PER_BATCH if request.param == "per_batch" else MIXED
    return str(write_jsonl(tmp_path / f"{request.param}.jsonl.gz", records))


def rows(columns, *values):
    return [Row(**dict(zip(columns, v))) for v in values]


def test_savings_trouble_and_lookups_are_the_same_from_summaries(spark, audit_path):
    rolled, _ = load(spark, audit_path, framing=EASY)
    try:
        columns = ["hour", "source_zone", "leader_zone", "batches_direct_cross", "batches_wal", "records_direct_cross",
                   "records_wal", "bytes_direct_cross", "bytes_wal", "direct_equivalent_bytes",
                   "direct_cross_wire_bytes"]
        # direct equivalent: WAL (6000 + 3 * 41) * 1.05 = 6429.15, fallback (200 + 2 * 41) * 1.05 = 296.1;
        # floor(6725.25) = 6725, of which the direct_cross share 6725 - floor(6429.15) = 296.
        assertDataFrameEqual(jobs.savings(rolled, Prices(), EASY).select(*columns),
                             rows(columns, (H0, "az1", "az2", 2, 3, 2, 6, 200, 6000, 6725, 296)))
        trouble = ["minute", "source_zone", "dest_zone", "fallback_batches", "fallback_bytes", "fallback_wire_bytes",
                   "failed_wal_batches"]
        # the fallback: 2 batches, 200 bytes, floor(296.1) = 296 on the wire, in minute 00:00
        assertDataFrameEqual(jobs.zone_trouble(rolled, Prices(), EASY).select(*trouble),
                             rows(trouble, ("2026-01-01T00:00Z", "az1", "az2", 2, 200, 296, 0)))
        cache = ["hour", "zone", "lookups", "hits", "misses", "hit_rate"]
        assertDataFrameEqual(jobs.metadata_cache(rolled), rows(cache, (H0, "az1", 4, 3, 1, 0.75)))
    finally:
        rolled.unpersist()


def test_latency_topics_and_partitions_are_the_same_from_summaries(spark, audit_path):
    latency = ["route", "source_zone", "leader_zone", "batches", "errors", "p50_ms", "p95_ms", "p99_ms", "mean_ms",
               "max_ms"]
    # direct_cross: two batches of 5 ms, bucket (4, 5] -> 5 everywhere. wal: 10, 20, 30 ms: p50 rank 2 -> 20 ms,
    # bucket (15, 20] -> 20; p95/p99 rank 3 -> 30 ms, bucket (25, 30] -> 30; mean 60 / 3 = 20.
    assertDataFrameEqual(jobs.latency(read_lines(spark, audit_path, jobs.LATENCY_COLUMNS)[0]), rows(
        latency, ("direct_cross", "az1", "az2", 2, 0, 5.0, 5.0, 5.0, 5.0, 5.0),
        ("wal", "az1", "az2", 3, 0, 20.0, 30.0, 30.0, 20.0, 30.0)), checkRowOrder=True)
    topics = ["source_zone", "leader_zone", "topic", "principal", "batches", "bytes_local", "bytes_direct_cross",
              "bytes_wal"]
    assertDataFrameEqual(jobs.topic_traffic(read_lines(spark, audit_path, jobs.TOPIC_COLUMNS)[0]),
                         rows(topics, ("az1", "az2", "t", "User:a", 5, 0, 200, 6000)))
    placement = ["topic", "partition", "source_zone", "leader_zone", "batches", "bytes", "first_ts_ms", "last_ts_ms"]
    # t/0 from the batch ending at +0 to the one at +8 s; t/1 from +1 s to +2 s
    assertDataFrameEqual(jobs.leader_traffic(read_lines(spark, audit_path, jobs.PLACEMENT_COLUMNS)[0]), rows(
        placement, ("t", 0, "az1", "az2", 3, 6000, H0_MS, H0_MS + 8_000),
        ("t", 1, "az1", "az2", 2, 200, H0_MS + 1_000, H0_MS + 2_000)), checkRowOrder=True)
