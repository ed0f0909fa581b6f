"""The whole sidecar on a three-broker cluster: a proxy in use1-az1, agents in use1-az2 and
use1-az3, the WAL on moto, leaders in three zones by rack, and leaders that move between
zones mid-run (B3: an agent whose partition's leader came back must append, not refuse).
"""

from __future__ import annotations

import gzip
import json

import pytest

from tests.cluster.conftest import ZONES, Delivery, produce, producer, read_back, spread_leaders, wal_sidecars
from tests.conftest import unique_name

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(240)]

PARTITIONS = 12


def batches(audit_dir) -> list[dict]:
    out = []
    for path in audit_dir.rglob("*.jsonl.gz"):
        with gzip.open(path, "rt") as f:
            out.extend(r for r in map(json.loads, f) if r["kind"] == "produce_batch")
    return out


def test_wal_path_with_leaders_moving_between_zones(cluster, moto_server, tmp_path):
    bucket = unique_name("wal")
    moto_server.create_bucket(bucket)
    leaders = spread_leaders(cluster, "orders", PARTITIONS)
    first = [(i % PARTITIONS, i) for i in range(300)]
    second = [(i % PARTITIONS, i) for i in range(300, 600)]
    delivery = Delivery()
    with wal_sidecars(cluster, moto_server, bucket, tmp_path) as sidecars:
        p = producer(sidecars.proxy)
        produce(p, "orders", first, delivery)
        assert p.flush(60) == 0
        for partition in range(PARTITIONS):  # every leader moves one zone on
            cluster.set_leader("orders", partition, (partition + 1) % 3 + 1)
        produce(p, "orders", second, delivery)
        assert p.flush(60) == 0
    assert not delivery.failed, delivery.failed[:5]
    want: dict[int, list[int]] = {}
    for partition, value in first + second:
        want.setdefault(partition, []).append(value)
    assert delivery.acked == want
    assert read_back(cluster.bootstrap, "orders", PARTITIONS, 600) == want  # once each, in order

    ok = [b for b in batches(sidecars.audit_dir) if b["error_code"] == 0]
    moved = {p: ZONES[(p + 1) % 3 + 1] for p in range(PARTITIONS)}
    for b in ok:  # every acknowledged batch went by its leader's zone at that time
        zone = b["leader_zone"]
        assert zone in (ZONES[leaders[b["partition"]]], moved[b["partition"]]), b
        assert b["route"] == ("local" if zone == ZONES[1] else "wal"), b
    assert {b["partition"] for b in ok if b["leader_zone"] == moved[b["partition"]]} == set(range(PARTITIONS))
    assert not [b for b in ok if b["route"] == "direct_cross"]  # no fallback across zones
