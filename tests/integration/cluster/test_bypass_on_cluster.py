"""Same-zone bypass (proxy.bypass_same_zone): what it does, and where clients leak around it.

Three brokers in three racks (librdkafka's mock cluster), the proxy in use1-az1 with
proxy.broker_listeners; with the bypass its Metadata names broker 1 (use1-az1) at its real
address and brokers 2 and 3 at the proxy's listeners. Where a client's connections really
go is read from /proc (tests/integration/cluster/peers.py): a connection to broker 2's or 3's own port
is cross-zone traffic that passed around the proxy (a leak).

Measured here, and why the bypass is off by default: a client that talks to broker 1
directly may send it its next Metadata request, and broker 1 answers with every broker's
real address. confluent-kafka and kcat (librdkafka 2.16 and Debian's 2.0) then reconnect
to brokers 2 and 3 directly at their next metadata refresh; aiokafka keeps its open
connections on a refresh but connects to the real address when a leader moves to a
broker it has no connection to, as confluent-kafka does. Records still arrive exactly once
and in order: the leak costs money (cross-zone bytes the proxy neither routes nor
audits), not correctness.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import os
import socket
import struct
import subprocess
import time
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer
from kafka.protocol.metadata import MetadataRequest, MetadataResponse

from tests.integration.cluster.conftest import Delivery, produce, producer, proxy_on, read_back, spread_leaders
from tests.integration.cluster.peers import PeerSampler
from tests.integration.proxy.kafka_wire import encode

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

PARTITIONS = 6
ON = {"proxy": {"broker_listeners": True, "bypass_same_zone": True}}
OFF = {"proxy": {"broker_listeners": True}}
REFRESH_MS = 500  # a short metadata refresh interval, so a run sees several refreshes
# 120 refresh intervals: the run stops as soon as both brokers were reached (usually within
# seconds); on a loaded CI host kcat had not reached them within 40 intervals.
LEAK_DEADLINE_S = 60.0


def real_ports(cluster) -> dict[int, int]:
    return {b: int(cluster.address(b).rpartition(":")[2]) for b in (1, 2, 3)}


def brokers_seen(sampler: PeerSampler, ports: dict[int, int]) -> set[int]:
    return {b for b, port in ports.items() if port in sampler.seen}


def audit_batches(log_dir: Path) -> list[dict]:
    out = []
    for path in (log_dir / "audit").rglob("*.jsonl.gz"):
        with gzip.open(path, "rt") as f:
            out.extend(r for r in map(json.loads, f) if r["kind"] == "produce_batch")
    return out


def proxy_metadata(port: int, topic: str, version: int = 5):
    """The proxy's own Metadata answer on its bootstrap listener (a client library would
    send its next Metadata request wherever it likes, the real broker 1 included)."""
    request = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)],
                              allow_auto_topic_creation=False)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(encode(request, 7, version))
        frame = b""
        while len(frame) < 4 or len(frame) < 4 + struct.unpack_from(">i", frame)[0]:
            chunk = sock.recv(65536)
            assert chunk, "the proxy closed the connection"
            frame += chunk
    assert struct.unpack_from(">i", frame, 4)[0] == 7  # correlation id
    return MetadataResponse.decode(frame[8:], version=version)


def all_led_by(cluster, topic: str, broker: int) -> None:
    cluster.create_topic(topic, PARTITIONS)
    for p in range(PARTITIONS):
        cluster.set_leader(topic, p, broker)


@pytest.mark.parametrize("settings, direct", [(ON, {1}), (OFF, set())], ids=["bypass", "no-bypass"])
def test_metadata_names_only_the_same_zone_broker_at_its_real_address(cluster, tmp_path, settings, direct):
    leaders = spread_leaders(cluster, "meta", PARTITIONS)
    ports = real_ports(cluster)
    with proxy_on(cluster, tmp_path, settings=settings) as proxy:
        md = proxy_metadata(proxy.port, "meta")
    brokers = {b.node_id: (b.host, b.port, b.rack) for b in md.brokers}
    assert sorted(brokers) == [1, 2, 3]
    for node_id, (host, port, rack) in brokers.items():
        assert rack == f"use1-az{node_id}"
        if node_id in direct:
            assert (host, port) == ("127.0.0.1", ports[node_id])
        else:
            assert port not in ports.values() and port != proxy.port  # its listener at the proxy
    [topic] = md.topics
    assert {p.partition_index: p.leader_id for p in topic.partitions} == leaders


@pytest.mark.parametrize("settings, bypassed", [(ON, True), (OFF, False)], ids=["bypass", "no-bypass"])
def test_same_zone_batches_skip_the_proxy_and_its_audit(cluster, tmp_path, settings, bypassed):
    """Every partition led in use1-az1: with the bypass the client writes to broker 1 itself,
    the proxy sees none of the batches, so its audit has no `local` records for them."""
    all_led_by(cluster, "local", 1)
    ports = real_ports(cluster)
    records = [(i % PARTITIONS, i) for i in range(300)]
    delivery = Delivery()
    with proxy_on(cluster, tmp_path, settings=settings) as proxy, PeerSampler(os.getpid(), ports.values()) as peers:
        p = producer(proxy.bootstrap)
        produce(p, "local", records, delivery)
        assert p.flush(30) == 0
        peers.wait_for_sample()
        del p  # closes its connections before the proxy stops
    assert not delivery.failed
    want = {part: list(range(part, 300, PARTITIONS)) for part in range(PARTITIONS)}
    assert delivery.acked == want
    assert read_back(cluster.bootstrap, "local", PARTITIONS, 300) == want
    local = [b for b in audit_batches(tmp_path) if b["route"] == "local"]
    if bypassed:
        assert brokers_seen(peers, ports) == {1}
        assert local == []  # the proxy never saw them: the audit has no record of same-zone bytes
    else:
        assert brokers_seen(peers, ports) == set()
        assert sum(b["records"] for b in local) == 300


@pytest.mark.parametrize("settings, leaks", [(ON, True), (OFF, False)], ids=["bypass", "no-bypass"])
def test_confluent_kafka_leaks_to_other_zones_after_a_metadata_refresh(cluster, tmp_path, settings, leaks):
    spread_leaders(cluster, "refresh", PARTITIONS)
    ports = real_ports(cluster)
    delivery = Delivery()
    with proxy_on(cluster, tmp_path, settings=settings) as proxy, PeerSampler(os.getpid(), ports.values()) as peers:
        p = producer(proxy.bootstrap, **{"topic.metadata.refresh.interval.ms": REFRESH_MS})
        started = time.monotonic()
        value = 0
        while time.monotonic() - started < (LEAK_DEADLINE_S if leaks else 5 * REFRESH_MS / 1000):
            if brokers_seen(peers, ports) >= {2, 3}:
                break
            produce(p, "refresh", [(value % PARTITIONS, value)], delivery)
            value += 1
            p.poll(0.01)
        assert p.flush(30) == 0 and not delivery.failed
        peers.wait_for_sample()
        del p
    if leaks:  # broker 1 answered a refresh with brokers 2 and 3's real addresses
        assert brokers_seen(peers, ports) == {1, 2, 3}
    else:
        assert brokers_seen(peers, ports) == set()


@pytest.mark.parametrize("settings, leaks", [(ON, True), (OFF, False)], ids=["bypass", "no-bypass"])
def test_kcat_leaks_to_other_zones_after_a_metadata_refresh(cluster, tmp_path, settings, leaks):
    spread_leaders(cluster, "kc", PARTITIONS)
    ports = real_ports(cluster)
    with proxy_on(cluster, tmp_path, settings=settings) as proxy:
        kcat = subprocess.Popen(["kcat", "-P", "-b", proxy.bootstrap, "-t", "kc", "-X", "linger.ms=20",
                                 "-X", f"topic.metadata.refresh.interval.ms={REFRESH_MS}"], stdin=subprocess.PIPE)
        assert kcat.stdin is not None
        written = 0
        try:
            with PeerSampler(kcat.pid, ports.values()) as peers:
                started = time.monotonic()
                while time.monotonic() - started < (LEAK_DEADLINE_S if leaks else 5 * REFRESH_MS / 1000):
                    if brokers_seen(peers, ports) >= {2, 3}:
                        break
                    kcat.stdin.write(b"".join(b"%d\n" % (written + i) for i in range(50)))
                    kcat.stdin.flush()
                    written += 50
                    peers.wait_for_sample()
                kcat.stdin.close()
                assert kcat.wait(30) == 0
        finally:
            if kcat.poll() is None:
                kcat.kill()
                kcat.wait(5)
    assert brokers_seen(peers, ports) == ({1, 2, 3} if leaks else set())


def test_confluent_kafka_follows_a_leader_out_of_the_zone_around_the_proxy(cluster, tmp_path):
    """All partitions led in use1-az1, the client talks to broker 1 only; partition 0's
    leader moves to broker 2 (use1-az2). librdkafka sends its next Metadata request to any
    broker it has a connection to: when that is broker 1, it learns broker 2's real address
    and writes there directly (the leak); when it is the proxy's bootstrap, it learns broker
    2's listener at the proxy and stays behind it. A fresh producer on a fresh topic per
    attempt, until one has leaked (a loaded CI run once asked the proxy, 2026-11-30).
    Records stay exactly once and in order either way."""
    ports = real_ports(cluster)
    attempts = 8
    topics: list[str] = []
    with proxy_on(cluster, tmp_path, settings=ON) as proxy, PeerSampler(os.getpid(), ports.values()) as peers:
        while len(topics) < attempts and 2 not in brokers_seen(peers, ports):
            topic = f"moves{len(topics)}"
            topics.append(topic)
            all_led_by(cluster, topic, 1)
            delivery = Delivery()
            p = producer(proxy.bootstrap)
            produce(p, topic, [(i % PARTITIONS, i) for i in range(600)], delivery)
            assert p.flush(30) == 0
            peers.wait_for_sample()
            if len(topics) == 1:
                assert brokers_seen(peers, ports) <= {1}  # before the move: the zone's broker only
            cluster.set_leader(topic, 0, 2)
            produce(p, topic, [(i % PARTITIONS, i) for i in range(600, 1200)], delivery)
            assert p.flush(30) == 0
            peers.wait_for_sample()
            del p
            want = {part: list(range(part, 1200, PARTITIONS)) for part in range(PARTITIONS)}
            assert not delivery.failed and delivery.acked == want
            assert read_back(cluster.bootstrap, topic, PARTITIONS, 1200) == want
    # broker 2 reached directly: the proxy was not asked. librdkafka may also ask broker 3 for
    # Metadata once it knows the cluster's brokers (a loaded run did: {1, 2, 3}); that is the
    # same leak, not a different outcome.
    assert {1, 2} <= brokers_seen(peers, ports), f"no leak in {len(topics)} producers"


def test_aiokafka_follows_a_leader_out_of_the_zone_around_the_proxy(cluster, tmp_path):
    """aiokafka asks a random known broker for Metadata and keeps open connections, so it
    leaks when it opens a connection after broker 1 answered: here, a producer whose
    partitions are all led by broker 1 sees partition 0 move to broker 2. Measured: about
    one fresh producer in three reaches broker 2 directly, the rest through the proxy (8
    leaks in 25 producers over 8 runs, 2026-11-26); up to `attempts` producers (each on a
    fresh topic) run until one has leaked. 8 attempts missed in ~5 % of runs (0.68**8);
    24 miss in ~0.01 %, and a lucky run still stops at the first leak (~4 s a producer)."""
    ports = real_ports(cluster)
    attempts = 24

    async def one_producer(bootstrap: str, topic: str) -> None:
        p = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True, request_timeout_ms=10_000)
        await p.start()
        try:
            for value in range(60):
                if value == 30:
                    cluster.set_leader(topic, 0, 2)
                await p.send_and_wait(topic, str(value).encode(), partition=value % PARTITIONS)
            peers.wait_for_sample()
        finally:
            await p.stop()

    with proxy_on(cluster, tmp_path, settings=ON) as proxy, PeerSampler(os.getpid(), ports.values()) as peers:
        topics = []
        while len(topics) < attempts and 2 not in brokers_seen(peers, ports):
            topics.append(f"aiomoves{len(topics)}")
            all_led_by(cluster, topics[-1], 1)
            asyncio.run(asyncio.wait_for(one_producer(proxy.bootstrap, topics[-1]), 60))
    want = {part: list(range(part, 60, PARTITIONS)) for part in range(PARTITIONS)}
    for topic in topics:
        assert read_back(cluster.bootstrap, topic, PARTITIONS, 60) == want
    # 2 reached directly (and 3 when aiokafka picked it for a Metadata request)
    assert brokers_seen(peers, ports) >= {1, 2}, f"no leak in {len(topics)} producers"
