"""The whole sidecar on a three-broker cluster: a proxy in use1-az1, agents in use1-az2 and
use1-az3, the WAL on moto, leaders in three zones by rack, and leaders that move between
zones mid-run (B3: an agent whose partition's leader came back must append, not refuse).
"""

from __future__ import annotations

import gzip
import json
import time

import confluent_kafka
import pytest

from tests.conftest import unique_name
from tests.integration.cluster.conftest import (
    ZONES,
    Delivery,
    produce,
    producer,
    read_back,
    spread_leaders,
    wal_sidecars,
)

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


def test_transactional_batches_go_direct_even_with_policy_wal(cluster, moto_server, tmp_path):
    """Transactional batches never take the WAL (docs/routing.md, "Transactions"): with
    policy wal, a transaction over partitions led in three zones commits, its batches to
    other zones go direct_cross, and idempotent batches beside it still take the WAL."""
    bucket = unique_name("wal")
    moto_server.create_bucket(bucket)
    leaders = spread_leaders(cluster, "txn", PARTITIONS)
    spread_leaders(cluster, "plain", PARTITIONS)
    records = [(i % PARTITIONS, i) for i in range(120)]
    delivery, plain = Delivery(), Delivery()
    with wal_sidecars(cluster, moto_server, bucket, tmp_path) as sidecars:
        p = confluent_kafka.Producer({"bootstrap.servers": sidecars.proxy, "transactional.id": "wal-txn",
                                      "linger.ms": 5})
        p.init_transactions(30)
        p.begin_transaction()
        produce(p, "txn", records, delivery)
        p.commit_transaction(30)
        q = producer(sidecars.proxy)
        produce(q, "plain", records, plain)
        assert q.flush(60) == 0
    assert not delivery.failed and not plain.failed
    want: dict[int, list[int]] = {}
    for partition, value in records:
        want.setdefault(partition, []).append(value)
    assert read_back(cluster.bootstrap, "txn", PARTITIONS, 120) == want
    routes = {(b["topic"], b["route"]) for b in batches(sidecars.audit_dir) if b["error_code"] == 0}
    assert routes == {("txn", "local"), ("txn", "direct_cross"), ("plain", "local"), ("plain", "wal")}
    for b in batches(sidecars.audit_dir):
        if b["topic"] == "txn":
            assert b["route"] == ("local" if leaders[b["partition"]] == 1 else "direct_cross"), b


def test_wal_path_with_a_broker_down_mid_run(cluster, moto_server, tmp_path):
    """Broker 2 (use1-az2, the agent's zone) goes down mid-run and comes back: its
    partitions wait (retriable errors, the producer retries), the others go on; in the end
    every record is in the log once, in order."""
    bucket = unique_name("wal")
    moto_server.create_bucket(bucket)
    leaders = spread_leaders(cluster, "down", PARTITIONS)
    first = [(i % PARTITIONS, i) for i in range(120)]
    second = [(i % PARTITIONS, i) for i in range(120, 240)]
    delivery = Delivery()
    with wal_sidecars(cluster, moto_server, bucket, tmp_path) as sidecars:
        p = producer(sidecars.proxy)
        produce(p, "down", first, delivery)
        assert p.flush(60) == 0
        cluster.set_down(2)
        produce(p, "down", second, delivery)
        healthy = [v for part, v in second if leaders[part] != 2]
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not all(v in delivery.acked_at for v in healthy):
            p.poll(0.1)
        assert [v for v in healthy if v not in delivery.acked_at] == []
        cluster.set_up(2)
        assert p.flush(90) == 0
    assert not delivery.failed, delivery.failed[:5]
    want: dict[int, list[int]] = {}
    for partition, value in first + second:
        want.setdefault(partition, []).append(value)
    assert delivery.acked == want
    assert read_back(cluster.bootstrap, "down", PARTITIONS, 240) == want
