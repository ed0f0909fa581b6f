"""The audit jobs on WAL-path traffic written two ways: one record per object (wal_flush,
notification, agent_read, agent_apply, checkpoint_write; v14), and the same objects summed
per interval and key (v15 *_summary records). Both inputs must give the same tables; every
expected number is worked out in comments.

Traffic, hour 0, proxy p1 in az1, agents in az2 and az3 (framing: path MTU 1092, MSS 1040,
52 header bytes per packet, one ACK per message):
- k1: 2,500,100 bytes, 2 entries, zones az2,az3, 1 PUT. k2: 2,200,000 bytes, 2 entries,
  zones az2,az3, 2 PUTs (a retry). Both in size class 2^21 = 2,097,152.
- k3: 600 bytes, 1 entry, zone az2, PUT failed after 3 attempts (class 512): nobody reads it.
- notifications: k1 -> az2 1,200 + 60 bytes; k1 -> az3, k2 -> az2, k2 -> az3 300 + 60 each.
  On the wire: k1 -> az2 1,260 + (2 + 1 + 2) x 52 = 1,520; the others 360 + (1 + 1 + 2) x 52 = 568.
- reads: az2 k1 2,000,000 bytes 1 GET 1 miss; az2 k2 1,700,000 bytes from the cache (1 hit);
  az3 k1 500,100 bytes 1 GET 1 miss; az3 k2 500,000 bytes 2 GETs 1 miss.
- each agent applies both objects and writes one manifest naming k1 and k2 (1 PUT each).
"""

from __future__ import annotations

from pyspark.testing import assertDataFrameEqual

from core.framing import Framing
from core.prices import Prices
from spark_audit import jobs
from spark_audit._io import load, release
from tests.integration.spark_audit.conftest import H0_MS, rec, write_jsonl

EASY = Framing(path_mtu=1092)
K1, K2, K3 = "a1b2/wal/az1/p1/1/1", "c3d4/wal/az1/p1/1/2", "e5f6/wal/az1/p1/1/3"
FLUSH = {"writer_id": "p1", "epoch": 1, "reason": "size", "ok": True}
SUMMARY = {"interval_ms": 10_000, "first_ts_ms": H0_MS + 1_000, "last_ts_ms": H0_MS + 9_000}


def at(ts: int, kind: str, zone: str, **fields) -> dict:
    return rec(kind, zone, H0_MS + ts, 14, **fields)


def summed(kind: str, zone: str, **fields) -> dict:
    return rec(kind, zone, H0_MS + 10_000, 15, **SUMMARY, **fields)


PER_OBJECT = [
    at(1_000, "wal_flush", "az1", **FLUSH, sequence=1, key=K1, bytes=2_500_100, entries=2, zones="az2,az3",
       attempts=1, put_requests=1, put_ms=40.0),
    at(2_000, "wal_flush", "az1", **FLUSH, sequence=2, key=K2, bytes=2_200_000, entries=2, zones="az2,az3",
       attempts=2, put_requests=2, put_ms=90.0),
    at(3_000, "wal_flush", "az1", **{**FLUSH, "ok": False, "reason": "linger"}, sequence=3, key=K3, bytes=600,
       entries=1, zones="az2", attempts=3, put_requests=3, put_ms=900.0),
    at(1_100, "notification", "az1", dest_zone="az2", key=K1, entries=1, request_bytes=1_200, response_bytes=60,
       status="ok", attempts=1, rtt_ms=8.0),
    at(1_100, "notification", "az1", dest_zone="az3", key=K1, entries=1, request_bytes=300, response_bytes=60,
       status="ok", attempts=1, rtt_ms=9.0),
    at(2_100, "notification", "az1", dest_zone="az2", key=K2, entries=1, request_bytes=300, response_bytes=60,
       status="ok", attempts=1, rtt_ms=7.0),
    at(2_100, "notification", "az1", dest_zone="az3", key=K2, entries=1, request_bytes=300, response_bytes=60,
       status="ok", attempts=1, rtt_ms=6.0),
    at(1_050, "agent_read", "az2", source_zone="az1", key=K1, bytes=2_000_000, gets=1, cache_hits=0,
       cache_misses=1, bytes_from_cache=0, latency_ms=5.0, get_ms=4.0),
    at(2_050, "agent_read", "az2", source_zone="az1", key=K2, bytes=1_700_000, gets=0, cache_hits=1,
       cache_misses=0, bytes_from_cache=1_700_000, latency_ms=0.5, get_ms=0.0),
    at(1_050, "agent_read", "az3", source_zone="az1", key=K1, bytes=500_100, gets=1, cache_hits=0,
       cache_misses=1, bytes_from_cache=0, latency_ms=5.0, get_ms=4.0),
    at(2_050, "agent_read", "az3", source_zone="az1", key=K2, bytes=500_000, gets=2, cache_hits=0,
       cache_misses=1, bytes_from_cache=0, latency_ms=30.0, get_ms=28.0),
    *[at(ts, "agent_apply", zone, source_zone="az1", key=key, entries=1, status="ok", read_ms=5.0,
         append_ms=2.0, handle_ms=7.0)
      for zone in ("az2", "az3") for ts, key in ((1_060, K1), (2_060, K2))],
    *[at(4_000, "checkpoint_write", zone, keys=2, wal_keys=f"{K1},{K2}", put_ms=20.0, status="ok")
      for zone in ("az2", "az3")],
]
SUMMED = [
    # k1 + k2: 2 objects, 4,700,100 bytes, 4 entries, 1 + 2 PUTs
    summed("wal_flush_summary", "az1", writer_id="p1", zones="az2,az3", reason="size", ok=True, size_class=2_097_152,
           objects=2, bytes=4_700_100, entries=4, attempts=3, put_requests=3, put_ms_sum=130.0, put_max_ms=90.0,
           put_hist="17:1,21:1"),
    summed("wal_flush_summary", "az1", writer_id="p1", zones="az2", reason="linger", ok=False, size_class=512,
           objects=1, bytes=600, entries=1, attempts=3, put_requests=3, put_ms_sum=900.0, put_max_ms=900.0,
           put_hist="30:1"),
    # az2: 1,200 + 300 request bytes in ceil(1200/1040) + ceil(300/1040) = 3 packets; 60 + 60 in 2
    summed("notification_summary", "az1", dest_zone="az2", status="ok", size_class=2_097_152, notifications=2,
           entries=2, attempts=2, request_bytes=1_500, response_bytes=120, path_mtu=1092, request_packets=3,
           response_packets=2, request_messages=2, response_messages=2, rtt_ms_sum=15.0),
    summed("notification_summary", "az1", dest_zone="az3", status="ok", size_class=2_097_152, notifications=2,
           entries=2, attempts=2, request_bytes=600, response_bytes=120, path_mtu=1092, request_packets=2,
           response_packets=2, request_messages=2, response_messages=2, rtt_ms_sum=15.0),
    summed("agent_read_summary", "az2", source_zone="az1", reads=2, bytes=3_700_000, gets=1, cache_hits=1,
           cache_misses=1, bytes_from_cache=1_700_000, latency_ms_sum=5.5, get_ms_sum=4.0),
    summed("agent_read_summary", "az3", source_zone="az1", reads=2, bytes=1_000_100, gets=3, cache_hits=0,
           cache_misses=2, bytes_from_cache=0, latency_ms_sum=35.0, get_ms_sum=32.0),
    *[summed("agent_apply_summary", zone, source_zone="az1", status="ok", applies=2, entries=2) for zone in ("az2", "az3")],
    *[summed("checkpoint_summary", zone, source_zone="az1", status="ok", manifests=1, keys=2, manifest_puts=1.0,
             put_ms_sum=20.0) for zone in ("az2", "az3")],
]
MONEY = {"rtol": 1e-9, "atol": 1e-15}


def test_savings_break_even_cache_and_trouble_are_the_same_from_object_summaries(spark, tmp_path):
    tables = {}
    for name, records in (("object", PER_OBJECT), ("summary", SUMMED)):
        path = write_jsonl(tmp_path / name / "a.jsonl.gz", records)
        rolled, _ = load(spark, str(path), framing=EASY)
        tables[name] = {
            "savings": jobs.savings(rolled, Prices(), EASY),
            "break_even": jobs.break_even(rolled, Prices(), EASY),
            "agent_cache": jobs.agent_cache(rolled),
            "zone_trouble": jobs.zone_trouble(rolled, Prices(), EASY),
        }
        tables[name] = {table: df.collect() for table, df in tables[name].items()}
        release(rolled)
    for table in ("savings", "break_even", "agent_cache", "zone_trouble"):
        assertDataFrameEqual(tables["summary"][table], tables["object"][table], checkRowOrder=True, **MONEY)

    savings = {r["leader_zone"]: r for r in tables["summary"]["savings"]}
    # az2: k1 1,520 + k2 568 on the wire; PUTs: k1 1/2 + k2 2/2 + k3 3 (az2 alone) + az2's manifest 1
    assert (savings["az2"]["notification_bytes"], savings["az2"]["s3_put_requests"],
            savings["az2"]["s3_get_requests"]) == (2_088, 5.5, 1)
    # az3: 568 + 568; PUTs 1/2 + 2/2 + az3's manifest 1; GETs 1 + 2
    assert (savings["az3"]["notification_bytes"], savings["az3"]["s3_put_requests"],
            savings["az3"]["s3_get_requests"]) == (1_136, 2.5, 3)
    small, large = tables["summary"]["break_even"]
    # class 512: k3 alone, its 3 PUTs, no reads; class 2^21: k1 + k2, PUTs 1 + 2 + 2 manifests,
    # GETs 1 + 0 + 1 + 2, notifications 2,088 + 1,136
    assert (small["size_bucket_bytes"], small["objects"], small["put_requests"], small["get_requests"]) == (512, 1, 3, 0)
    assert (large["size_bucket_bytes"], large["objects"], large["mean_object_bytes"], large["entries"],
            large["put_requests"], large["get_requests"], large["notification_bytes"]) == (
        2_097_152, 2, 2_350_050.0, 4, 5, 4, 3_224)
    cache = {r["zone"]: r for r in tables["summary"]["agent_cache"]}
    assert (cache["az2"]["reads"], cache["az2"]["hit_rate"], cache["az2"]["bytes_from_cache"]) == (2, 0.5, 1_700_000)
    assert (cache["az3"]["reads"], cache["az3"]["cache_misses"], cache["az3"]["gets"]) == (2, 2, 3)
    (trouble,) = tables["summary"]["zone_trouble"]
    # k3's failed PUT: one object for az2 nobody read, its 3 PUTs
    assert (trouble["dest_zone"], trouble["unread_objects"], trouble["unread_put_requests"]) == ("az2", 1, 3.0)
