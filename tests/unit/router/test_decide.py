"""Decision tables for the router (pure functions only)."""

from __future__ import annotations

import pytest

from core.prices import Prices
from core.zones import leader_zone
from router.decide import (
    ObjectShape,
    Path,
    ZoneView,
    choose_cost,
    decide,
    direct_cost_per_byte,
    predicted_shape,
    wal_cost_per_byte,
)

LIST = Prices()  # PUT $0.005/1000, GET $0.0004/1000, $0.01/GB each way
MiB = 1024 * 1024


def test_direct_cost_is_two_cents_per_gb():
    # $0.01 out of zone A + $0.01 into zone B = $0.02 per 1e9 bytes.
    assert direct_cost_per_byte(LIST) == pytest.approx(2e-11)


def test_wal_cost_at_8_mib_is_under_a_tenth_of_direct():
    # PUT: 5e-6 / 8388608 = 5.9605e-13; per 4 MiB zone share a GET and a checkpoint PUT:
    # (4e-7 + 5e-6) / 4194304 = 1.28746e-12; total 1.88351e-12, 0.0942 of the 2e-11 direct.
    shape = ObjectShape(object_bytes=8 * MiB, zone_bytes=4 * MiB)
    assert wal_cost_per_byte(shape, LIST) == pytest.approx(1.88351e-12, rel=1e-4)
    assert wal_cost_per_byte(shape, LIST) / 2e-11 == pytest.approx(0.0942, abs=0.0001)


def test_wal_cost_at_64_kib_is_several_times_direct():
    # PUT 5e-6/65536 = 7.6294e-11; GET + checkpoint PUT 5.4e-6/65536 = 8.2397e-11
    # -> 1.58691e-10, 7.9x the 2e-11 direct.
    shape = ObjectShape(object_bytes=64 * 1024, zone_bytes=64 * 1024)
    assert wal_cost_per_byte(shape, LIST) == pytest.approx(1.58691e-10, rel=1e-4)


def test_empty_shape_never_chooses_wal():
    assert wal_cost_per_byte(ObjectShape(0, 0), LIST) == float("inf")


@pytest.mark.parametrize("zone_bps,total_bps,linger_ms,max_bytes,expected", [
    # 10 MB/s total for 250 ms = 2.5 MB per object; a zone with 4 of the 10 MB/s gets 1 MB of it.
    (4_000_000, 10_000_000, 250, 8 * MiB, ObjectShape(2_500_000, 1_000_000)),
    # 100 MB/s for 250 ms would be 25 MB: capped at max_bytes 8 MiB, zone share half of it.
    (50_000_000, 100_000_000, 250, 8 * MiB, ObjectShape(8 * MiB, 4 * MiB)),
    # No traffic: no object.
    (0, 0, 250, 8 * MiB, ObjectShape(0, 0)),
])
def test_predicted_shape(zone_bps, total_bps, linger_ms, max_bytes, expected):
    assert predicted_shape(zone_bps, total_bps, linger_ms, max_bytes) == expected


def test_cost_policy_thin_traffic_goes_direct_heavy_goes_wal():
    # 100 KB/s to one zone: objects of 25 KB -> (5e-6 + 5.4e-6)/25000 = 4.16e-10 >> 2e-11: direct.
    thin = predicted_shape(100_000, 100_000, 250, 8 * MiB)
    assert choose_cost(None, thin, LIST).path is Path.DIRECT_CROSS
    # 20 MB/s to one zone: 5 MB objects -> 1.04e-5/5e6 = 2.08e-12 << 2e-11: WAL.
    heavy = predicted_shape(20_000_000, 20_000_000, 250, 8 * MiB)
    assert choose_cost(None, heavy, LIST).path is Path.WAL


def test_cost_policy_hysteresis_keeps_the_current_path_near_break_even():
    # Break-even object (zone share = whole object): (5e-6 + 4e-7 + 5e-6)/S = 2e-11 -> S = 520,000 B.
    # At 560 KB the WAL costs 1.857e-11 (7% cheaper): not enough to leave direct (needs 20%),
    # not expensive enough to leave the WAL (needs 20% dearer).
    near = ObjectShape(560_000, 560_000)
    assert choose_cost(Path.DIRECT_CROSS, near, LIST).path is Path.DIRECT_CROSS
    assert choose_cost(Path.WAL, near, LIST).path is Path.WAL
    # At 400 KB the WAL costs 2.6e-11 (30% dearer): leave it.
    assert choose_cost(Path.WAL, ObjectShape(400_000, 400_000), LIST).path is Path.DIRECT_CROSS
    # At 800 KB it costs 1.3e-11 (35% cheaper): take it.
    assert choose_cost(Path.DIRECT_CROSS, ObjectShape(800_000, 800_000), LIST).path is Path.WAL


def test_free_transfer_never_chooses_wal():
    free = Prices(cross_az_per_gb_each_way=0.0)
    assert choose_cost(None, ObjectShape(8 * MiB, 8 * MiB), free).path is Path.DIRECT_CROSS


HEAVY = ObjectShape(8 * MiB, 4 * MiB)
THIN = ObjectShape(10_000, 10_000)


@pytest.mark.parametrize("policy,proxy_zone,leader,healthy,fallback,txn,shape,expected", [
    ("cost", "az1", "az1", True, "direct", False, HEAVY, Path.LOCAL),
    ("wal", "az1", "az1", True, "direct", False, HEAVY, Path.LOCAL),
    ("direct", "az1", "az2", True, "direct", False, HEAVY, Path.DIRECT_CROSS),
    ("wal", "az1", "az2", True, "direct", False, THIN, Path.WAL),
    ("cost", "az1", "az2", True, "direct", False, HEAVY, Path.WAL),
    ("cost", "az1", "az2", True, "direct", False, THIN, Path.DIRECT_CROSS),
    # Unhealthy zone: fallback direct, or keep the WAL path so the batch fails retriably.
    ("wal", "az1", "az2", False, "direct", False, HEAVY, Path.DIRECT_CROSS),
    ("cost", "az1", "az2", False, "direct", False, HEAVY, Path.DIRECT_CROSS),
    ("wal", "az1", "az2", False, "fail", False, HEAVY, Path.WAL),
    # Transactional batches never take the WAL.
    ("wal", "az1", "az2", True, "direct", True, HEAVY, Path.DIRECT_CROSS),
    # Unknown leader zone: forward directly.
    ("wal", "az1", None, True, "direct", False, HEAVY, Path.DIRECT_CROSS),
])
def test_decide_table(policy, proxy_zone, leader, healthy, fallback, txn, shape, expected):
    view = ZoneView(proxy_zone, leader, healthy, fallback)
    assert decide(policy, view, None, shape, LIST, transactional=txn).path is expected


@pytest.mark.parametrize("topic,partition,leader_id,rack,pz,bz,expected", [
    ("orders", 0, 1, "az1", {}, {}, "az1"),  # rack from Metadata
    ("orders", 0, 1, None, {}, {"1": "az2"}, "az2"),  # broker override
    ("orders", 0, 1, "az1", {}, {"1": "az2"}, "az2"),  # broker override beats rack
    ("orders", 4, 1, None, {"orders:*": "az3", "orders:4": "az1"}, {}, "az1"),  # exact partition wins
    ("orders", 5, 1, None, {"orders:*": "az3", "orders:4": "az1"}, {}, "az3"),
    ("orders", 5, 1, None, {"ord*:*": "az2", "orders:*": "az3"}, {}, "az3"),  # exact topic beats glob
    ("audit", 5, 1, None, {"ord*:*": "az2"}, {}, None),  # nothing says
    ("orders", 2, 1, None, {"*:2": "az2"}, {"1": "az1"}, "az2"),  # partition map beats broker map
])
def test_leader_zone(topic, partition, leader_id, rack, pz, bz, expected):
    assert leader_zone(topic, partition, leader_id, rack, pz, bz) == expected
