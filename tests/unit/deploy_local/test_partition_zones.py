"""The leadership convention: partition p of every topic leads in zone p % len(zones)."""

from __future__ import annotations

import pytest

from deploy.local.leader_zones import leader_zone_of, partition_zones

ZONES = ("use1-az1", "use1-az2", "use1-az3")


@pytest.mark.parametrize(("partition", "zone"), [
    (0, "use1-az1"), (1, "use1-az2"), (2, "use1-az3"), (3, "use1-az1"), (5, "use1-az3"), (301, "use1-az2"),
])
def test_leader_zone_of(partition, zone):
    assert leader_zone_of(partition, ZONES) == zone


def test_leader_zone_of_rejects_negative_partition_and_no_zones():
    with pytest.raises(ValueError):
        leader_zone_of(-1, ZONES)
    with pytest.raises(ValueError):
        leader_zone_of(0, ())


def test_partition_zones_is_the_router_override_map():
    assert partition_zones(ZONES, 4) == {
        "*:0": "use1-az1", "*:1": "use1-az2", "*:2": "use1-az3", "*:3": "use1-az1",
    }
    assert partition_zones(ZONES[:2], 2, topic_glob="orders-*") == {"orders-*:0": "use1-az1", "orders-*:1": "use1-az2"}
