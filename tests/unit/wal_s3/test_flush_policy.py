"""The cost-bounded flush rule and the storage-class settings (pure; numbers by hand)."""

from __future__ import annotations

import pytest

from core.configload import ConfigError
from core.prices import Prices
from wal_s3.config import WalConfig, directory_bucket_name
from wal_s3.flush_policy import (
    cost_seal_bytes,
    linger_due,
    producer_wait_s,
    request_cost_share,
    request_usd,
    seal_reason,
)

LIST = Prices()
STANDARD = LIST.store("standard")
EXPRESS = LIST.store("express")
MiB = 1024 * 1024


def test_request_usd_per_object():
    # Standard, 2 zones: PUT 5e-6 + 2 * (GET 4e-7 + checkpoint PUT 5e-6) = 1.58e-5
    assert request_usd(2, STANDARD) == pytest.approx(1.58e-5)
    # Express, 1 zone: 1.13e-6 + (3e-8 + 1.13e-6) = 2.29e-6
    assert request_usd(1, EXPRESS) == pytest.approx(2.29e-6)


@pytest.mark.parametrize("zones,store,share,expected", [
    # transfer avoided: 2 * $0.01 / 1e9 = 2e-11 per byte; at a 5 % share 1e-12 per byte.
    (1, "express", 0.05, 2_290_000),     # 2.29e-6 / 1e-12
    (2, "express", 0.05, 3_450_000),     # (1.13e-6 + 2 * 1.16e-6) / 1e-12
    (1, "standard", 0.05, 10_400_000),   # (5e-6 + 5.4e-6) / 1e-12: above the 8 MiB max_bytes
    (1, "express", 0.10, 1_145_000),     # 2.29e-6 / 2e-12
    (1, "express", 0.0, float("inf")),   # share 0: the bound is off
])
def test_cost_seal_bytes(zones, store, share, expected):
    assert cost_seal_bytes(zones, share, LIST.store(store), 0.01) == pytest.approx(expected)


def test_cost_seal_bytes_free_transfer_is_never_reached():
    assert cost_seal_bytes(1, 0.05, EXPRESS, 0.0) == float("inf")


def test_request_cost_share():
    # 2.29 MB at Express, 1 zone: 2.29e-6 / (2_290_000 * 2e-11 = 4.58e-5) = 0.05
    assert request_cost_share(2_290_000, 1, EXPRESS, 0.01) == pytest.approx(0.05)
    # 64 KiB at Standard, 1 zone: 1.04e-5 / (65536 * 2e-11 = 1.31072e-6) = 7.934
    assert request_cost_share(65_536, 1, STANDARD, 0.01) == pytest.approx(7.9346, rel=1e-4)
    assert request_cost_share(0, 1, STANDARD, 0.01) == float("inf")


@pytest.mark.parametrize("nbytes,age_s,expected", [
    (8 * MiB, 0.0, "size"),            # max_bytes reached, even when young
    (100, 0.020, "linger"),            # the latency bound: linger 20 ms
    (2_290_000, 0.001, "cost"),        # requests cost 5 % of the transfer they replace
    (2_289_999, 0.019, None),          # one byte short, a ms before linger: keep filling
    (0, 0.0, None),                    # nothing buffered
])
def test_seal_reason(nbytes, age_s, expected):
    assert seal_reason(nbytes, age_s, max_bytes=8 * MiB, linger_s=0.020, cost_bound_bytes=2_290_000) == expected


def test_linger_default_follows_the_storage_class():
    assert WalConfig().linger_ms == 250
    assert WalConfig(storage_class="express").linger_ms == 20
    assert WalConfig(storage_class="express", linger_ms=7).linger_ms == 7
    assert WalConfig().max_request_cost_share == 0.05


def test_counting_the_producers_wait_defaults_to_on_for_express_off_for_standard():
    assert WalConfig().linger_counts_producer_wait is False
    assert WalConfig(storage_class="express").linger_counts_producer_wait is True
    assert WalConfig(linger_counts_producer_wait=True).linger_counts_producer_wait is True
    assert WalConfig(storage_class="express", linger_counts_producer_wait=False).linger_counts_producer_wait is False


@pytest.mark.parametrize("kwargs,message", [
    ({"storage_class": "glacier"}, "wal.storage_class: one of standard, express"),
    ({"max_request_cost_share": 1.5}, "wal.max_request_cost_share: 0..1"),
    ({"storage_class": "express", "bucket": "My_Bucket"}, "wal.bucket: with storage_class express"),
    ({"storage_class": "express", "bucket": "wal--x-s3"}, "wal.bucket: with storage_class express"),
])
def test_bad_settings_are_refused(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        WalConfig(**kwargs)


def test_bucket_per_zone():
    standard = WalConfig(bucket="wal")
    express = WalConfig(bucket="wal", storage_class="express")
    assert standard.bucket_for("use1-az2") == "wal"
    assert express.bucket_for("use1-az2") == "wal--use1-az2--x-s3"
    assert express.owns_bucket("wal--use1-az2--x-s3", "use1-az2")
    assert not express.owns_bucket("wal--use1-az3--x-s3", "use1-az2")  # another zone's bucket
    assert not express.owns_bucket("wal", "use1-az2")
    assert not express.owns_bucket("wal--USE1-AZ2--x-s3", "USE1-AZ2")  # not an AZ id: refused, not raised


@pytest.mark.parametrize("base,az,message", [
    ("wal", "use1--az2", "an AZ id"),
    ("Wal", "use1-az2", "lowercase letters"),
    ("w" * 50, "use1-az2", "3..63 characters"),  # 50 + 2 + 8 + 6 = 66
])
def test_directory_bucket_name_rules(base, az, message):
    with pytest.raises(ValueError, match=message):
        directory_bucket_name(base, az)


NOW_MS = 1_700_000_000_000


@pytest.mark.parametrize(("first_timestamp_ms", "since_previous_s", "expected_s"), [
    (NOW_MS - 300, 0.5, 0.3),  # made 300 ms ago, previous request 500 ms ago: it waited 300 ms
    (NOW_MS - 300, 0.2, 0.2),  # made 300 ms ago, but the previous request came 200 ms ago: at most 200
    (NOW_MS - 86_400_000, 0.05, 0.05),  # a backfill's day-old timestamp: bounded by the previous request
    (NOW_MS - 300, None, 0.0),  # the partition's first request: nothing to trust it against
    (NOW_MS + 40, 0.5, 0.0),  # a producer clock 40 ms ahead of ours
    (-1, 0.5, 0.0),  # no timestamp in the batch
    (NOW_MS, 0.5, 0.0),  # made just now
])
def test_producer_wait_is_the_records_age_bounded_by_the_previous_request(first_timestamp_ms, since_previous_s,
                                                                          expected_s):
    assert producer_wait_s(NOW_MS, first_timestamp_ms, since_previous_s) == pytest.approx(expected_s)


@pytest.mark.parametrize(("arrival_s", "linger_s", "waited_s", "expected_s"), [
    (10.0, 0.25, 0.0, 10.25),  # nothing waited: the whole linger
    (10.0, 0.25, 0.1, 10.15),  # waited 100 ms in the producer: 150 ms left
    (10.0, 0.25, 0.25, 10.0),  # waited the whole linger: due at arrival
    (10.0, 0.25, 0.9, 10.0),  # waited longer: still never before arrival
    (10.0, 0.02, -0.5, 10.02),  # a negative wait counts as none
])
def test_linger_due_counts_from_when_the_oldest_record_was_made(arrival_s, linger_s, waited_s, expected_s):
    assert linger_due(arrival_s, linger_s, waited_s) == pytest.approx(expected_s)
