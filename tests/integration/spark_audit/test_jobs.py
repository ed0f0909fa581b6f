"""The audit metrics on hand-built records; every expected number is worked out in comments.

Prices are the defaults (router.config.Prices): a byte that crosses costs
2 * $0.01 / 1e9 = $2e-11; a PUT $0.005/1000 = $5e-6; a GET $0.0004/1000 = $4e-7.
Produce overhead per batch a direct produce would add: 41 bytes (framing.PRODUCE_OVERHEAD_BYTES).

Bytes on the wire (core.framing) for a path MTU of 1092 chosen to make the sums easy:
MSS = 1092 - 52 = 1040; a produce stream costs at least 1 + 52/1040 = 1.05 wire bytes per
byte (a data packet's headers per MSS, no ACKs); a notification round trip of Q and R bytes
(both < 1040) costs Q + R + 4 * 52 (one packet each way and one ACK each) = Q + R + 208.
"""

from __future__ import annotations

import pytest
from pyspark.sql import Row
from pyspark.testing import assertDataFrameEqual

from core.framing import Framing
from core.prices import Prices
from spark_audit import jobs
from spark_audit._io import InputError, load, read_lines, release
from tests.integration.spark_audit.conftest import H0_MS, HOUR_MS, rec, write_jsonl

H0 = "2026-01-01T00:00Z"
H1 = "2026-01-01T01:00Z"
MONEY = {"rtol": 1e-9, "atol": 1e-15}  # dollars here are 1e-8..1e-4: compare relatively
EASY = Framing(path_mtu=1092)  # stream factor 1.05, notification round trip + 208 bytes


def scenario() -> list[dict]:
    """Hour 0: az1 sends to az2 (WAL + one direct) and az3 (WAL) in one object k1, plus a
    local batch. Hour 1: az2 sends two tiny batches to az1 through object k2, which costs
    more in requests than it saves in transfer."""
    t1 = H0_MS + HOUR_MS + 5
    return [
        # hour 0, source az1
        rec("produce_batch", "az1", leader_zone="az2", route="wal", bytes=4_000_000, records=100, wire_bytes=0,
            error_code=0, latency_ms=50.0, topic="t", partition=0),
        rec("produce_batch", "az1", leader_zone="az2", route="wal", bytes=6_000_000, records=200, wire_bytes=0,
            error_code=0, latency_ms=70.0, topic="t", partition=1),
        rec("produce_batch", "az1", leader_zone="az2", route="direct_cross", bytes=1_000_000, records=10,
            wire_bytes=1_000_200, error_code=0, latency_ms=5.0, topic="t", partition=2),
        rec("produce_batch", "az1", leader_zone="az3", route="wal", bytes=2_000_000, records=50, wire_bytes=0,
            error_code=0, latency_ms=60.0, topic="t", partition=3),
        rec("produce_batch", "az1", leader_zone="az1", route="local", bytes=500_000, records=5, wire_bytes=0,
            error_code=0, latency_ms=2.0, topic="t", partition=4),
        rec("wal_flush", "az1", key="k1", bytes=12_000_200, entries=3, zones="az2,az3", put_requests=1,
            attempts=1, ok=True, reason="size"),
        rec("notification", "az1", dest_zone="az2", key="k1", entries=2, request_bytes=300, response_bytes=100),
        rec("notification", "az1", dest_zone="az3", key="k1", entries=1, request_bytes=200, response_bytes=50),
        rec("agent_read", "az2", source_zone="az1", key="k1", gets=2, cache_hits=3, cache_misses=1,
            bytes=10_000_000, bytes_from_cache=4_000_000),
        # a second read of the same share (a retried notification) served from the cache
        rec("agent_read", "az2", source_zone="az1", key="k1", gets=0, cache_hits=2, cache_misses=0,
            bytes=10_000_000, bytes_from_cache=10_000_000),
        rec("agent_read", "az3", source_zone="az1", key="k1", gets=1, cache_hits=0, cache_misses=2,
            bytes=2_000_000, bytes_from_cache=0),
        rec("metadata_lookup", "az1", topic="t", partition=0, leader_zone="az2", cache="hit"),
        rec("metadata_lookup", "az1", topic="t", partition=1, leader_zone="az2", cache="hit"),
        rec("metadata_lookup", "az1", topic="t", partition=2, leader_zone="az2", cache="hit"),
        rec("metadata_lookup", "az1", topic="t", partition=3, leader_zone="az3", cache="miss"),
        # hour 1, source az2: tiny objects
        rec("produce_batch", "az2", t1, leader_zone="az1", route="wal", bytes=1_000, records=1, wire_bytes=0,
            error_code=0, latency_ms=80.0, topic="t", partition=0),
        rec("produce_batch", "az2", t1, leader_zone="az1", route="wal", bytes=3_000, records=1, wire_bytes=0,
            error_code=0, latency_ms=120.0, topic="t", partition=1),
        rec("wal_flush", "az2", t1, key="k2", bytes=4_100, entries=2, zones="az1", put_requests=2, attempts=2,
            ok=True, reason="linger"),
        rec("notification", "az2", t1, dest_zone="az1", key="k2", entries=2, request_bytes=200, response_bytes=80),
        rec("agent_read", "az1", t1, source_zone="az2", key="k2", gets=1, cache_hits=0, cache_misses=1,
            bytes=4_000, bytes_from_cache=0),
        rec("metadata_lookup", "az2", t1, topic="t", partition=0, leader_zone="az1", cache="miss"),
    ]


@pytest.fixture(scope="module")
def scenario_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("audit")
    write_jsonl(root / "date=2026-01-01/hour=00/zone=az1/p-1-1.jsonl.gz", scenario())
    return str(root)


@pytest.fixture
def read_for(spark):
    """read_for(path, table): the input the runner gives `table`: the rollup, or for
    latency the lines (each read with only the columns the runner parses)."""
    frames = []

    def read(path: str, table: str):
        if table == "latency":
            return read_lines(spark, path, jobs.LATENCY_COLUMNS)[0]
        if table == "leader_traffic":
            return read_lines(spark, path, jobs.PLACEMENT_COLUMNS)[0]
        if table == "last_apply":
            return read_lines(spark, path, jobs.LAST_APPLY_COLUMNS)[0]
        rolled, _ = load(spark, path, framing=EASY)
        frames.append(rolled)
        return rolled

    yield read
    for df in frames:
        release(df)


SAVINGS_COLUMNS = [
    "hour", "source_zone", "leader_zone",
    "batches_local", "batches_direct_cross", "batches_wal",
    "records_local", "records_direct_cross", "records_wal",
    "bytes_local", "bytes_direct_cross", "bytes_wal",
    "direct_equivalent_bytes", "direct_cross_wire_bytes", "notification_bytes",
    "s3_put_requests", "s3_get_requests", "crossed_bytes", "cross_bytes_avoided",
    "direct_transfer_usd", "transfer_avoided_usd", "s3_put_usd", "s3_get_usd",
    "net_savings_usd", "savings_ratio",
]


def row(columns, *values):
    assert len(columns) == len(values)
    return Row(**dict(zip(columns, values)))


def test_savings_per_hour_and_zone_pair(scenario_dir, read_for):
    actual = jobs.savings(read_for(scenario_dir, "savings"), Prices(), EASY)
    assert actual.columns == SAVINGS_COLUMNS
    expected = [
        # az1 -> az1: one local batch; nothing would cross, nothing crossed, nothing saved.
        row(SAVINGS_COLUMNS, H0, "az1", "az1", 1, 0, 0, 5, 0, 0, 500_000, 0, 0,
            0, 0, 0, 0.0, 0, 0, 0, 0.0, 0.0, 0.0, 0.0, 0.0, None),
        # az1 -> az2: WAL (4_000_041 + 6_000_041) * 1.05 = 10_500_086.1; direct_cross
        # 1_000_041 * 1.05 = 1_050_043.05; direct equivalent floor(11_550_129.15) = 11_550_129,
        # of which direct_cross 11_550_129 - 10_500_086 = 1_050_043 (it crossed: no savings);
        # notification 300 + 100 + 208 = 608; crossed 1_050_651; avoided 10_499_478
        # (= the WAL batches' 10_500_086 - 608).
        # $: direct 11_550_129 * 2e-11 = 2.3100258e-4; avoided 2.0998956e-4;
        # PUTs: k1 names two zones, 1 PUT / 2 = 0.5 -> 2.5e-6; GETs 2 + 0 -> 8e-7;
        # net = 2.0998956e-4 - 3.3e-6 = 2.0668956e-4.
        row(SAVINGS_COLUMNS, H0, "az1", "az2", 0, 1, 2, 0, 10, 300, 0, 1_000_000, 10_000_000,
            11_550_129, 1_050_043, 608, 0.5, 2, 1_050_651, 10_499_478,
            2.3100258e-4, 2.0998956e-4, 2.5e-6, 8e-7, 2.0668956e-4, 2.0668956e-4 / 2.3100258e-4),
        # az1 -> az3: 2_000_041 * 1.05 = 2_100_043.05 -> 2_100_043; notification 200 + 50 + 208
        # = 458; avoided 2_099_585; $ direct 4.200086e-5, avoided 4.199170e-5; PUT 0.5 -> 2.5e-6;
        # GET 1 -> 4e-7; net = 4.199170e-5 - 2.9e-6 = 3.909170e-5.
        row(SAVINGS_COLUMNS, H0, "az1", "az3", 0, 0, 1, 0, 0, 50, 0, 0, 2_000_000,
            2_100_043, 0, 458, 0.5, 1, 458, 2_099_585,
            4.200086e-5, 4.199170e-5, 2.5e-6, 4e-7, 3.909170e-5, 3.909170e-5 / 4.200086e-5),
        # az2 -> az1, the WAL losing money: (1_041 + 3_041) * 1.05 = 4_286.1 -> 4_286;
        # notification 200 + 80 + 208 = 488; avoided 3_798 -> $7.596e-8 (direct $8.572e-8);
        # 2 PUTs (a retry) $1e-5; 1 GET $4e-7; net = 7.596e-8 - 1.04e-5 = -1.032404e-5.
        row(SAVINGS_COLUMNS, H1, "az2", "az1", 0, 0, 2, 0, 0, 2, 0, 0, 4_000,
            4_286, 0, 488, 2.0, 1, 488, 3_798,
            8.572e-8, 7.596e-8, 1e-5, 4e-7, -1.032404e-5, -1.032404e-5 / 8.572e-8),
    ]
    assertDataFrameEqual(actual, expected, checkRowOrder=True, **MONEY)


def test_savings_uses_prices_given(scenario_dir, read_for):
    # Cross-AZ at $0.05/GB each way: a crossing byte costs 1e-10. az1 -> az3 avoided
    # 2_099_585 bytes -> 2.099585e-4; PUT $0.01/1000 * 0.5 = 5e-6; GET $0.001/1000 * 1 = 1e-6.
    prices = Prices(s3_put_per_1000=0.01, s3_get_per_1000=0.001, cross_az_per_gb_each_way=0.05)
    actual = (jobs.savings(read_for(scenario_dir, "savings"), prices, EASY).filter("leader_zone = 'az3'")
              .select("transfer_avoided_usd", "s3_put_usd", "s3_get_usd", "net_savings_usd"))
    assertDataFrameEqual(actual, [Row(transfer_avoided_usd=2.099585e-4, s3_put_usd=5e-6, s3_get_usd=1e-6,
                                      net_savings_usd=2.099585e-4 - 6e-6)], **MONEY)


def test_direct_cross_batches_save_nothing(spark, tmp_path):
    # An older (v4) proxy wrote wire_bytes = the batch size for direct_cross batches; the
    # estimate of what they put across is the direct equivalent itself, whatever the record
    # says: 3 batches of 1_000 B -> (3_000 + 3 * 41) * 1.05 = 3_279.15 -> 3_279 both ways.
    batches = [rec("produce_batch", "az1", version=4, leader_zone="az2", route="direct_cross", bytes=1_000,
                   records=1, wire_bytes=1_000, error_code=0, latency_ms=1.0) for _ in range(3)]
    rolled, _ = load(spark, str(write_jsonl(tmp_path / "dc.jsonl.gz", batches)), framing=EASY)
    try:
        actual = jobs.savings(rolled, Prices(), EASY).select(
            "direct_equivalent_bytes", "direct_cross_wire_bytes", "crossed_bytes", "cross_bytes_avoided",
            "transfer_avoided_usd", "net_savings_usd")
        assertDataFrameEqual(actual, [Row(direct_equivalent_bytes=3_279, direct_cross_wire_bytes=3_279,
                                          crossed_bytes=3_279, cross_bytes_avoided=0, transfer_avoided_usd=0.0,
                                          net_savings_usd=0.0)], **MONEY)
    finally:
        release(rolled)


def test_the_products_other_s3_requests_are_billed(spark, tmp_path):
    # Proxy az1 at start: LIST the epoch markers (2 attempts: one failed, billed too), PUT one;
    # GC in az1: LIST 3, GET 4 manifests, HEAD 5 objects, DELETE 6 (free).
    requests = [("LIST", "epoch", 2), ("PUT", "epoch", 1), ("LIST", "gc", 3), ("GET", "gc", 4),
                ("HEAD", "gc", 5), ("DELETE", "gc", 6)]
    lines = [rec("s3_request", "az1", version=5, operation=op, purpose=purpose, requests=n)
             for op, purpose, n in requests]
    rolled, summary = load(spark, str(write_jsonl(tmp_path / "s3.jsonl.gz", lines)), framing=EASY)
    try:
        actual = jobs.savings(rolled, Prices(), EASY).select(
            "source_zone", "leader_zone", "s3_put_requests", "s3_get_requests", "s3_put_usd", "s3_get_usd",
            "net_savings_usd", "savings_ratio")
        # PUT-priced: LIST 2 + PUT 1 + LIST 3 = 6 -> 6 * 5e-6 = 3e-5; GET-priced: GET 4 + HEAD 5
        # = 9 -> 9 * 4e-7 = 3.6e-6; net = -3.36e-5; nothing would have crossed: no ratio.
        assertDataFrameEqual(actual, [Row(source_zone="az1", leader_zone=jobs.SHARED_ZONE, s3_put_requests=6.0,
                                          s3_get_requests=9, s3_put_usd=3e-5, s3_get_usd=3.6e-6,
                                          net_savings_usd=-3.36e-5, savings_ratio=None)], **MONEY)
    finally:
        release(rolled)
    assert summary.records_by_kind == {"s3_request": 6}


BREAK_EVEN_COLUMNS = [
    "size_bucket_bytes", "objects", "mean_object_bytes", "entries", "put_requests", "get_requests",
    "notification_bytes", "transfer_avoided_usd", "request_usd", "net_savings_usd",
    "net_savings_usd_per_object", "break_even_object_bytes",
]


def test_break_even_by_object_size(scenario_dir, read_for):
    actual = jobs.break_even(read_for(scenario_dir, "break_even"), Prices(), EASY)
    assert actual.columns == BREAK_EVEN_COLUMNS
    expected = [
        # k2: 4_100 bytes -> bucket 2^12 = 4_096. GETs 1, notification on the wire 488.
        # avoided = ((4_100 + 2*41) * 1.05 - 488) * 2e-11 = (4_391.1 - 488) * 2e-11 = 7.8062e-8;
        # requests = 2 * 5e-6 + 1 * 4e-7 = 1.04e-5; net = 7.8062e-8 - 1.04e-5 = -1.0321938e-5;
        # break-even: (s + 82) * 1.05 - 488 = 1.04e-5 / 2e-11 = 520_000
        # -> s = 520_488 / 1.05 - 82 = 495_702.857... - 82 = 495_620.857...
        row(BREAK_EVEN_COLUMNS, 4_096, 1, 4_100.0, 2, 2, 1, 488,
            7.8062e-8, 1.04e-5, -1.0321938e-5, -1.0321938e-5, 520_488 / 1.05 - 82),
        # k1: 12_000_200 bytes -> bucket 2^23 = 8_388_608. GETs 2 + 0 + 1 = 3; notifications
        # 608 + 458 = 1_066. avoided = ((12_000_200 + 3*41) * 1.05 - 1_066) * 2e-11
        # = (12_600_339.15 - 1_066) * 2e-11 = 2.51985463e-4; requests = 5e-6 + 3 * 4e-7 = 6.2e-6;
        # net = 2.45785463e-4; break-even = (310_000 + 1_066) / 1.05 - 123 = 296_253.333... - 123.
        row(BREAK_EVEN_COLUMNS, 8_388_608, 1, 12_000_200.0, 3, 1, 3, 1_066,
            2.51985463e-4, 6.2e-6, 2.45785463e-4, 2.45785463e-4, 311_066 / 1.05 - 123),
    ]
    assertDataFrameEqual(actual, expected, checkRowOrder=True, **MONEY)


def test_agent_cache_hit_rates(scenario_dir, read_for):
    columns = ["hour", "zone", "reads", "cache_hits", "cache_misses", "lookups", "hit_rate",
               "bytes", "bytes_from_cache", "byte_hit_rate", "gets"]
    actual = jobs.agent_cache(read_for(scenario_dir, "cache_agent"))
    assert actual.columns == columns
    expected = [
        # az2 hour 0: two reads, hits 3 + 2 = 5, misses 1 + 0 = 1 -> 5/6;
        # bytes 20_000_000, from cache 4_000_000 + 10_000_000 = 14_000_000 -> 0.7; GETs 2.
        row(columns, H0, "az2", 2, 5, 1, 6, 5 / 6, 20_000_000, 14_000_000, 0.7, 2),
        # az3 hour 0: one read, 0 hits of 2 lookups.
        row(columns, H0, "az3", 1, 0, 2, 2, 0.0, 2_000_000, 0, 0.0, 1),
        # az1 hour 1: one read, one miss.
        row(columns, H1, "az1", 1, 0, 1, 1, 0.0, 4_000, 0, 0.0, 1),
    ]
    assertDataFrameEqual(actual.orderBy("hour", "zone"), expected, checkRowOrder=True)


def test_metadata_cache_hit_rates(scenario_dir, read_for):
    columns = ["hour", "zone", "lookups", "hits", "misses", "hit_rate"]
    actual = jobs.metadata_cache(read_for(scenario_dir, "cache_metadata"))
    assert actual.columns == columns
    # az1 hour 0: hit, hit, hit, miss -> 3/4; az2 hour 1: one miss -> 0.
    assertDataFrameEqual(actual, [row(columns, H0, "az1", 4, 3, 1, 0.75), row(columns, H1, "az2", 1, 0, 1, 0.0)],
                         checkRowOrder=True)


def test_latency_percentiles(tmp_path, read_for):
    # local az1->az1: 20 good batches of 1..20 ms and one failed batch of 1000 ms (left out of
    # the percentiles). A percentile is the upper bound of the latency bucket (core.audit
    # LATENCY_BUCKETS_MS) holding the ceil(p * n)-th smallest: p50 -> 10th = 10 ms, bucket
    # (8, 10] -> 10; p95 -> 19th = 19 ms, bucket (15, 20] -> 20; p99 -> 20th = 20 ms -> 20.
    # mean (1+...+20)/20 = 10.5, max 20.
    # wal az2->az1: 80 and 120 ms: p50 -> 1st = 80, bucket (60, 80] -> 80; p95/p99 -> 2nd = 120,
    # bucket (100, 120] -> 120; mean 100.
    batches = [rec("produce_batch", "az1", leader_zone="az1", route="local", bytes=1, records=1,
                   error_code=0, latency_ms=float(ms)) for ms in range(20, 0, -1)]
    batches.append(rec("produce_batch", "az1", leader_zone="az1", route="local", bytes=1, records=1,
                       error_code=6, latency_ms=1000.0))
    batches += [rec("produce_batch", "az2", leader_zone="az1", route="wal", bytes=1, records=1,
                    error_code=0, latency_ms=ms) for ms in (120.0, 80.0)]
    df = read_for(str(write_jsonl(tmp_path / "lat.jsonl.gz", batches)), "latency")
    columns = ["route", "source_zone", "leader_zone", "batches", "errors", "p50_ms", "p95_ms", "p99_ms",
               "mean_ms", "max_ms"]
    actual = jobs.latency(df)
    assert actual.columns == columns
    assertDataFrameEqual(actual, [
        row(columns, "local", "az1", "az1", 21, 1, 10.0, 20.0, 20.0, 10.5, 20.0),
        row(columns, "wal", "az2", "az1", 2, 0, 80.0, 120.0, 120.0, 100.0, 120.0),
    ], checkRowOrder=True)


def test_leader_traffic_per_partition_source_zone_and_leader_zone(tmp_path, read_for):
    # t-0 led in az2: 2 batches of 100 bytes from az1 (at H0 and H0 + 1 h) and one of 7 from az2;
    # then its leader moved to az1: one batch of 50 from az1 at H0 + 2 h. A failed batch and
    # one without a partition are left out; a passthrough record is not produce traffic.
    def batch(zone, leader, size, ts_ms=H0_MS, **extra):
        fields = {"leader_zone": leader, "topic": "t", "partition": 0, "route": "wal", "bytes": size, "records": 1,
                  "error_code": 0, **extra}
        return rec("produce_batch", zone, ts_ms, 8, **fields)

    records = [batch("az1", "az2", 100), batch("az1", "az2", 100, H0_MS + HOUR_MS), batch("az2", "az2", 7),
               batch("az1", "az1", 50, H0_MS + 2 * HOUR_MS), batch("az1", "az2", 999, error_code=6),
               batch("az1", "az2", 999, partition=-1), rec("passthrough_bytes", "az1", api_key=1, requests=1)]
    df = read_for(str(write_jsonl(tmp_path / "placement.jsonl.gz", records)), "leader_traffic")
    columns = ["topic", "partition", "source_zone", "leader_zone", "batches", "bytes", "first_ts_ms", "last_ts_ms"]
    actual = jobs.leader_traffic(df)
    assert actual.columns == columns
    assertDataFrameEqual(actual, [
        row(columns, "t", 0, "az1", "az1", 1, 50, H0_MS + 2 * HOUR_MS, H0_MS + 2 * HOUR_MS),
        row(columns, "t", 0, "az1", "az2", 2, 200, H0_MS, H0_MS + HOUR_MS),
        row(columns, "t", 0, "az2", "az2", 1, 7, H0_MS, H0_MS),
    ], checkRowOrder=True)


def test_last_apply_compares_the_moved_partitions_in_equal_windows_before_and_after(tmp_path, read_for):
    # Plan p2 moved t-0 (az2 -> az1) and t-1 (az3 -> az1); its records at 2 h and 2 h 1 min.
    # An earlier plan p1 (t-5) is not the last. The produce audit runs from 0 to 3 h: after the
    # apply 59 min fit (2 h 1 min .. 3 h), before it 2 h; both windows are 59 min:
    # before = [1 h 1 min, 2 h), after = [2 h 1 min, 3 h].
    minute = 60_000

    def batch(partition, zone, leader, size, at_ms, error_code=0):
        return rec("produce_batch", zone, H0_MS + at_ms, 12, topic="t", partition=partition, leader_zone=leader,
                   route="direct_cross", bytes=size, records=1, error_code=error_code)

    def moved(partition, source, ts_ms, plan_id):
        return rec("leader_move", "", H0_MS + ts_ms, 12, topic="t", partition=partition, from_broker=2,
                   from_zone=source, to_broker=1, to_zone="az1", plan_id=plan_id)

    records = [
        batch(3, "az1", "az1", 1, 0),  # the audit's first batch; t-3 never moved
        batch(0, "az1", "az2", 1_000, 10 * minute),  # before the before-window
        batch(0, "az1", "az2", 400, 90 * minute), batch(0, "az2", "az2", 100, 90 * minute),  # before
        batch(3, "az2", "az1", 777, 90 * minute),  # not moved
        batch(0, "az1", "az2", 999, 2 * HOUR_MS + minute // 2),  # during the apply: in neither
        batch(0, "az1", "az1", 500, 150 * minute), batch(0, "az2", "az1", 50, 150 * minute),  # after
        batch(0, "az1", "az1", 999, 150 * minute, error_code=6),  # failed: no bytes on a leader
        batch(0, "az1", "az1", 10, 3 * HOUR_MS),  # the audit's last batch, at the after-window's end
        moved(5, "az2", 30 * minute, "p1"), moved(0, "az2", 2 * HOUR_MS, "p2"),
        moved(1, "az3", 2 * HOUR_MS + minute, "p2"),
    ]
    df = read_for(str(write_jsonl(tmp_path / "apply.jsonl.gz", records)), "last_apply")
    actual = jobs.last_apply(df)
    assert actual.columns == list(jobs.LAST_APPLY_OUTPUT)
    applied = ("p2", H0_MS + 2 * HOUR_MS, H0_MS + 2 * HOUR_MS + minute, 59 * minute)
    assertDataFrameEqual(actual, [
        row(actual.columns, *applied, "t", 0, "az2", "az1", "after", "az1", "az1", 2, 510),
        row(actual.columns, *applied, "t", 0, "az2", "az1", "after", "az2", "az1", 1, 50),
        row(actual.columns, *applied, "t", 0, "az2", "az1", "before", "az1", "az2", 1, 400),
        row(actual.columns, *applied, "t", 0, "az2", "az1", "before", "az2", "az2", 1, 100),
        row(actual.columns, *applied, "t", 1, "az3", "az1", None, None, None, None, None),  # no traffic
    ], checkRowOrder=True)
    # without leader_move records there is no apply to compare
    empty = read_for(str(write_jsonl(tmp_path / "none.jsonl.gz", records[:-3])), "last_apply")
    assert jobs.last_apply(empty).count() == 0


def kept_blocks(spark) -> int:
    """Partitions the session's block manager holds for cached or checkpointed RDDs."""
    return sum(info.numCachedPartitions() for info in spark.sparkContext._jsc.sc().getRDDStorageInfo())  # noqa: SLF001


def test_the_rollup_is_checkpointed_in_local_mode_and_release_frees_its_blocks(spark, tmp_path):
    path = str(write_jsonl(tmp_path / "in.jsonl.gz", [rec("metadata_lookup", "az1", cache="hit")] * 3))
    before = kept_blocks(spark)
    rolled, summary = load(spark, path)
    assert summary.records_by_kind == {"metadata_lookup": 3}
    # the tables' plans start at a leaf over the kept rows, not at the input's scan
    assert rolled._jdf.queryExecution().logical().getClass().getSimpleName() == "LogicalRDD"  # noqa: SLF001
    assert kept_blocks(spark) > before
    release(rolled)
    assert kept_blocks(spark) == before


def test_older_schema_version_still_reads(spark, tmp_path):
    # v1 records: no audit_drop.reason (added in v2), and a produce_batch written by an
    # older proxy without the timing breakdown or wire_bytes.
    old = [
        rec("produce_batch", "az1", version=1, leader_zone="az2", route="wal", bytes=10_000, records=3,
            latency_ms=40.0),
        rec("audit_drop", "az1", version=1, dropped_kind="produce_batch", dropped=7),
        rec("audit_drop", "az1", version=2, dropped_kind="wal_flush", dropped=1, reason="invalid"),
    ]
    df, summary = load(spark, str(write_jsonl(tmp_path / "old.jsonl.gz", old)))
    assert summary.versions == {1: 2, 2: 1}
    assert summary.corrupt_lines == 0
    # 10_000 + 41 = 10_041 bytes would have crossed, on the wire at the default path MTU 9001
    # (MSS 8949): 10_041 * (1 + 52/8949) = 10_041 + 522_132/8949 = 10_041 + 58.35 -> 10_099;
    # nothing crossed (no notification record).
    assertDataFrameEqual(
        jobs.savings(df, Prices()).select("bytes_wal", "direct_equivalent_bytes", "cross_bytes_avoided"),
        [Row(bytes_wal=10_000, direct_equivalent_bytes=10_099, cross_bytes_avoided=10_099)])
    # A v1 drop record means the queue was full.
    assertDataFrameEqual(jobs.writer_drops(df), [
        Row(zone="az1", dropped_kind="produce_batch", reason="queue_full", dropped=7),
        Row(zone="az1", dropped_kind="wal_flush", reason="invalid", dropped=1),
    ], checkRowOrder=True)
    release(df)


def test_corrupt_lines_are_counted_not_dropped(spark, tmp_path):
    good = [rec("metadata_lookup", "az1", topic="t", partition=0, leader_zone="az1", cache="hit")] * 3
    bad = (
        "this is not json",
        '{"schema_version":2,"kind":"produce_batch","ts_ms":1,"zone":"az1","bytes":"lots"}',  # wrong type
        '{"schema_version":2,"kind":"produce_batch","ts_ms":1,"zone":"az1","bytes":12.5}',  # fraction in a long
        '{"schema_version":2,"kind":"mystery","ts_ms":1,"zone":"az1"}',  # unknown kind
        '{"schema_version":99,"kind":"metadata_lookup","ts_ms":1,"zone":"az1","cache":"hit","new_field":1}',
    )
    df, summary = load(spark, str(write_jsonl(tmp_path / "mixed.jsonl.gz", good, bad)))
    assert (summary.lines, summary.corrupt_lines, summary.unknown_kind_lines) == (8, 3, 1)
    assert summary.records_by_kind == {"metadata_lookup": 4}
    assert summary.newer_version_lines == 1
    assert summary.corrupt_samples[0] == "this is not json"
    message = summary.message()
    assert "corrupt lines (not JSON, or a value of the wrong type): 3" in message
    assert "lines without a known kind: 1" in message
    assert "1 records are from a newer schema" in message
    release(df)


def test_missing_and_empty_input_are_clear_errors(spark, tmp_path):
    from spark_audit._io import resolve_input

    with pytest.raises(InputError, match="no such file or directory"):
        resolve_input(spark, str(tmp_path / "nowhere"), None, tmp_path)
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="no audit files found"):
        load(spark, str(tmp_path / "empty"))
    with pytest.raises(InputError, match=r"no valid audit records[\s\S]*corrupt lines \(not JSON, or a value of the wrong type\): 2"):
        load(spark, str(write_jsonl(tmp_path / "junk.jsonl.gz", [], ("junk", "more junk"))))


def test_checkpoint_puts_of_the_agents_are_billed(spark, tmp_path):
    # One 1 MB batch az1 -> az2 through object k9. The agent of az2 answered "ok" twice (a
    # re-sent notification) and "entry_errors" once: each "ok" wrote the object's GC
    # checkpoint, a billed PUT; the failed answer wrote none.
    write_jsonl(tmp_path / "in/date=2026-01-01/hour=00/zone=az1/p-1-1.jsonl.gz", [
        rec("produce_batch", "az1", leader_zone="az2", route="wal", bytes=1_000_000, records=10, wire_bytes=0,
            error_code=0, latency_ms=30.0, topic="t", partition=0),
        rec("wal_flush", "az1", key="k9", bytes=1_000_100, entries=1, zones="az2", put_requests=1, attempts=1,
            ok=True, reason="linger"),
        rec("notification", "az1", dest_zone="az2", key="k9", entries=1, request_bytes=300, response_bytes=100),
        rec("agent_read", "az2", source_zone="az1", key="k9", gets=1, cache_hits=0, cache_misses=1,
            bytes=1_000_000, bytes_from_cache=0),
        rec("agent_apply", "az2", version=3, source_zone="az1", key="k9", entries=1, status="ok"),
        rec("agent_apply", "az2", version=3, source_zone="az1", key="k9", entries=1, status="ok"),
        rec("agent_apply", "az2", version=3, source_zone="az1", key="k9", entries=1, status="entry_errors"),
    ])
    rolled, _ = load(spark, str(tmp_path / "in"))
    try:
        (saving,) = jobs.savings(rolled, Prices()).collect()
        (bucket,) = jobs.break_even(rolled, Prices()).collect()
    finally:
        release(rolled)
    # PUTs: the WAL object's 1 + 2 checkpoints = 3 -> 3 * 5e-6 = 1.5e-5; 1 GET -> 4e-7.
    # On the wire at the default MTU 9001 (MSS 8949): direct 1_000_041 * (1 + 52/8949)
    # = 1_000_041 + 5_810.94 -> 1_005_851; notification 300 + 100 + 4 * 52 = 608;
    # avoided 1_005_243 bytes -> 2.010486e-5; net = 2.010486e-5 - 1.5e-5 - 4e-7 = 4.70486e-6.
    assert (saving["s3_put_requests"], saving["s3_get_requests"]) == (3.0, 1)
    assert saving["s3_put_usd"] == pytest.approx(1.5e-5, rel=1e-9)
    assert saving["net_savings_usd"] == pytest.approx(4.70486e-6, rel=1e-9)
    assert (bucket["put_requests"], bucket["get_requests"]) == (3, 1)


def test_checkpoint_manifests_are_billed_once_and_shared_among_their_objects(spark, tmp_path):
    # Schema v4: the agent of az3 applied objects from az1 and from az2 and named both in one
    # manifest (one PUT, half per object and per zone pair). Its ok agent_apply records bill
    # nothing of their own any more.
    k1, k2 = "wal/0a1b/wal/az1/p1/0000000001/000000000000", "wal/ffff/wal/az2/p7/0000000003/000000000009"
    write_jsonl(tmp_path / "in/date=2026-01-01/hour=00/zone=az1/p-1-1.jsonl.gz", [
        rec("produce_batch", "az1", leader_zone="az3", route="wal", bytes=1_000_000, records=10, wire_bytes=0,
            error_code=0, latency_ms=30.0, topic="t", partition=0),
        rec("produce_batch", "az2", leader_zone="az3", route="wal", bytes=1_000_000, records=10, wire_bytes=0,
            error_code=0, latency_ms=30.0, topic="t", partition=1),
        rec("wal_flush", "az1", key=k1, bytes=1_000_100, entries=1, zones="az3", put_requests=1, attempts=1,
            ok=True, reason="linger"),
        rec("wal_flush", "az2", key=k2, bytes=1_000_100, entries=1, zones="az3", put_requests=1, attempts=1,
            ok=True, reason="linger"),
        rec("agent_apply", "az3", version=4, source_zone="az1", key=k1, entries=1, status="ok"),
        rec("agent_apply", "az3", version=4, source_zone="az2", key=k2, entries=1, status="ok"),
        rec("checkpoint_write", "az3", version=4, keys=2, wal_keys=f"{k1},{k2}", put_ms=5.0, status="ok"),
    ])
    rolled, summary = load(spark, str(tmp_path / "in"))
    try:
        savings = {(r["source_zone"], r["leader_zone"]): r for r in jobs.savings(rolled, Prices()).collect()}
        (bucket,) = jobs.break_even(rolled, Prices()).collect()
    finally:
        release(rolled)
    # Each pair: its WAL PUT 1 + half the manifest 0.5 = 1.5 PUTs.
    assert {pair: r["s3_put_requests"] for pair, r in savings.items()} == {("az1", "az3"): 1.5, ("az2", "az3"): 1.5}
    assert (bucket["objects"], bucket["put_requests"]) == (2, 3.0)  # 2 WAL PUTs + 1 manifest
    assert summary.records_by_kind["checkpoint_write"] == 1  # one line, though it names two objects


def test_consumer_bytes_by_zone_pair_with_the_transfer_cost_and_the_fetches_by_who_served_them(spark, tmp_path):
    # Schema v7 passthrough_bytes records (requests the proxy forwarded to brokers):
    # proxy az1 fetched from a broker in az2 over two intervals, from one in its own zone,
    # and asked a broker whose zone it did not know (the bootstrap listener); proxy az2
    # sent a JoinGroup to az3. A produce_batch line must not count. The same input holds
    # schema v14 fetch_bytes records (one load: the suite's Spark time is tight).
    def pt(zone, broker_zone, api_key, requests, request_bytes, response_bytes):
        return rec("passthrough_bytes", zone, version=7, proxy_id=f"p-{zone}", broker_id=1, broker_zone=broker_zone,
                   api_key=api_key, requests=requests, request_bytes=request_bytes, response_bytes=response_bytes,
                   interval_ms=10_000)

    lines = [pt("az1", "az2", 1, 3, 100, 10_000), pt("az1", "az2", 1, 4, 200, 20_000), pt("az1", "az1", 1, 2, 50, 950),
             pt("az1", "", 2, 1, 40, 60), pt("az2", "az3", 11, 1, 300, 100),
             rec("produce_batch", "az1", leader_zone="az2", route="direct_cross", bytes=1_000, records=1,
                 wire_bytes=1_041, error_code=0, latency_ms=1.0)]

    def fb(zone, broker_zone, partition, size, from_leader):
        fields = {"from_leader": from_leader} if from_leader is not None else {}
        return rec("fetch_bytes", zone, version=14, proxy_id=f"p-{zone}", broker_id=2, broker_zone=broker_zone,
                   topic="orders", partition=partition, bytes=size, interval_ms=10_000, **fields)

    lines += [fb("az1", "az2", 0, 7_000, True), fb("az1", "az2", 1, 3_000, True), fb("az1", "az2", 2, 500, False),
              fb("az1", "az1", 0, 900, True), fb("az1", "", -2, 64, None)]
    rolled, summary = load(spark, str(write_jsonl(tmp_path / "pt.jsonl.gz", lines)), framing=EASY)
    try:
        actual = jobs.passthrough_bytes(rolled, Prices(), EASY)
        # wire = (request + response) * 1.05; cross-zone: wire * 2e-11 dollars.
        # az1->az2 Fetch: 300 + 30_000 = 30_300 -> 31_815 B -> $6.363e-7
        # az1->az1 Fetch: 50 + 950 = 1_000 -> 1_050 B, in-zone: $0
        # az1->? ListOffsets: 40 + 60 = 100 -> 105 B, zone unknown: no cost
        # az2->az3 JoinGroup: 300 + 100 = 400 -> 420 B -> $8.4e-9
        assertDataFrameEqual(actual, [
            Row(zone="az1", broker_zone="", api_key=2, api="ListOffsets", requests=1, request_bytes=40,
                response_bytes=60, wire_bytes=105, cross_zone=None, transfer_usd=None),
            Row(zone="az1", broker_zone="az1", api_key=1, api="Fetch", requests=2, request_bytes=50,
                response_bytes=950, wire_bytes=1_050, cross_zone=False, transfer_usd=0.0),
            Row(zone="az1", broker_zone="az2", api_key=1, api="Fetch", requests=7, request_bytes=300,
                response_bytes=30_000, wire_bytes=31_815, cross_zone=True, transfer_usd=6.363e-7),
            Row(zone="az2", broker_zone="az3", api_key=11, api="JoinGroup", requests=1, request_bytes=300,
                response_bytes=100, wire_bytes=420, cross_zone=True, transfer_usd=8.4e-9),
        ], checkRowOrder=True, **MONEY)
        # fetch_bytes: az1 from the az2 leader 7,000 + 3,000; from an az2 follower 500; from the
        # az1 leader 900; an unscanned answer (partition -2, no broker zone) 64 under unknown
        assertDataFrameEqual(jobs.fetch_bytes(rolled), [
            Row(zone="az1", broker_zone="", served_by="unknown", bytes=64, cross_zone=None),
            Row(zone="az1", broker_zone="az1", served_by="leader", bytes=900, cross_zone=False),
            Row(zone="az1", broker_zone="az2", served_by="follower", bytes=500, cross_zone=True),
            Row(zone="az1", broker_zone="az2", served_by="leader", bytes=10_000, cross_zone=True),
        ], checkRowOrder=True)
    finally:
        release(rolled)
    assert summary.records_by_kind == {"passthrough_bytes": 5, "produce_batch": 1, "fetch_bytes": 5}


def test_zone_trouble_per_minute_with_the_fallbacks_transfer_and_the_unread_objects_puts(spark, tmp_path):
    # Proxy az1, leaders in az2 and az3. Minute 0 (00:00): az2's path unhealthy: two batches
    # fell back across (1,000,000 and 959 bytes), one failed on the WAL route; object k9 held
    # entries for az2 and az3, only az3's agent read it. Minute 3 (00:03): one more fallback
    # of 459 bytes. Not trouble: a WAL batch that succeeded, a direct_cross batch the cost
    # policy chose, a local batch, object k1 read by its one zone.
    m3 = H0_MS + 3 * 60_000 + 10
    fallback = "zone unhealthy, fallback direct"
    lines = [
        rec("produce_batch", "az1", H0_MS + 5_000, leader_zone="az2", route="direct_cross", reason=fallback,
            bytes=1_000_000, records=10, error_code=0),
        rec("produce_batch", "az1", H0_MS + 6_000, leader_zone="az2", route="direct_cross", reason=fallback,
            bytes=959, records=1, error_code=0),
        rec("produce_batch", "az1", H0_MS + 4_000, leader_zone="az2", route="wal", reason="policy wal",
            bytes=5_000, records=5, error_code=7),
        rec("produce_batch", "az1", m3, leader_zone="az2", route="direct_cross", reason=fallback,
            bytes=459, records=1, error_code=0),
        rec("produce_batch", "az1", H0_MS + 1_000, leader_zone="az3", route="wal", reason="policy wal",
            bytes=7_000, records=7, error_code=0),
        rec("produce_batch", "az1", H0_MS + 1_000, leader_zone="az3", route="direct_cross",
            reason="cost: objects too small", bytes=300, records=1, error_code=0),
        rec("produce_batch", "az1", H0_MS + 1_000, leader_zone="az1", route="local", reason="same zone",
            bytes=300, records=1, error_code=0),
        rec("wal_flush", "az1", H0_MS + 2_000, key="k9", bytes=12_000, entries=2, zones="az2,az3", put_requests=1,
            attempts=1, ok=True, reason="linger"),
        rec("agent_read", "az3", H0_MS + 2_100, source_zone="az1", key="k9", gets=1, bytes=7_000),
        rec("wal_flush", "az1", H0_MS + 2_000, key="k1", bytes=7_000, entries=1, zones="az3", put_requests=1,
            attempts=1, ok=True, reason="linger"),
        rec("agent_read", "az3", H0_MS + 2_100, source_zone="az1", key="k1", gets=1, bytes=7_000),
    ]
    rolled, _summary = load(spark, str(write_jsonl(tmp_path / "trouble.jsonl.gz", lines)), framing=EASY)
    try:
        actual = jobs.zone_trouble(rolled, Prices(), EASY)
        # minute 0: fallback wire = floor((1,000,000 + 959 + 2 x 41) x 1.05) = floor(1,051,093.05)
        # = 1,051,093 B -> x 2e-11 = $2.102186e-5; k9's PUT shared by two zones: 0.5 PUT unread
        # for az2 -> x $5e-6 = $2.5e-6; cost $2.352186e-5.
        # minute 3: floor((459 + 41) x 1.05) = 525 B -> $1.05e-8.
        assertDataFrameEqual(actual, [
            Row(minute="2026-01-01T00:00Z", minute_ms=H0_MS, source_zone="az1", dest_zone="az2",
                fallback_batches=2, fallback_bytes=1_000_959, fallback_wire_bytes=1_051_093, failed_wal_batches=1,
                unread_objects=1, unread_put_requests=0.5, fallback_transfer_usd=2.102186e-5,
                unread_put_usd=2.5e-6, cost_usd=2.352186e-5),
            Row(minute="2026-01-01T00:03Z", minute_ms=H0_MS + 180_000, source_zone="az1", dest_zone="az2",
                fallback_batches=1, fallback_bytes=459, fallback_wire_bytes=525, failed_wal_batches=0,
                unread_objects=0, unread_put_requests=0.0, fallback_transfer_usd=1.05e-8,
                unread_put_usd=0.0, cost_usd=1.05e-8),
        ], checkRowOrder=True, **MONEY)
    finally:
        release(rolled)
