"""The planner's input from hand-made audit records (pure sums, and the reader over gzip files)."""

from __future__ import annotations

import gzip
import json

import pytest

from core.prices import Prices
from leader_placement.audit_input import AuditInputError, leader_prices, produce_bytes_by_zone, read_records


def batch(ts_ms, zone, topic, partition, size, route="wal", error_code=0):
    return {"kind": "produce_batch", "ts_ms": ts_ms, "zone": zone, "proxy_id": f"p-{zone}", "topic": topic,
            "partition": partition, "bytes": size, "route": route, "error_code": error_code, "leader_zone": "x"}


RECORDS = [
    batch(1_000, "use1-az1", "t", 0, 700),
    batch(2_000, "use1-az1", "t", 0, 300),
    batch(3_000, "use1-az2", "t", 0, 100, route="local"),
    batch(4_000, "use1-az3", "t", 1, 50, route="direct_cross"),
    batch(5_000, "use1-az1", "t", 1, 999, error_code=6),  # NOT_LEADER: nothing reached a leader
    batch(6_000, "use1-az1", "", -1, 10),  # no partition named
    {"kind": "wal_flush", "ts_ms": 2_100, "zone": "use1-az1", "put_requests": 2, "bytes": 1_000},
    {"kind": "checkpoint_write", "ts_ms": 2_200, "zone": "use1-az2"},
    {"kind": "agent_read", "ts_ms": 2_300, "zone": "use1-az2", "gets": 1, "bytes": 1_000, "bytes_from_cache": 0},
    {"kind": "notification", "ts_ms": 2_300, "zone": "use1-az1", "request_bytes": 300, "response_bytes": 100},
    {"kind": "passthrough_bytes", "ts_ms": 2_400, "zone": "use1-az1", "request_bytes": 5, "response_bytes": 5},
]


def fetched(zone, topic, partition, size, from_leader, broker_id=2):
    record = {"kind": "fetch_bytes", "ts_ms": 2_500, "zone": zone, "proxy_id": f"p-{zone}", "broker_id": broker_id,
              "broker_zone": "use1-az2", "topic": topic, "partition": partition, "bytes": size, "interval_ms": 10_000}
    if from_leader is not None:  # null is written as a missing key by older tools and as None by the writer
        record["from_leader"] = from_leader
    return record


def test_consumer_bytes_served_by_the_leader_by_partition_and_consumer_zone():
    got = produce_bytes_by_zone(RECORDS + [
        fetched("use1-az1", "t", 0, 4_000, True),
        fetched("use1-az1", "t", 0, 1_000, True),
        fetched("use1-az3", "t", 0, 500, True),
        fetched("use1-az2", "t", 1, 70, True),
        fetched("use1-az3", "t", 1, 9_000, False),  # a follower served it: the leader's place does not matter
        fetched("use1-az3", "t", 1, 30, None),  # the proxy knew no leader
        fetched("use1-az1", "", -1, 800, None),  # the proxy's overflow row: no partition
        fetched("use1-az1", "", -2, 600, None),  # unscanned answers
        fetched("use1-az1", "u", 4, 20, True),  # a topic only consumed
    ])
    assert got.fetch_bytes_by_zone == {("t", 0): {"use1-az1": 5_000, "use1-az3": 500}, ("t", 1): {"use1-az2": 70},
                                       ("u", 4): {"use1-az1": 20}}
    assert (got.leader_fetch_bytes, got.follower_fetch_bytes, got.unknown_fetch_bytes) == (5_590, 9_000, 30)
    assert got.topics == ["t", "u"]
    assert got.bytes_by_zone == produce_bytes_by_zone(RECORDS).bytes_by_zone  # produce sums unchanged
    assert got.window_s == 3.0  # the window is the produce records'


def test_bytes_by_partition_and_producer_zone_over_the_window():
    got = produce_bytes_by_zone(RECORDS)
    assert got.bytes_by_zone == {("t", 0): {"use1-az1": 1000, "use1-az2": 100}, ("t", 1): {"use1-az3": 50}}
    assert got.window_s == 3.0  # first ok batch at 1 s, last at 4 s
    assert (got.local_bytes, got.wal_bytes, got.direct_cross_bytes) == (100, 1000, 50)
    assert (got.put_requests, got.get_requests, got.notify_bytes) == (3, 1, 400)
    assert got.topics == ["t"]


def test_the_price_of_a_cross_zone_byte_blends_direct_and_the_audited_wal_cost():
    got = produce_bytes_by_zone(RECORDS)
    prices = leader_prices(got, Prices())
    # WAL: 3 PUTs x 5e-6 + 1 GET x 4e-7 + 400 notification bytes x 2e-11 = 1.54080e-5 USD for
    # 1,000 WAL bytes: 1.5408e-8 a byte (tiny objects: far dearer than the 2e-11 direct)
    assert prices.wal_usd_per_byte == pytest.approx(1.5408e-8)
    assert prices.wal_share == pytest.approx(1000 / 1050)
    assert prices.usd_per_cross_byte == pytest.approx(50 / 1050 * 2e-11 + 1000 / 1050 * 1.5408e-8)
    no_wal = leader_prices(produce_bytes_by_zone(RECORDS[3:4]), Prices())
    assert no_wal.wal_usd_per_byte is None and no_wal.usd_per_cross_byte == pytest.approx(2e-11)
    unknown = leader_prices(produce_bytes_by_zone(RECORDS[:6]), Prices())  # WAL bytes, no wal_flush records
    assert unknown.wal_usd_per_byte is None and unknown.usd_per_cross_byte == pytest.approx(2e-11)


def test_express_byte_charges_count_in_the_wal_cost():
    got = produce_bytes_by_zone(RECORDS)
    prices = leader_prices(got, Prices(), "express")
    # 3 x 1.13e-6 + 1 x 3e-8 + 1,000 B x 0.0032/2^30 + 1,000 B x 0.0006/2^30 + 400 x 2e-11
    want = 3.39e-6 + 3e-8 + 1000 * 0.0032 / 2**30 + 1000 * 0.0006 / 2**30 + 8e-9
    assert prices.wal_usd_per_byte == pytest.approx(want / 1000)


def test_reader_reads_gzip_lines_and_skips_in_progress_files(tmp_path):
    part = tmp_path / "date=2026-11-29" / "hour=01" / "zone=use1-az1"
    part.mkdir(parents=True)
    with gzip.open(part / "proxy-1-0.jsonl.gz", "wt") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in RECORDS[:2])
        fh.write("\n")
    (part / ".proxy-1-1.jsonl.gz.inprogress").write_text("not gzip")
    assert list(read_records(tmp_path)) == RECORDS[:2]
    with gzip.open(part / "proxy-1-2.jsonl.gz", "wt") as fh:
        fh.write("{not json\n")
    with pytest.raises(AuditInputError, match=r"proxy-1-2.jsonl.gz:1: not a JSON record"):
        list(read_records(tmp_path))
    with pytest.raises(AuditInputError, match="no \\*.jsonl.gz audit files"):
        list(read_records(tmp_path / "date=2026-11-29" / "hour=01" / "nothing"))
