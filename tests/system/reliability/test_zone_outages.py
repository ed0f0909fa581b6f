"""Zone outages on Apache Kafka in network namespaces: (a) a whole zone killed at once, (e) a
zone's agents gone while its broker stays, (c) S3 unreachable from one zone, (b) a zone
partitioned from the others (its S3 reachable), then healed, (d) a zone's inter-zone link
degraded (delay, loss, stalls, resets on every packet), then restored.

One three-zone netns environment per module (a Kafka node per zone, rack = zone, RF 3,
min.insync.replicas 2; moto in its own namespace), shared by the scenarios: Kafka in netns
takes ~30 s to be ready. Each scenario runs three paced idempotent producers (one per zone,
each through its zone's proxy, policy "wal") for ~10 s and breaks one zone while they run,
then checks: nothing acknowledged lost, duplicated or reordered (every partition read
back), the surviving zones' producers kept producing during the outage, the proxies'
and agents' memory stayed bounded, and (agents scenario) the zone came back to the WAL path without
a proxy restart. The campaign with many cycles and RPO/RTO figures is bench/zone_campaign.py.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

from deploy.local.scenario import TopicSpec, Workload
from deploy.local.sidecar_stack import SidecarSettings
from deploy.local.zone_wire import wired_zone
from deploy.local.zones import netns_available, three_zones
from tests.conftest import shed_topics
from tests.system.reliability.harness import run_campaign
from tests.system.reliability.zone_faults import (
    DEGRADED_LINK,
    agents_gone,
    audit_batches,
    audit_records,
    collect_wal_objects,
    degraded_link,
    objects_for_zone,
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
    return SidecarSettings(produce_detail="batch", object_detail="object", wal_bucket="wal", audit_dir=tmp_path / "audit", policy="wal",
                           extra={"audit": {"flush_seconds": 0.2}})


def assert_delivered_exactly_once(result, total: int = TOTAL) -> None:
    v = result.verification
    for key in ("lost", "duplicates", "reordered", "corrupt", "foreign"):
        assert v[key] == 0, (key, v["problems"], result.producer_errors)
    assert not result.producer_fatal, result.producer_fatal
    assert v["acknowledged"] + v["unacked_present"] + v["unacked_absent"] == total
    assert v["found"] == v["acknowledged"] + v["unacked_present"]


def assert_memory_bounded(result) -> None:
    """No proxy and no agent grew by more than RSS_GROWTH_BOUND_KIB from its first sample (an
    agent's block cache, up to wal.cache_bytes, cannot fill with a run's few MB)."""
    for key in ("rss_kib", "agent_rss_kib"):
        first = dict(result.samples[0][key]) if result.samples else {}
        for sample in result.samples:
            for zone, kib in sample[key].items():
                assert kib - first.get(zone, kib) <= RSS_GROWTH_BOUND_KIB, (key, zone, sample)


def test_whole_zone_killed_at_once_then_restarted(kafka_netns, tmp_path):
    """(a) use1-az2's Kafka node, agent and proxy are killed with -9 together, stay down
    OUTAGE_S, and come back. Leadership moves to the other racks' in-sync replicas; the
    other zones' producers keep producing throughout; the zone's own producer waits (its
    sidecar is gone) and delivers after the restart, within its message timeout."""
    env = kafka_netns
    zone = env.zones[1]
    outage, restart = whole_zone(env, zone, outage_s=OUTAGE_S, fault_at=FAULT_AT)
    # The zone's restart is waited for by readiness (its agent waits for its restarting Kafka
    # node first): on a slow host it came 2.4 s after the producers were done.
    result = run_campaign(env, WORKLOAD, settings(tmp_path), outage, name="zone-down",
                          records_per_s=RATE_PER_PRODUCER, until=lambda: not restart.pending)

    assert outage.down_at is not None and outage.up_at is not None, result.events
    # Started beside their restarting Kafka node, the agent and the proxy waited for it by
    # themselves (upstream.startup_wait_s) and came up without being started again.
    assert not restart.pending, f"not restarted: {restart.pending}"
    assert restart.respawns == 0, result.events
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
PARTITION_RECORDS_PER_PRODUCER = 12_000  # 24 s: the heal at ~13 s, the cut zone's backlog delivered after it
WAL_WINDOW_S = 3 * 1.5 + 1.0  # circuits open after 3 missed deadlines of notify.gray_max_s, plus slack


def test_zone_partitioned_then_healed(kafka_netns, tmp_path):
    """(b) use1-az2 is cut off from the other zones (its inter-zone and replication links
    down) for PARTITION_S while it still reaches S3, then healed. Its broker is fenced and its
    leaders move to the other racks; the other zones' producers keep producing; use1-az2's
    producer waits and delivers after the heal (message timeout 120 s). Nothing acknowledged
    is lost, duplicated or reordered when the partition heals."""
    env = kafka_netns
    zone = env.zones[1]
    outage = partition(env, zone, outage_s=PARTITION_S, fault_at=0.05)
    workload = replace(WORKLOAD, total_bytes=3 * PARTITION_RECORDS_PER_PRODUCER * 100)
    result = run_campaign(env, workload, settings(tmp_path), outage, name="partition",
                          records_per_s=RATE_PER_PRODUCER)

    assert outage.down_at is not None and outage.up_at is not None, result.events
    assert_delivered_exactly_once(result, 3 * PARTITION_RECORDS_PER_PRODUCER)
    assert result.verification["acknowledged"] == 3 * PARTITION_RECORDS_PER_PRODUCER, result.producer_errors
    assert_memory_bounded(result)
    # The surviving producers kept producing while the zone was cut off.
    assert outage.acked_up - outage.acked_down >= 2 * RATE_PER_PRODUCER * PARTITION_S / 4, \
        (outage.acked_down, outage.acked_up)
    others = [b for b in audit_batches(tmp_path / "audit")
              if b["zone"] != zone.name and b["leader_zone"] == zone.name
              and outage.down_wall_ms <= b["ts_ms"] <= outage.up_wall_ms]
    print("batches to the cut-off zone while cut off:", sorted({(b["route"], b["reason"]) for b in others}))
    # WAL objects that cannot be read stop within a bounded window: the proxies on both sides
    # write for the other side of the cut only until their circuits open (at most 3 missed
    # notification deadlines, notify.gray_max_s 1.5 s each) or their producers' requests stall
    # behind the partitions the cut broker led. Measured 0.03-0.07 s after the cut.
    records = audit_records(tmp_path / "audit", frozenset({"wal_flush", "agent_read"}))
    for side in (False, True):
        written = objects_for_zone(records, zone.name, outage.down_wall_ms, outage.up_wall_ms, from_zone=side)
        print(f"WAL objects {'from' if side else 'for'} the cut-off zone while cut off: {written}")
        assert written["last_put_s"] is None or written["last_put_s"] <= WAL_WINDOW_S, written
    # ... and the ones no agent will apply are collected: one gc pass leaves nothing older than 1 s.
    gc = collect_wal_objects(env, "wal", tmp_path / "audit", "partition")
    assert gc["left"] == 0 and gc["held"] == 0, gc


DEGRADED_S = 8.0
LINK_RECORDS_PER_PRODUCER = 8_000  # 16 s: the restore at ~9 s, then ~7 s of traffic on the restored link


def test_degraded_inter_zone_link_then_restored(kafka_netns, tmp_path):
    """(d) every packet between use1-az3 and the other zones goes through a user-space wire
    (deploy/local/zone_wire.py): healthy, then from 5 % of the records for DEGRADED_S
    degraded (DEGRADED_LINK: 40 ms +- 10 ms each way, 2 % loss, a 0.8 s stall every 3 s, the
    zone's cross-zone connections reset every 4 s), then restored. Direct produce across
    zones, notifications and metadata all cross it; replication and S3 do not. Nothing
    acknowledged is lost, duplicated or reordered; every producer keeps producing; the WAL
    route carries batches across use1-az3's link while it is degraded and after the restore."""
    env = kafka_netns
    zone = env.zones[2]
    workload = replace(WORKLOAD, total_bytes=3 * LINK_RECORDS_PER_PRODUCER * 100)
    with wired_zone(zone.bridge_port, zone.netns, env.log_dir, DEGRADED_LINK, seed=11) as wire:
        outage = degraded_link(wire, zone, outage_s=DEGRADED_S, fault_at=0.05)
        result = run_campaign(env, workload, settings(tmp_path), outage, name="degraded-link",
                              records_per_s=RATE_PER_PRODUCER)
        counts = wire.counts()

    assert outage.down_at is not None and outage.up_at is not None, result.events
    assert_delivered_exactly_once(result, 3 * LINK_RECORDS_PER_PRODUCER)
    assert result.verification["acknowledged"] == 3 * LINK_RECORDS_PER_PRODUCER, result.producer_errors
    assert_memory_bounded(result)
    # The wire did degrade the link: frames lost, stalls, resets. Losses are drawn at 2 % per
    # frame, and few frames go towards the zone while it is degraded: a fresh-clone run
    # (2026-12-01 23:35) drew none that way (6 the other way), so losses count both ways together.
    assert counts.get("to_zone_dropped", 0) + counts.get("to_bridge_dropped", 0) > 0, counts
    assert counts.get("stalls", 0) >= 2 and counts.get("resets", 0) >= 1, counts
    # Every producer kept producing while it was degraded (paced 3 x 500/s; a quarter of it).
    assert outage.acked_up - outage.acked_down >= 3 * RATE_PER_PRODUCER * DEGRADED_S / 4, \
        (outage.acked_down, outage.acked_up)
    batches = audit_batches(tmp_path / "audit")
    crossing = [b for b in batches if zone.name in (b["zone"], b["leader_zone"]) and b["zone"] != b["leader_zone"]]
    during = [b for b in crossing if outage.down_wall_ms <= b["ts_ms"] <= outage.up_wall_ms]
    after = [b for b in crossing if b["ts_ms"] > outage.up_wall_ms]
    print(f"degraded link: wire {counts}; batches across use1-az3 while degraded by (route, reason): "
          f"{dict(Counter((b['route'], b['reason']) for b in during))}")
    # A slow, lossy link that still works keeps the WAL route (bench.zone_campaign --scenario d:
    # no batch fell back in 20 cycles); a circuit that did open is back within its 10 s open
    # period, which this run's few seconds after the restore need not show.
    assert any(b["route"] == "wal" for b in during), "the WAL route carried nothing while degraded"
    assert any(b["route"] == "wal" for b in after), "the WAL route carried nothing after the restore"
