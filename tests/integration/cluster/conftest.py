"""Fixtures for tests against a real multi-broker cluster: librdkafka's mock cluster.

Three brokers (ids 1, 2, 3) on loopback ports in their own process
(deploy/local/mock_cluster.py), racks use1-az1/az2/az3, so the rack path of the router
(production's) is what these tests exercise. Each test gets a fresh cluster: tests move
leaders, set brokers down and hang them.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import confluent_kafka
import pytest

from deploy.local.mock_cluster import MockCluster, start_mock_cluster
from deploy.local.processes import DUMMY_CREDENTIALS, STARTUP_TIMEOUT_S, free_port, stop_process, wait_for_port
from deploy.local.sidecar_stack import to_toml
from tests.integration.proxy.conftest import ProxyProcess, start_proxy

ZONES = {1: "use1-az1", 2: "use1-az2", 3: "use1-az3"}  # broker id -> rack; the proxy runs in use1-az1
SIDECAR_START_S = STARTUP_TIMEOUT_S  # interpreter start, imports, WAL epoch registration
SIDECAR_STOP_S = 15.0  # the proxy drains, the WAL writer flushes


@pytest.fixture
def cluster(tmp_path) -> Iterator[MockCluster]:
    with start_mock_cluster(3, racks=ZONES, log_dir=tmp_path) as c:
        yield c


def spread_leaders(cluster: MockCluster, topic: str, partitions: int) -> dict[int, int]:
    """Create `topic` with partition p led by broker p % 3 + 1; returns {partition: broker}."""
    cluster.create_topic(topic, partitions)
    leaders = {p: p % 3 + 1 for p in range(partitions)}
    for p, broker in leaders.items():
        cluster.set_leader(topic, p, broker)
    return leaders


@contextlib.contextmanager
def proxy_on(cluster: MockCluster, log_dir: Path, bootstrap: str | None = None,
             settings: Mapping[str, Mapping] | None = None, port: int = 0,
             produce_detail: str | None = "batch") -> Iterator[ProxyProcess]:
    """An `azsidecar proxy` process in zone use1-az1 in front of the cluster (on `port`, 0: a free one).
    `produce_detail`: audit.produce_detail ("batch" by default: the tests follow single
    batches; None leaves the product's default)."""
    audit = {"output": str(log_dir / "audit")}
    if produce_detail is not None:
        audit["produce_detail"] = produce_detail
    config: dict[str, dict] = {"audit": audit}
    for section, values in (settings or {}).items():
        config[section] = {**config.get(section, {}), **values}
    path = log_dir / "proxy.toml"
    path.write_text(to_toml(config))
    with start_proxy(bootstrap or cluster.bootstrap, log_dir, config_file=path, port=port) as proxy:
        yield proxy


@dataclass
class Delivery:
    """What one producer run got back: acknowledged values per partition, and failures."""

    acked: dict[int, list[int]] = field(default_factory=dict)
    failed: list[str] = field(default_factory=list)
    acked_at: dict[int, float] = field(default_factory=dict)  # value -> monotonic time of its ack


def producer(bootstrap: str, **extra) -> confluent_kafka.Producer:
    return confluent_kafka.Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                                     "linger.ms": 5, "message.timeout.ms": 60_000, **extra})


def produce(p: confluent_kafka.Producer, topic: str, values: Iterable[tuple[int, int]], out: Delivery) -> None:
    """Queue (partition, value) records; acks and failures land in `out` as they come."""
    def report(err, msg) -> None:
        if err is not None:
            out.failed.append(f"{msg.partition()}:{msg.value()!r}: {err}")
            return
        value = int(msg.value())
        out.acked.setdefault(msg.partition(), []).append(value)
        out.acked_at[value] = time.monotonic()

    for partition, value in values:
        p.produce(topic, str(value).encode(), partition=partition, on_delivery=report)
        p.poll(0)


def read_back(bootstrap: str, topic: str, partitions: int, expected: int, timeout_s: float = 30.0) -> dict[int, list[int]]:
    """Every record of the topic, per partition in log order, read from the cluster itself."""
    return read_partitions(bootstrap, topic, list(range(partitions)), expected, timeout_s)


def read_partitions(bootstrap: str, topic: str, partitions: list[int], expected: int,
                    timeout_s: float = 30.0) -> dict[int, list[int]]:
    """Every committed record of these partitions, in log order: `expected` of them, then on
    to each partition's log end (so a duplicate after them shows too), within timeout_s.

    Kept by offset: a record the consumer is handed twice (a fetch re-sent after a broker
    came back) is one record of the log, and a duplicate in the log has an offset of its own."""
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": f"verify-{topic}",
                                         "enable.auto.commit": False, "isolation.level": "read_committed"})
    consumer.assign([confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
                     for p in partitions])
    got: dict[int, dict[int, int]] = {}  # partition -> offset -> value
    deadline = time.monotonic() + timeout_s
    try:
        while sum(map(len, got.values())) < expected and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and not msg.error():
                got.setdefault(msg.partition(), {})[msg.offset()] = int(msg.value())
        # then on to each partition's log end, so a duplicate after the expected records shows too
        ends = {p: consumer.get_watermark_offsets(confluent_kafka.TopicPartition(topic, p), timeout=10)[1]
                for p in partitions}
        while time.monotonic() < deadline:
            positions = consumer.position([confluent_kafka.TopicPartition(topic, p) for p in partitions])
            if all(tp.offset >= ends[tp.partition] or (tp.offset < 0 and ends[tp.partition] == 0) for tp in positions):
                break
            msg = consumer.poll(0.2)
            if msg is not None and not msg.error():
                got.setdefault(msg.partition(), {})[msg.offset()] = int(msg.value())
    finally:
        consumer.close()
    return {p: [values[o] for o in sorted(values)] for p, values in got.items()}


@dataclass
class WalSidecars:
    proxy: str  # the zone-1 proxy's bootstrap
    audit_dir: Path
    logs: dict[str, Path]


@contextlib.contextmanager
def wal_sidecars(cluster: MockCluster, moto, bucket: str, log_dir: Path, policy: str = "wal",
                 agent_counts: Mapping[str, int] | None = None,
                 settings: Mapping[str, Mapping] | None = None) -> Iterator[WalSidecars]:
    """A proxy in use1-az1 and agents in use1-az2 and use1-az3 (`agent_counts` per zone, one
    each by default), as `azsidecar` processes in front of the cluster; the WAL in `bucket`
    on the moto server. `settings`: more settings by section, for every process."""
    counts = agent_counts or {ZONES[2]: 1, ZONES[3]: 1}
    addresses = {zone: [f"127.0.0.1:{free_port()}" for _ in range(n)] for zone, n in counts.items()}
    agents: dict[str, str | list[str]] = {zone: a[0] if len(a) == 1 else a for zone, a in addresses.items()}
    proxy_port = free_port()
    audit_dir = log_dir / "audit"
    env = {**os.environ, **DUMMY_CREDENTIALS, "AZSIDECAR_NOTIFY_HMAC_KEYS": secrets.token_hex(24),
           "AWS_DEFAULT_REGION": "us-east-1"}

    def config(zone: str, address: str) -> dict:
        host, _, port = address.rpartition(":")
        base = {"zone": zone,
                "proxy": {"listen_host": "127.0.0.1", "listen_port": proxy_port, "proxy_id": f"proxy-{zone}"},
                "upstream": {"bootstrap_servers": list(cluster.bootstraps)},
                "router": {"policy": policy},
                "wal": {"bucket": bucket, "region": "us-east-1", "endpoint_url": moto.endpoint_url, "linger_ms": 20},
                "notify": {"agents": agents},
                "agent": {"listen_host": host, "listen_port": int(port)},
                "audit": {"output": str(audit_dir), "produce_detail": "batch",  # tests read single batches
                          "object_detail": "object"}}  # and single objects
        for section, values in (settings or {}).items():
            base[section] = {**base.get(section, {}), **values}
        return base

    logs: dict[str, Path] = {}
    with contextlib.ExitStack() as stack:
        def launch(role: str, zone: str, address: str, name: str) -> None:
            path = log_dir / f"{name}.toml"
            path.write_text(to_toml(config(zone, address)))
            port = int(address.rpartition(":")[2])
            logs[name] = log_path = log_dir / f"{name}.log"
            with open(log_path, "wb") as out:
                proc = subprocess.Popen([sys.executable, "-m", "azsidecar", role, "--config", str(path)],
                                        stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
            stack.callback(stop_process, proc, SIDECAR_STOP_S)
            wait_for_port("127.0.0.1", port, proc, SIDECAR_START_S, f"azsidecar {role} {zone}", log_path)

        for zone, listed in addresses.items():
            for i, address in enumerate(listed):
                launch("agent", zone, address, f"agent-{zone}" if len(listed) == 1 else f"agent-{zone}-{i}")
        launch("proxy", ZONES[1], f"127.0.0.1:{proxy_port}", f"proxy-{ZONES[1]}")
        yield WalSidecars(f"127.0.0.1:{proxy_port}", audit_dir, logs)
