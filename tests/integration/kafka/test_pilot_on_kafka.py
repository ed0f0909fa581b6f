"""Piloting the WAL route on one topic, and shadow mode, through real `azsidecar` processes in
front of Apache Kafka (racks use1-az1..3), the WAL on the moto server: a proxy in use1-az1,
agents in use1-az2 and use1-az3."""

from __future__ import annotations

import subprocess
import sys

import pytest

from router.pilot import EXCLUDED, NOT_PILOTED
from tests.conftest import unique_name
from tests.integration.cluster.conftest import Delivery, produce, producer, read_back, wal_sidecars
from tests.integration.cluster.test_wal_on_cluster import batches
from tests.integration.kafka.conftest import ZONES, spread_leaders

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

PARTITIONS = 3  # partition p led by node p % 3 + 1: p0 in use1-az2, p1 in use1-az3, p2 in use1-az1 (local)
RECORDS = 60


def _produce_all(bootstrap: str, topics: list[str]) -> Delivery:
    delivery = Delivery()
    p = producer(bootstrap, acks="all")
    for topic in topics:
        produce(p, topic, [(i % PARTITIONS, i) for i in range(RECORDS)], delivery)
    assert p.flush(60) == 0
    return delivery


def _want() -> dict[int, list[int]]:
    want: dict[int, list[int]] = {}
    for i in range(RECORDS):
        want.setdefault(i % PARTITIONS, []).append(i)
    return want


def test_only_the_piloted_topic_takes_the_wal_route(kafka, moto_server, tmp_path):
    bucket = unique_name("wal")
    moto_server.create_bucket(bucket)
    piloted, other, excluded = unique_name("orders"), unique_name("payments"), unique_name("orders")
    for topic in (piloted, other, excluded):
        spread_leaders(kafka, topic, PARTITIONS)
    router = {"wal_topics": ["orders-*"], "wal_exclude_topics": [excluded]}
    with wal_sidecars(kafka, moto_server, bucket, tmp_path, policy="wal", settings={"router": router}) as sidecars:
        delivery = _produce_all(sidecars.proxy, [piloted, other, excluded])
    assert not delivery.failed, delivery.failed[:5]
    for topic in (piloted, other, excluded):
        assert read_back(kafka.bootstrap, topic, PARTITIONS, RECORDS) == _want()

    ok = [b for b in batches(sidecars.audit_dir) if b["error_code"] == 0]
    routes = {(b["topic"], b["leader_zone"], b["route"], b["reason"]) for b in ok}
    assert routes == {
        (piloted, ZONES[2], "wal", "policy wal"), (piloted, ZONES[3], "wal", "policy wal"),
        (piloted, ZONES[1], "local", "same zone"),
        (other, ZONES[2], "direct_cross", NOT_PILOTED), (other, ZONES[3], "direct_cross", NOT_PILOTED),
        (other, ZONES[1], "local", "same zone"),
        (excluded, ZONES[2], "direct_cross", EXCLUDED), (excluded, ZONES[3], "direct_cross", EXCLUDED),
        (excluded, ZONES[1], "local", "same zone"),
    }


def test_shadow_mode_sends_everything_direct_and_plan_prices_the_piloted_topic(kafka, moto_server, tmp_path):
    bucket = unique_name("wal")
    moto_server.create_bucket(bucket)
    piloted, other = unique_name("orders"), unique_name("payments")
    for topic in (piloted, other):
        spread_leaders(kafka, topic, PARTITIONS)
    router = {"wal_topics": [piloted], "shadow": True}
    with wal_sidecars(kafka, moto_server, bucket, tmp_path, policy="wal", settings={"router": router}) as sidecars:
        delivery = _produce_all(sidecars.proxy, [piloted, other])
    assert not delivery.failed, delivery.failed[:5]
    for topic in (piloted, other):
        assert read_back(kafka.bootstrap, topic, PARTITIONS, RECORDS) == _want()
    assert "shadow mode (router.shadow)" in sidecars.logs[f"proxy-{ZONES[1]}"].read_text()
    listed = moto_server.client().list_objects_v2(Bucket=bucket)
    assert listed.get("KeyCount") == 0, listed.get("Contents")  # no WAL object, no epoch marker

    ok = [b for b in batches(sidecars.audit_dir) if b["error_code"] == 0]
    seen = {(b["topic"], b["leader_zone"], b["route"], b["reason"], b["shadow_route"], b["shadow_reason"])
            for b in ok}
    assert seen == {
        (piloted, ZONES[2], "direct_cross", "shadow", "wal", "policy wal"),
        (piloted, ZONES[3], "direct_cross", "shadow", "wal", "policy wal"),
        (piloted, ZONES[1], "local", "same zone", "local", "same zone"),
        (other, ZONES[2], "direct_cross", NOT_PILOTED, "direct_cross", NOT_PILOTED),
        (other, ZONES[3], "direct_cross", NOT_PILOTED, "direct_cross", NOT_PILOTED),
        (other, ZONES[1], "local", "same zone", "local", "same zone"),
    }
    would_wal = sum(b["bytes"] for b in ok if b["shadow_route"] == "wal")
    stays_direct = sum(b["bytes"] for b in ok if b["shadow_route"] == "direct_cross")
    done = subprocess.run([sys.executable, "-m", "azsidecar", "plan", "--from-audit", str(sidecars.audit_dir),
                           "--policy", "wal"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    total = would_wal + stays_direct
    assert done.stdout.splitlines()[0] == (
        f"shadow run: the policy would have sent {would_wal / 1e6:,.3f} MB ({100.0 * would_wal / total:.1f} %) "
        f"of the {total / 1e6:,.3f} MB produced across zones through the WAL; the plan prices those, the rest "
        "crosses directly in every mode")
    compare = subprocess.run([sys.executable, "-m", "azsidecar", "plan", "--from-audit", str(sidecars.audit_dir),
                              "--compare"], capture_output=True, text=True, timeout=60)
    assert compare.returncode == 2 and "a shadow run (router.shadow) sent nothing through the WAL" in compare.stderr
