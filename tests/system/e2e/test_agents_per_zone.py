"""Several agents per zone with the real parts: 3 loopback zones on Apache Kafka (three
KRaft nodes, one rack per zone, shared with the other three-zone tests), 3 agents per zone
and a proxy per zone as processes, 12-partition topics (replication factor 3, partition p
led in zone p mod 3), idempotent and non-idempotent librdkafka producers in every zone;
one agent is killed -9 mid-run and restarted. Read back from the brokers: idempotent
producers exactly once and in order; non-idempotent ones at least once (librdkafka does
not keep a non-idempotent producer's order across a retriable error, even with one request
in flight: docs/reliability.md, finding 5; a CI run of this test met it when the killed
agent's notifications failed). Every agent appended (partitions hashed over the agents:
notify.agent_ownership = "partition").
"""

from __future__ import annotations

import signal
import subprocess
import sys
import uuid
from collections import defaultdict

import pytest

from deploy.local.processes import DUMMY_CREDENTIALS, free_port
from deploy.local.sidecar_stack import READY_LINES, SidecarSettings, _wait_for_log_line, to_toml, zone_config
from leader_notify.sender.owners import owner_index
from tests import metrics_scrape
from tests.integration.readback import read_partitions

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]  # twelve sidecar processes start at once

PARTITIONS = 12
AGENTS_PER_ZONE = 3
RECORDS_PER_PRODUCER = 1200
READY_TIMEOUT_S = 120.0  # twelve processes importing at once on a shared 2-core host
FLUSH_TIMEOUT_S = 60.0
CONSUME_TIMEOUT_S = 60.0
CHUNK = 100  # records per producer between two flushes
KILL_AT_CHUNK = 4


def scrape(port: int, name: str) -> float:
    return metrics_scrape.total(port, name)


class Stack:
    """Agents and proxies of every zone; agent (zone, i) restartable on its port."""

    def __init__(self, env, tmp_path) -> None:
        self.env = env
        self.tmp = tmp_path
        # No partition_zones: on Kafka the router reads each leader's rack.
        self.settings = SidecarSettings(wal_bucket="wal", audit_dir=tmp_path / "audit", policy="wal", linger_ms=20)
        self.ports = {(z.name, i): free_port() for z in env.zones for i in range(AGENTS_PER_ZONE)}
        self.metrics_ports = {k: free_port() for k in self.ports}
        self.lists = {z.name: [f"127.0.0.1:{self.ports[(z.name, i)]}" for i in range(AGENTS_PER_ZONE)]
                      for z in env.zones}
        self.process_env = {**DUMMY_CREDENTIALS, "AZSIDECAR_NOTIFY_HMAC_KEYS": self.settings.hmac_key,
                            "AZSIDECAR_IMDS_ENDPOINT": "http://127.0.0.1:9", "AWS_DEFAULT_REGION": "us-east-1"}
        self.agents: dict[tuple[str, int], subprocess.Popen] = {}
        self.proxies: dict[str, subprocess.Popen] = {}

    def _config(self, zone, agent: int | None) -> str:
        config = zone_config(self.env, zone, self.settings, {z: lst[0] for z, lst in self.lists.items()})
        config["notify"]["agents"] = self.lists  # every zone's list: no load balancer in between
        # One broker per zone: owning brokers ("leader", the default) would leave two agents
        # of each zone standing by; hashed partitions spread the zone over all three
        # (tests/integration/cluster/test_agents_own_brokers_on_cluster.py has "leader" on several brokers).
        config["notify"]["agent_ownership"] = "partition"
        config["notify"]["timeout_s"] = 2.0
        if agent is not None:
            config["agent"]["listen_port"] = self.ports[(zone.name, agent)]
            config["agent"]["metrics_port"] = self.metrics_ports[(zone.name, agent)]
        path = self.tmp / f"{zone.name}-{'proxy' if agent is None else f'agent{agent}'}.toml"
        path.write_text(to_toml(config))
        return str(path)

    def _launch(self, zone, role: str, config: str, log_name: str, ready: str):
        """Start the process; returns a function that waits until it is ready."""
        log_path = self.env.log_dir / f"{log_name}.log"
        offset = log_path.stat().st_size if log_path.exists() else 0
        proc = self.env.run_in_zone(zone, [sys.executable, "-m", "azsidecar", role, "--config", config],
                                    self.process_env, log_name=log_name)

        def wait() -> subprocess.Popen:
            _wait_for_log_line(proc, proc.log_path, ready, READY_TIMEOUT_S, log_name, offset)
            return proc
        return wait

    def _launch_agent(self, zone, i: int):
        return self._launch(zone, "agent", self._config(zone, i), f"{zone.name}-agent{i}", READY_LINES["agent"])

    def start_agent(self, zone, i: int) -> None:
        self.agents[(zone.name, i)] = self._launch_agent(zone, i)()

    def start(self) -> None:
        # Every agent starts at once (imports dominate), then every proxy: the set-up costs
        # one start, not twelve.
        waits = {(z.name, i): self._launch_agent(z, i) for z in self.env.zones for i in range(AGENTS_PER_ZONE)}
        for key, wait in waits.items():
            self.agents[key] = wait()
        waits = {z.name: self._launch(z, "proxy", self._config(z, None), f"{z.name}-proxy", READY_LINES["proxy"])
                 for z in self.env.zones}
        for name, wait in waits.items():
            self.proxies[name] = wait()

    def stop(self) -> None:
        for proc in [*self.proxies.values(), *self.agents.values()]:  # proxies drain into the agents first
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=10)


@pytest.fixture
def stack(loopback_kafka_zones, tmp_path):
    s = Stack(loopback_kafka_zones, tmp_path)  # tests/conftest.py: the zones and their bucket "wal"
    try:
        s.start()
        yield s
    finally:
        s.stop()


def lost_report(pid: str, partition: int, lost: set[int], acked, held_at: dict[int, bytes]) -> str:
    """The offsets the lost records were acknowledged with, and what the log holds there."""
    return "; ".join(f"seq {seq} acked at offset {offset}, log has {held_at.get(offset)!r}"
                     for p, seq, offset in sorted(acked[pid], key=lambda a: a[1]) if p == partition and seq in lost)


def spread_topic(lists, zones) -> str:
    """A fresh topic name whose partitions have at least two owners in every zone (a name with
    all four of a zone's partitions on one agent would not test the spreading)."""
    for _ in range(1000):
        topic = f"multi-{uuid.uuid4().hex[:8]}"
        owners = defaultdict(set)
        for p in range(PARTITIONS):
            zone = zones[p % len(zones)]
            owners[zone].add(owner_index(lists[zone], topic, p))
        if all(len(o) >= 2 for o in owners.values()):
            return topic
    raise AssertionError("no topic name spreads over the agents")


def test_three_agents_per_zone_kill_one_nothing_lost_and_idempotent_order_kept(stack):
    from confluent_kafka import Producer

    env = stack.env
    topic = spread_topic(stack.lists, env.zone_names)
    nodes = [env.kafka.node_of_rack(name).node_id for name in env.zone_names]
    # Partition p led in zone p mod 3 (the first replica of an assignment leads), a replica in every zone.
    env.kafka.create_topic(topic, PARTITIONS, assignments={p: [nodes[(p + i) % 3] for i in range(3)]
                                                           for p in range(PARTITIONS)})
    assert env.kafka.leader_racks(topic) == {p: env.zone_names[p % 3] for p in range(PARTITIONS)}
    acked: dict[str, list[tuple[int, int, int]]] = defaultdict(list)  # producer -> (partition, seq, offset)
    failed: dict[str, int] = defaultdict(int)
    producers = {}
    for zone in env.zones:
        for kind in ("idem", "plain"):
            conf = {"bootstrap.servers": zone.sidecar_bootstrap, "acks": "all", "linger.ms": 5,
                    "message.timeout.ms": 60_000, "enable.idempotence": kind == "idem"}
            if kind == "plain":
                conf["max.in.flight.requests.per.connection"] = 1  # as a user who wants order without idempotence
            producers[f"{zone.name}-{kind}"] = Producer(conf)

    def on_delivery(pid: str, seq: int):
        def cb(err, msg):
            if err is None:
                acked[pid].append((msg.partition(), seq, msg.offset()))
            else:
                failed[pid] += 1
        return cb

    zone2 = env.zones[1]
    victim = (zone2.name, owner_index(stack.lists[zone2.name], topic, 1))  # owns partition 1, led in zone 2
    chunks = RECORDS_PER_PRODUCER // CHUNK
    for chunk in range(chunks):
        for seq in range(chunk * CHUNK, (chunk + 1) * CHUNK):
            for pid, prod in producers.items():
                prod.produce(topic, f"{pid}|{seq}".encode(), partition=seq % PARTITIONS,
                             on_delivery=on_delivery(pid, seq))
                prod.poll(0)
        if chunk == KILL_AT_CHUNK:  # this chunk is in flight: kill -9 one agent of zone 2, restart it
            proc = stack.agents[victim]
            proc.kill()
            proc.wait(timeout=10)
            stack.start_agent(zone2, victim[1])  # same port: the proxies find it again
        for prod in producers.values():  # paces the run: the next chunk starts once this one is in
            assert prod.flush(FLUSH_TIMEOUT_S) == 0
    appended = {k: scrape(port, "azsidecar_agent_entries_appended_total")
                for k, port in stack.metrics_ports.items()}
    stack.stop()  # proxies drain, then agents: everything acknowledged is in the log by now

    acked_ends: dict[int, int] = defaultdict(int)  # partition -> one past its highest acknowledged offset
    for records in acked.values():
        for p, _seq, offset in records:
            acked_ends[p] = max(acked_ends[p], offset + 1)
    read = read_partitions(env.zones[0].broker_bootstrap, [(topic, p) for p in range(PARTITIONS)],
                           at_least={(topic, p): end for p, end in acked_ends.items()}, timeout_s=CONSUME_TIMEOUT_S)
    log = {p: [(r.offset, r.value) for r in read.get((topic, p), [])] for p in range(PARTITIONS)}
    at = {p: dict(records) for p, records in log.items()}  # partition -> offset -> value
    for pid in producers:
        by_partition: dict[int, list[int]] = defaultdict(list)
        for p, values in log.items():
            for _offset, v in values:
                owner, _, seq = v.decode().partition("|")
                if owner == pid:
                    by_partition[p].append(int(seq))
        want: dict[int, list[int]] = defaultdict(list)
        for p, seq, offset in acked[pid]:
            want[p].append(seq)
            held = at.get(p, {}).get(offset)
            assert held is None or held == f"{pid}|{seq}".encode(), (
                f"{pid} p{p}: seq {seq} acknowledged at offset {offset}, which holds {held!r}")
        for p in range(PARTITIONS):
            got = by_partition[p]
            acked_seqs = sorted(want[p])
            lost = set(acked_seqs) - set(got)
            assert not lost, f"{pid} p{p}: acknowledged records lost: " + lost_report(pid, p, lost, acked, at.get(p, {}))
            assert all(s % PARTITIONS == p for s in got), f"{pid} p{p}: foreign records"
            if pid.endswith("idem"):
                assert got == sorted(set(got)), f"{pid} p{p}: duplicate or out of order {got[:20]}"
        assert failed[pid] == 0, f"{pid}: {failed[pid]} deliveries failed"
    # Each zone's partitions are spread over its agents by owner: exactly the owners appended.
    owners = {(zone, owner_index(stack.lists[zone], topic, p)) for p, zone in
              ((p, env.zone_names[p % len(env.zones)]) for p in range(PARTITIONS))}
    assert {k for k, n in appended.items() if n > 0} | {victim} >= owners - {victim}
    assert {k for k, n in appended.items() if n > 0} <= owners, appended
