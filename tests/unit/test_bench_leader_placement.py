"""bench/bench_leader_placement.py and the skewed workload it runs (pure parts).

Expected values written by hand: the skewed topics weigh use1-az1 8 (hot) + 2 (even) = 10,
the other zones 1 + 2 = 3 each, so 16,000 bytes split 10,000 / 3,000 / 3,000; costs at
list prices ($0.02 per crossing GB, S3 Standard PUT $0.005 and GET $0.0004 per 1,000).
"""

from __future__ import annotations

from collections import Counter

import pytest

from bench.bench_leader_placement import SKEWED_TOPICS, Variant, format_table, renamed, skewed_workload, worst_latency
from bench.workload import topic_rounds
from core.prices import Prices
from deploy.local.scenario import TopicSpec, Workload

ZONES = ("use1-az1", "use1-az2", "use1-az3")


def test_the_skewed_workload_splits_bytes_by_the_zones_summed_weights():
    w = Workload(total_bytes=16_000, record_bytes=100, topics=SKEWED_TOPICS)
    assert w.zone_bytes(3) == [10_000, 3_000, 3_000]
    assert skewed_workload(0.016, 100) == w


def test_without_weights_every_zone_gets_a_third():
    assert Workload(total_bytes=3_001, record_bytes=100).zone_bytes(3) == [1_000, 1_000, 1_000]


def test_each_producer_sends_its_zone_weights_worth_of_records_to_each_topic():
    spec = Workload(total_bytes=16_000, record_bytes=100, topics=SKEWED_TOPICS).spec(ZONES, ["hot-x", "even-x"])
    assert spec["topics"][0]["zone_weights"] == {"use1-az1": 8, "use1-az2": 1, "use1-az3": 1}
    assert topic_rounds(spec["topics"], "use1-az1") == [0] * 8 + [1, 1]
    assert topic_rounds(spec["topics"], "use1-az2") == [0, 1, 1]
    sent = Counter()
    for zone, records in zip(ZONES, (100, 30, 30), strict=True):  # 10,000 / 3,000 / 3,000 bytes of 100-byte records
        rounds = topic_rounds(spec["topics"], zone)
        sent.update((rounds[n % len(rounds)], zone) for n in range(records))
    assert sent == {(0, "use1-az1"): 80, (0, "use1-az2"): 10, (0, "use1-az3"): 10,
                    (1, "use1-az1"): 20, (1, "use1-az2"): 20, (1, "use1-az3"): 20}
    assert topic_rounds([{"name": "a"}, {"name": "b"}], "use1-az1") == [0, 1]  # no weights: round robin


@pytest.mark.parametrize("topics, zones, message", [
    ((TopicSpec("a", 3, False, zone_weights=(1, 1)), TopicSpec("b", 3, False, zone_weights=(1, 1, 1))), 3,
     "same zones"),
    ((TopicSpec("a", 3, False, zone_weights=(1, -1, 1)),), 3, ">= 0"),
])
def test_weights_that_contradict_themselves_are_refused(topics, zones, message):
    with pytest.raises(ValueError, match=message):
        Workload(total_bytes=1_000, record_bytes=100, topics=topics)


def test_weights_for_another_number_of_zones_or_all_zero_are_refused():
    with pytest.raises(ValueError, match="must name 2 zones"):
        Workload(total_bytes=1_000, record_bytes=100, topics=SKEWED_TOPICS).zone_bytes(2)
    with pytest.raises(ValueError, match="nobody produces"):
        Workload(total_bytes=1_000, record_bytes=100,
                 topics=(TopicSpec("a", 3, False, zone_weights=(0, 0, 0)),)).zone_bytes(3)


def test_the_table_puts_each_run_beside_the_direct_one():
    table = format_table([
        Variant("(a) direct", 10_000_000, p50_ms=2.0, p99_ms=10.0),
        Variant("(b) WAL route", 1_000_000, put_requests=1_000, get_requests=2_000, p50_ms=60.0, p99_ms=120.0),
        Variant("(c) leaders moved", 2_500_000, p50_ms=2.0, p99_ms=12.0, moves=4),
        Variant("(x) unmetered", None),
    ], Prices())
    rows = table.splitlines()
    assert rows[0].split()[:3] == ["run", "moves", "cross-zone"]
    assert rows[2][:18].strip() == "(a) direct"
    assert rows[2][18:].split() == ["0", "10.00", "1.00", "0", "0", "2.0", "1.00", "10.0", "1.00", "0.000200",
                                    "1.00", "+0.000000"]
    # 0.00002 transfer + 0.005 PUT + 0.0008 GET = 0.00582; 0.0002 - 0.00582 = -0.00562
    assert rows[3][18:].split() == ["0", "1.00", "0.10", "1000", "2000", "60.0", "30.00", "120.0", "12.00",
                                    "0.005820", "29.10", "-0.005620"]
    assert rows[4][18:].split() == ["4", "2.50", "0.25", "0", "0", "2.0", "1.00", "12.0", "1.20", "0.000050",
                                    "0.25", "+0.000150"]
    assert rows[5][18:].split() == ["0", "-", "-", "0", "0", "-", "-", "-", "-", "-", "-", "-"]


def test_the_worst_producer_gives_the_latency():
    summaries = [{"latency": {"lat_p50_ms": 2.0, "lat_p99_ms": 9.0}}, {"latency": {"lat_p50_ms": 3.0, "lat_p99_ms": 5.0}},
                 {"latency": {}}]
    assert worst_latency(summaries) == (3.0, 9.0)
    assert worst_latency([{"latency": {}}]) == (None, None)


def test_the_plan_reads_the_wal_runs_traffic_under_the_new_topic_names():
    records = [{"kind": "produce_batch", "topic": "hot-b", "partition": 0, "bytes": 5},
               {"kind": "wal_flush", "put_requests": 1},
               {"kind": "produce_batch", "topic": "other", "partition": 0, "bytes": 7}]
    assert list(renamed(records, {"hot-b": "hot-c"})) == [
        {"kind": "produce_batch", "topic": "hot-c", "partition": 0, "bytes": 5}, {"kind": "wal_flush", "put_requests": 1}]
