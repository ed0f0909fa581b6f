"""bench/zone_campaign.py and tests/system/reliability/zone_faults.py: when a zone's traffic is
back on the WAL path after an outage, read from hand-made audit records."""

from bench.zone_campaign import own_wal_return_s
from tests.system.reliability.zone_faults import wal_return_s

UP = 1_000_000  # the outage ended at this wall-clock ms


def batch(zone, leader_zone, ts_ms, route):
    return {"zone": zone, "leader_zone": leader_zone, "ts_ms": ts_ms, "route": route}


def test_own_return_per_leader_zone_first_wal_batch_after_the_link_came_back():
    batches = [
        batch("az1", "az2", UP - 500, "direct_cross"),  # during the cut: direct
        batch("az1", "az2", UP + 2_000, "direct_cross"),  # circuit still open
        batch("az1", "az2", UP + 11_500, "wal"),  # back: 11.5 s after
        batch("az1", "az2", UP + 12_000, "wal"),
        batch("az1", "az3", UP + 300, "direct_cross"),
        batch("az1", "az3", UP + 10_250, "wal"),  # back: 10.25 s after
        batch("az1", "az1", UP + 100, "local"),  # its own zone: not a return
        batch("az2", "az3", UP + 50, "wal"),  # another proxy: not counted
    ]
    assert own_wal_return_s(batches, "az1", UP) == {"az2": 11.5, "az3": 10.25}


def test_own_return_is_none_when_the_last_batch_still_went_direct():
    batches = [batch("az1", "az2", UP + 5_000, "wal"), batch("az1", "az2", UP + 6_000, "direct_cross"),
               batch("az1", "az3", UP - 10, "wal")]  # nothing after the return: not back
    assert own_wal_return_s(batches, "az1", UP) == {"az2": None, "az3": None}


def test_other_proxies_return_to_the_zone():
    batches = [batch("az2", "az1", UP + 4_400, "wal"), batch("az3", "az1", UP + 1_000, "direct_cross"),
               batch("az3", "az1", UP + 3_800, "wal"), batch("az1", "az2", UP + 100, "wal")]
    assert wal_return_s(batches, "az1", UP) == {"az2": 4.4, "az3": 3.8}
