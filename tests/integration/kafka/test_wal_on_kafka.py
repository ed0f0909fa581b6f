"""The whole sidecar in front of Apache Kafka: a proxy in use1-az1, agents in use1-az2 and
use1-az3, the WAL on moto, leaders in three zones by rack, and leaders moved mid-run the
way an operator moves them (reorder the replicas, preferred election)."""

from __future__ import annotations

import pytest

from tests.conftest import unique_name
from tests.integration.cluster.conftest import Delivery, produce, producer, read_back, wal_sidecars
from tests.integration.cluster.test_wal_on_cluster import batches
from tests.integration.kafka.conftest import ZONES, spread_leaders

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(300)]

PARTITIONS = 6


def test_wal_path_on_kafka_with_leaders_moved_by_reassignment(kafka, moto_server, tmp_path):
    check_wal_path_with_leaders_moved(kafka, moto_server, tmp_path)


def check_wal_path_with_leaders_moved(kafka, moto_server, tmp_path) -> None:
    bucket = unique_name("wal")
    moto_server.create_bucket(bucket)
    topic = unique_name("orders")
    leaders = spread_leaders(kafka, topic, PARTITIONS)
    first = [(i % PARTITIONS, i) for i in range(300)]
    second = [(i % PARTITIONS, i) for i in range(300, 600)]
    delivery = Delivery()
    with wal_sidecars(kafka, moto_server, bucket, tmp_path) as sidecars:
        p = producer(sidecars.proxy, **{"acks": "all"})
        produce(p, topic, first, delivery)
        assert p.flush(60) == 0
        for partition in range(PARTITIONS):  # every leader moves one zone on
            kafka.move_leader(topic, partition, (partition + 1) % 3 + 1)
        produce(p, topic, second, delivery)
        assert p.flush(60) == 0
    assert not delivery.failed, delivery.failed[:5]
    want: dict[int, list[int]] = {}
    for partition, value in first + second:
        want.setdefault(partition, []).append(value)
    assert delivery.acked == want
    assert read_back(kafka.bootstrap, topic, PARTITIONS, 600) == want  # once each, in order

    ok = [b for b in batches(sidecars.audit_dir) if b["error_code"] == 0]
    moved = {p: ZONES[(p + 1) % 3 + 1] for p in range(PARTITIONS)}
    for b in ok:  # every acknowledged batch went by its leader's zone at that time
        zone = b["leader_zone"]
        assert zone in (ZONES[leaders[b["partition"]]], moved[b["partition"]]), b
        assert b["route"] == ("local" if zone == ZONES[1] else "wal"), b
    assert {b["partition"] for b in ok if b["leader_zone"] == moved[b["partition"]]} == set(range(PARTITIONS))
    assert not [b for b in ok if b["route"] == "direct_cross"]  # no fallback across zones
