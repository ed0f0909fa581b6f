"""The audit's savings and break-even priced in the WAL's storage class (S3 Express One Zone:
cheaper requests, per-byte upload and retrieval). Numbers written by hand from the input."""

from __future__ import annotations

import pytest

from core.prices import Prices
from spark_audit import jobs
from spark_audit._io import load
from tests.spark_audit.conftest import rec, write_jsonl


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
    rolled, _ = load(spark, str(tmp_path / "in"))
    try:
        (saving,) = jobs.savings(rolled, Prices(), "express").collect()
        (bucket,) = jobs.break_even(rolled, Prices(), "express").collect()
        (standard,) = jobs.break_even(rolled, Prices()).collect()
    finally:
        rolled.unpersist()
    # Express per byte: upload 0.0032 / 2**30 = 2.98023e-12, retrieval 0.0006 / 2**30 = 5.58794e-13.
    # savings on bytes_wal = 1_000_000: PUTs 3 * 1.13e-6 + 2.98023e-6 = 6.37023e-6;
    # GET 3e-8 + 5.58794e-7 = 5.88794e-7; avoided (1_000_000 + 41 - 400) * 2e-11 = 1.999282e-5;
    # net 1.999282e-5 - 6.37023e-6 - 5.88794e-7 = 1.303379e-5.
    assert saving["s3_put_usd"] == pytest.approx(6.37023e-6, rel=1e-5)
    assert saving["s3_get_usd"] == pytest.approx(5.88794e-7, rel=1e-5)
    assert saving["net_savings_usd"] == pytest.approx(1.303379e-5, rel=1e-5)
    # break-even on object_bytes = 1_000_100: fixed 3 * 1.13e-6 + 3e-8 = 3.42e-6, per byte
    # 1_000_100 * 3.53903e-12 = 3.53938e-6 -> request_usd 6.95938e-6; avoided
    # (1_000_100 + 41 - 400) * 2e-11 = 1.999482e-5; net 1.303544e-5. Size where a byte's margin
    # (2e-11 - 3.53903e-12 = 1.646097e-11) pays the fixed part: 3.42e-6 / 1.646097e-11 = 207_764.1,
    # plus (400 - 41) notification bytes net * 2e-11 / 1.646097e-11 = 436.2 -> 208_200.3.
    assert bucket["request_usd"] == pytest.approx(6.95938e-6, rel=1e-5)
    assert bucket["net_savings_usd"] == pytest.approx(1.303544e-5, rel=1e-5)
    assert bucket["break_even_object_bytes"] == pytest.approx(208_200.3, rel=1e-6)
    # Standard, same input: requests 3 * 5e-6 + 4e-7 = 1.54e-5; break-even 1.54e-5 / 2e-11 + 359 = 770_359.
    assert standard["request_usd"] == pytest.approx(1.54e-5, rel=1e-9)
    assert standard["break_even_object_bytes"] == pytest.approx(770_359.0, rel=1e-9)


def test_express_never_breaks_even_when_its_byte_charges_exceed_the_transfer(spark, tmp_path):
    one_object(tmp_path)
    rolled, _ = load(spark, str(tmp_path / "in"))
    try:
        # $0.001/GB each way: 2e-12 a byte crossing, less than Express's 3.539e-12 per byte.
        (bucket,) = jobs.break_even(rolled, Prices(cross_az_per_gb_each_way=0.001), "express").collect()
    finally:
        rolled.unpersist()
    assert bucket["break_even_object_bytes"] is None
