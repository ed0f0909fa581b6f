"""Zone outages on Apache Kafka in network namespaces: a whole zone killed at once, a zone's
agents gone while its broker stays.

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

import gzip
import json
import time
from dataclasses import replace
from pathlib import Path

import pytest

from deploy.local.scenario import TopicSpec, Workload
from deploy.local.sidecar_stack import SidecarSettings
from deploy.local.zones import netns_available, three_zones
from tests.reliability.harness import TickContext, run_campaign

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300),
              pytest.mark.skipif(not netns_available(), reason="netns mode needs root and iproute2")]

TOPICS = (TopicSpec("orders", 6, keyed=True), TopicSpec("clicks", 6, keyed=False))
RECORDS_PER_PRODUCER = 5_000
RATE_PER_PRODUCER = 500  # records/s: 10 s of steady production
WORKLOAD = Workload(total_bytes=3 * RECORDS_PER_PRODUCER * 100, record_bytes=100, topics=TOPICS, linger_ms=20,
                    timeout_s=240)  # a Kafka node restarting in netns took up to 75 s under load 27
TOTAL = 3 * RECORDS_PER_PRODUCER
AGENTS_RECORDS_PER_PRODUCER = 8_000  # scenario (e): 16 s
OUTAGE_S = 4.0  # how long the zone stays down (fault timing, not synchronization)
FAULT_AT = 0.25  # of all records acknowledged
# Proxy RSS bound: the proxy's idle footprint plus the WAL writer's buffer (wal.max_buffered_bytes
# default 32 MiB) and librdkafka's in-flight requests; twice that is a leak, not a backlog.
RSS_GROWTH_BOUND_KIB = 2 * (32 + 8) * 1024


@pytest.fixture(scope="module")
def kafka_netns(tmp_path_factory):
    with three_zones(mode="netns", broker="kafka", log_dir=tmp_path_factory.mktemp("zones-kafka")) as env:
        env.create_bucket("wal")
        yield env


def settings(tmp_path: Path) -> SidecarSettings:
    return SidecarSettings(wal_bucket="wal", audit_dir=tmp_path / "audit", policy="wal",
                           extra={"audit": {"flush_seconds": 0.2}})


class Outage:
    """on_tick: at FAULT_AT of the records, `down(ctx)`; OUTAGE_S later, `up(ctx)`. Records the
    moments and how many records were acknowledged meanwhile."""

    def __init__(self, down, up, after_up=None) -> None:
        self.down, self.up, self.after_up = down, up, after_up
        self.down_at = self.up_at = None
        self.acked_down = self.acked_up = 0

    def __call__(self, ctx: TickContext) -> None:
        if self.down_at is None and ctx.acked_fraction >= FAULT_AT:
            self.down_at, self.acked_down = time.monotonic(), ctx.acked
            self.down(ctx)
        elif self.down_at is not None and self.up_at is None and time.monotonic() - self.down_at >= OUTAGE_S:
            self.acked_up = ctx.acked
            self.up(ctx)
            self.up_at = time.monotonic()
        elif self.up_at is not None and self.after_up is not None:
            self.after_up(ctx)


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


def audit_batches(audit_dir: Path) -> list[dict]:
    out = []
    for path in sorted(audit_dir.rglob("*.jsonl.gz")):
        if not path.name.startswith("."):
            with gzip.open(path, "rt") as f:
                out += [r for r in map(json.loads, f) if r["kind"] == "produce_batch"]
    return out


def test_whole_zone_killed_at_once_then_restarted(kafka_netns, tmp_path):
    """(a) use1-az2's Kafka node, agent and proxy are killed with -9 together, stay down
    OUTAGE_S, and come back. Leadership moves to the other racks' in-sync replicas; the
    other zones' producers keep producing throughout; the zone's own producer waits (its
    sidecar is gone) and delivers after the restart, within its message timeout."""
    env = kafka_netns
    zone = env.zones[1]
    node = env.kafka.node_of_rack(zone.name)

    def down(ctx: TickContext) -> None:
        env.kafka.kill_node(node.node_id)
        ctx.fleet.kill("agent", zone)
        ctx.fleet.kill("proxy", zone)

    pending = ["agent", "proxy"]  # what is still to restart, in order

    def up(ctx: TickContext) -> None:
        env.kafka.start_node(node.node_id, wait=False)
        supervise(ctx)

    def supervise(ctx: TickContext) -> None:
        """As a supervisor would: start the agent, then the proxy; one that exits at start
        (its zone's broker still refuses: "no broker ... could be used") is tried again next tick."""
        while pending:
            try:
                (ctx.fleet.start_agent if pending[0] == "agent" else ctx.fleet.start_proxy)(zone)
            except RuntimeError:
                return
            pending.pop(0)

    outage = Outage(down, up, after_up=lambda ctx: pending and supervise(ctx))
    result = run_campaign(env, WORKLOAD, settings(tmp_path), outage, name="zone-down",
                          records_per_s=RATE_PER_PRODUCER)

    assert outage.down_at is not None and outage.up_at is not None, result.events
    assert not pending, f"not restarted: {pending}"
    assert_delivered_exactly_once(result)
    # The two surviving producers kept producing while the zone was down: at least half
    # their paced rate over the outage (the dead zone's producer could not be acknowledged).
    assert outage.acked_up - outage.acked_down >= 0.5 * 2 * RATE_PER_PRODUCER * OUTAGE_S * 0.5, \
        (outage.acked_down, outage.acked_up)
    assert result.verification["acknowledged"] == TOTAL, result.producer_errors
    assert_memory_bounded(result)


def test_zone_agents_gone_while_its_broker_stays(kafka_netns, tmp_path):
    """(e) use1-az3's agent is killed and stays down OUTAGE_S while its Kafka node keeps its
    leaders. The other proxies' circuits to use1-az3 open (agent_gone: its broker is still in
    Metadata) and its partitions go direct; when the agent is back, the half-open try finds
    it and batches to use1-az3 take the WAL path again, with no proxy restarted."""
    env = kafka_netns
    zone = env.zones[2]

    outage = Outage(lambda ctx: ctx.fleet.kill("agent", zone), lambda ctx: ctx.fleet.start_agent(zone))
    # 16 s of production: after the agent is back, the proxies' monitors (a probe every 5 s)
    # half-open the circuit and the WAL path carries the zone's batches again before the end.
    workload = replace(WORKLOAD, total_bytes=3 * AGENTS_RECORDS_PER_PRODUCER * 100)
    result = run_campaign(env, workload, settings(tmp_path), outage, name="agents-gone",
                          records_per_s=RATE_PER_PRODUCER)

    assert outage.down_at is not None and outage.up_at is not None, result.events
    assert_delivered_exactly_once(result, 3 * AGENTS_RECORDS_PER_PRODUCER)
    assert result.verification["acknowledged"] == 3 * AGENTS_RECORDS_PER_PRODUCER, result.producer_errors
    assert_memory_bounded(result)
    to_zone = [b for b in audit_batches(tmp_path / "audit") if b["leader_zone"] == zone.name and b["zone"] != zone.name]
    reasons = {b["reason"] for b in to_zone}
    assert "zone unhealthy, fallback direct" in reasons, reasons  # the circuit opened, batches went direct
    # Back on the WAL path without a restart: the last batches each proxy sent to the zone went through the WAL.
    for proxy_zone in {b["zone"] for b in to_zone}:
        last = sorted((b for b in to_zone if b["zone"] == proxy_zone), key=lambda b: b["ts_ms"])[-20:]
        assert all(b["route"] == "wal" for b in last), (proxy_zone, [(b["route"], b["reason"]) for b in last])
