"""The audit's savings and break-even priced in the WAL's storage class (S3 Express One Zone:
cheaper requests, per-byte upload and retrieval). Numbers written by hand from the input."""

from __future__ import annotations

import pytest

from core.framing import Framing
from core.prices import Prices
from spark_audit import jobs
from spark_audit._io import load, release
from tests.integration.spark_audit.conftest import rec, write_jsonl

EASY = Framing(path_mtu=1092)  # MSS 1040: stream factor 1 + 52/1040 = 1.05, a notification round trip + 208 bytes


def one_object(tmp_path):
    # One 1 MB batch az1 -> az2 in object k9 (1_000_100 bytes); az2's agent read it once and
    # checkpointed it twice (two "ok" answers): 1 + 2 PUTs, 1 GET; notification 300 + 100 bytes.
    write_jsonl(tmp_path / "in/date=2026-01-01/hour=00/zone=az1/p-1-1.jsonl.gz", [
        rec("produce_batch", "az1", leader_zone="az2", route="wal", bytes=1_000_000, records=10, wire_bytes=0,
            error_code=0, latency_ms=30.0, topic="t", partition=0),
        rec("wal_flush", "az1", key="k9", bytes=1_000_100, entries=1, zones="az2", put_requests=1, attempts=1,
            ok=True, reason="cost"),
        rec("notification", "az1", dest_zone="az2", key="k9", entries=1, request_bytes=300, response_bytes=100),
        rec("agent_read", "az2", source_zone="az1", key="k9", gets=1, cache_hits=0, cache_misses=1,
            bytes=1_000_000, bytes_from_cache=0),
        rec("agent_apply", "az2", version=3, source_zone="az1", key="k9", entries=1, status="ok"),
        rec("agent_apply", "az2", version=3, source_zone="az1", key="k9", entries=1, status="ok"),
    ])


def test_express_prices_the_requests_and_every_byte(spark, tmp_path):
    one_object(tmp_path)
    rolled, _ = load(spark, str(tmp_path / "in"), framing=EASY)
    try:
        (saving,) = jobs.savings(rolled, Prices(), EASY, storage_class="express").collect()
        (bucket,) = jobs.break_even(rolled, Prices(), EASY, storage_class="express").collect()
        (standard,) = jobs.break_even(rolled, Prices(), EASY).collect()
    finally:
        release(rolled)
    # On the wire with EASY framing (stream factor 1.05, a notification's round trip + 208 bytes):
    # the direct equivalent of the 1 MB batch is floor((1_000_000 + 41) * 1.05) = 1_050_043 bytes,
    # the notification 300 + 100 + 208 = 608.
    # Express per byte: upload 0.0032 / 2**30 = 2.98023e-12, retrieval 0.0006 / 2**30 = 5.58794e-13.
    # savings on bytes_wal = 1_000_000: PUTs 3 * 1.13e-6 + 2.98023e-6 = 6.37023e-6;
    # GET 3e-8 + 5.58794e-7 = 5.88794e-7; avoided (1_050_043 - 608) * 2e-11 = 2.098870e-5;
    # net 2.098870e-5 - 6.37023e-6 - 5.88794e-7 = 1.402967e-5.
    assert saving["s3_put_usd"] == pytest.approx(6.37023e-6, rel=1e-5)
    assert saving["s3_get_usd"] == pytest.approx(5.88794e-7, rel=1e-5)
    assert saving["net_savings_usd"] == pytest.approx(1.402967e-5, rel=1e-5)
    # break-even on object_bytes = 1_000_100: fixed 3 * 1.13e-6 + 3e-8 = 3.42e-6, per byte
    # 1_000_100 * 3.53903e-12 = 3.53938e-6 -> request_usd 6.95938e-6; avoided
    # ((1_000_100 + 41) * 1.05 - 608) * 2e-11 = 2.099080e-5; net 1.403142e-5. A payload byte
    # saves 1.05 * 2e-11 = 2.1e-11 on the wire, 1.746097e-11 beyond its Express charges: the
    # fixed part pays off at 3.42e-6 / 1.746097e-11 = 195_865.4 bytes, plus the notification's
    # wire bytes less the entry's overhead, (608 - 41 * 1.05) * 2e-11 / 1.746097e-11 = 647.1.
    assert bucket["request_usd"] == pytest.approx(6.95938e-6, rel=1e-5)
    assert bucket["net_savings_usd"] == pytest.approx(1.403142e-5, rel=1e-5)
    assert bucket["break_even_object_bytes"] == pytest.approx(196_512.5, rel=1e-5)
    # Standard, same input: requests 3 * 5e-6 + 4e-7 = 1.54e-5; break-even
    # (1.54e-5 / 2e-11 + 608) / 1.05 - 41 = 733_871.4.
    assert standard["request_usd"] == pytest.approx(1.54e-5, rel=1e-9)
    assert standard["break_even_object_bytes"] == pytest.approx(733_871.4, rel=1e-6)


def test_express_never_breaks_even_when_its_byte_charges_exceed_the_transfer(spark, tmp_path):
    one_object(tmp_path)
    rolled, _ = load(spark, str(tmp_path / "in"))
    try:
        # $0.001/GB each way: 2e-12 a byte crossing, less than Express's 3.539e-12 per byte.
        (bucket,) = jobs.break_even(rolled, Prices(cross_az_per_gb_each_way=0.001), storage_class="express").collect()
    finally:
        release(rolled)
    assert bucket["break_even_object_bytes"] is None
