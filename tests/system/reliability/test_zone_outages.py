"""Zone outages on Apache Kafka in network namespaces: (a) a whole zone killed at once, (e) a
zone's agents gone while its broker stays, (c) S3 unreachable from one zone, (b) a zone
partitioned from the others (its S3 reachable), then healed.

One three-zone netns environment per module (a Kafka node per zone, rack = zone, RF 3,
min.insync.replicas 2; moto in its own namespace), shared by the scenarios: Kafka in netns
takes ~30 s to be ready. Each scenario runs three paced idempotent producers (one per zone,
each through its zone's proxy, policy "wal") for ~10 s and breaks one zone while they run,
then checks: nothing acknowledged lost, duplicated or reordered (every partition read
back), the surviving zones' producers kept producing during the outage, the proxies'
memory stayed bounded, and (agents scenario) the zone came back to the WAL path without
a proxy restart. The campaign with many cycles and RPO/RTO figures is bench/zone_campaign.py.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from deploy.local.scenario import TopicSpec, Workload
from deploy.local.sidecar_stack import SidecarSettings
from deploy.local.zones import netns_available, three_zones
from tests.conftest import shed_topics
from tests.system.reliability.harness import run_campaign
from tests.system.reliability.zone_faults import (
    agents_gone,
    audit_batches,
    partition,
    s3_cut,
    wal_return_s,
    whole_zone,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300),
              pytest.mark.skipif(not netns_available(), reason="netns mode needs root and iproute2")]

TOPICS = (TopicSpec("orders", 6, keyed=True), TopicSpec("clicks", 6, keyed=False))
RECORDS_PER_PRODUCER = 5_000
RATE_PER_PRODUCER = 500  # records/s: 10 s of steady production
WORKLOAD = Workload(total_bytes=3 * RECORDS_PER_PRODUCER * 100, record_bytes=100, topics=TOPICS, linger_ms=20,
                    timeout_s=240)  # a Kafka node restarting in netns took up to 75 s under load 27
TOTAL = 3 * RECORDS_PER_PRODUCER
AGENTS_RECORDS_PER_PRODUCER = 16_000  # scenario (e): 32 s, so traffic still flows once the agent is back
OUTAGE_S = 4.0  # how long the zone stays down (fault timing, not synchronization)
FAULT_AT = 0.25  # of all records acknowledged
# Proxy RSS bound: the proxy's idle footprint plus the WAL writer's buffer (wal.max_buffered_bytes
# default 32 MiB) and librdkafka's in-flight requests; twice that is a leak, not a backlog.
RSS_GROWTH_BOUND_KIB = 2 * (32 + 8) * 1024


@pytest.fixture(scope="module")
def _zones_on_kafka(tmp_path_factory):
    with three_zones(mode="netns", broker="kafka", log_dir=tmp_path_factory.mktemp("zones-kafka")) as env:
        env.create_bucket("wal")
        yield env


@pytest.fixture
def kafka_netns(_zones_on_kafka):
    """The module's zones, without the topics of the test before (tests/conftest.py: shed_topics)."""
    yield _zones_on_kafka
    shed_topics(_zones_on_kafka.kafka)


def settings(tmp_path: Path) -> SidecarSettings:
    return SidecarSettings(wal_bucket="wal", audit_dir=tmp_path / "audit", policy="wal",
                           extra={"audit": {"flush_seconds": 0.2}})


def assert_delivered_exactly_once(result, total: int = TOTAL) -> None:
    v = result.verification
    for key in ("lost", "duplicates", "reordered", "corrupt", "foreign"):
        assert v[key] == 0, (key, v["problems"], result.producer_errors)
    assert not result.producer_fatal, result.producer_fatal
    assert v["acknowledged"] + v["unacked_present"] + v["unacked_absent"] == total
    assert v["found"] == v["acknowledged"] + v["unacked_present"]


def assert_memory_bounded(result) -> None:
    first = {zone: kib for zone, kib in result.samples[0]["rss_kib"].items()} if result.samples else {}
    for sample in result.samples:
        for zone, kib in sample["rss_kib"].items():
            assert kib - first.get(zone, kib) <= RSS_GROWTH_BOUND_KIB, (zone, sample)


def test_whole_zone_killed_at_once_then_restarted(kafka_netns, tmp_path):
    """(a) use1-az2's Kafka node, agent and proxy are killed with -9 together, stay down
    OUTAGE_S, and come back. Leadership moves to the other racks' in-sync replicas; the
    other zones' producers keep producing throughout; the zone's own producer waits (its
    sidecar is gone) and delivers after the restart, within its message timeout."""
    env = kafka_netns
    zone = env.zones[1]
    outage, pending = whole_zone(env, zone, outage_s=OUTAGE_S, fault_at=FAULT_AT)
    result = run_campaign(env, WORKLOAD, settings(tmp_path), outage, name="zone-down",
                          records_per_s=RATE_PER_PRODUCER)

    assert outage.down_at is not None and outage.up_at is not None, result.events
    assert not pending, f"not restarted: {pending}"
    assert_delivered_exactly_once(result)
    # The surviving producers were still acknowledged while the zone was down, but not at
    # their rate: a producer sees the proxy as its one broker, so each ProduceRequest holds
    # partitions the dead node led, and its answer waits until KRaft fences that node (9 s)
    # and the leaders move. Measured 200-2,000 records of the 4,000 paced over the 4 s.
    assert outage.acked_up > outage.acked_down, (outage.acked_down, outage.acked_up)
    assert result.verification["acknowledged"] == TOTAL, result.producer_errors
    assert_memory_bounded(result)


def test_zone_agents_gone_while_its_broker_stays(kafka_netns, tmp_path):
    """(e) use1-az3's agent is killed and stays down OUTAGE_S while its Kafka node keeps its
    leaders. The other proxies' circuits to use1-az3 open (agent_gone: its broker is still in
    Metadata) and its partitions go direct; when the agent is back, the half-open try finds
    it and batches to use1-az3 take the WAL path again, with no proxy restarted."""
    env = kafka_netns
    zone = env.zones[2]

    outage = agents_gone(zone, outage_s=OUTAGE_S, fault_at=0.05)
    # 32 s of production: after the agent is back (its start took up to 18 s at load 20), the
    # proxies' monitors (a probe every 5 s) half-open the circuit and the WAL path carries the
    # zone's batches again before the end.
    workload = replace(WORKLOAD, total_bytes=3 * AGENTS_RECORDS_PER_PRODUCER * 100)
    result = run_campaign(env, workload, settings(tmp_path), outage, name="agents-gone",
                          records_per_s=RATE_PER_PRODUCER)

    assert outage.down_at is not None and outage.up_at is not None, result.events
    assert_delivered_exactly_once(result, 3 * AGENTS_RECORDS_PER_PRODUCER)
    assert result.verification["acknowledged"] == 3 * AGENTS_RECORDS_PER_PRODUCER, result.producer_errors
    assert_memory_bounded(result)
    batches = audit_batches(tmp_path / "audit")
    to_zone = [b for b in batches if b["leader_zone"] == zone.name and b["zone"] != zone.name]
    reasons = {b["reason"] for b in to_zone}
    assert "zone unhealthy, fallback direct" in reasons, reasons  # the circuit opened, batches went direct
    # Back on the WAL path without a restart: after the agent was back, each proxy's batches to
    # the zone went through the WAL again, to the last.
    if not any(b["ts_ms"] > outage.up_wall_ms for b in to_zone):
        # The agent's restart (a Python start, 10-18 s at load 20+) ended after the producers:
        # no traffic left to show the return. Reported, not passed.
        pytest.xfail("the agent was back only after the producers finished: WAL return not observable")
    back = wal_return_s(batches, zone.name, outage.up_wall_ms)
    assert set(back) == {env.zones[0].name, env.zones[1].name} and None not in back.values(), back
    print(f"back on the WAL path to {zone.name}, s after the agent was up: {back}")


def test_s3_unreachable_from_one_zone(kafka_netns, tmp_path):
    """(c) use1-az1's link to S3 goes down for OUTAGE_S (requests hang: packets are dropped).
    Its proxy's WAL PUTs are abandoned at their gray deadline, its circuits open with cause
    s3_unreachable and its cross-zone batches go direct; the other zones keep the WAL path.
    Nothing acknowledged is lost or duplicated; when the link is back the zone's proxy takes
    the WAL path again without a restart."""
    env = kafka_netns
    zone = env.zones[0]
    outage = s3_cut(env, zone, outage_s=OUTAGE_S, fault_at=0.05)
    workload = replace(WORKLOAD, total_bytes=3 * AGENTS_RECORDS_PER_PRODUCER * 100)
    result = run_campaign(env, workload, settings(tmp_path), outage, name="s3-cut",
                          records_per_s=RATE_PER_PRODUCER)

    assert outage.down_at is not None and outage.up_at is not None, result.events
    assert_delivered_exactly_once(result, 3 * AGENTS_RECORDS_PER_PRODUCER)
    assert result.verification["acknowledged"] == 3 * AGENTS_RECORDS_PER_PRODUCER, result.producer_errors
    assert_memory_bounded(result)
    mine = [b for b in audit_batches(tmp_path / "audit") if b["zone"] == zone.name and b["leader_zone"] != zone.name]
    during = [b for b in mine if outage.down_wall_ms <= b["ts_ms"] <= outage.up_wall_ms]
    assert any(b["reason"] == "zone unhealthy, fallback direct" for b in during), {b["reason"] for b in during}
    after = [b for b in mine if b["ts_ms"] > outage.up_wall_ms + 15_000]  # past the 10 s open period
    if not after:
        pytest.xfail("the producers finished within 15 s of the link's return: WAL return not observable")
    assert after[-1]["route"] == "wal", [(b["route"], b["reason"]) for b in after[-5:]]


PARTITION_S = 12.0  # longer than KRaft's broker session timeout (9 s): the zone's broker is fenced


def test_zone_partitioned_then_healed(kafka_netns, tmp_path):
    """(b) use1-az2 is cut off from the other zones (its inter-zone and replication links
    down) for PARTITION_S while it still reaches S3, then healed. Its broker is fenced and its
    leaders move to the other racks; the other zones' producers keep producing; use1-az2's
    producer waits and delivers after the heal (message timeout 120 s). Nothing acknowledged
    is lost, duplicated or reordered when the partition heals."""
    env = kafka_netns
    zone = env.zones[1]
    outage = partition(env, zone, outage_s=PARTITION_S, fault_at=0.05)
    workload = replace(WORKLOAD, total_bytes=3 * AGENTS_RECORDS_PER_PRODUCER * 100)
    result = run_campaign(env, workload, settings(tmp_path), outage, name="partition",
                          records_per_s=RATE_PER_PRODUCER)

    assert outage.down_at is not None and outage.up_at is not None, result.events
    assert_delivered_exactly_once(result, 3 * AGENTS_RECORDS_PER_PRODUCER)
    assert result.verification["acknowledged"] == 3 * AGENTS_RECORDS_PER_PRODUCER, result.producer_errors
    assert_memory_bounded(result)
    # The surviving producers kept producing while the zone was cut off.
    assert outage.acked_up - outage.acked_down >= 2 * RATE_PER_PRODUCER * PARTITION_S / 4, \
        (outage.acked_down, outage.acked_up)
    others = [b for b in audit_batches(tmp_path / "audit")
              if b["zone"] != zone.name and b["leader_zone"] == zone.name
              and outage.down_wall_ms <= b["ts_ms"] <= outage.up_wall_ms]
    print("batches to the cut-off zone while cut off:", sorted({(b["route"], b["reason"]) for b in others}))
