"""Fixtures for tests against Apache Kafka: three KRaft nodes, racks use1-az1/az2/az3.

One cluster per test module where the tests only create their own topics and move
leaders (`kafka`); a test that kills or stops brokers takes a cluster of its own
(`own_kafka`). Both are deploy/local/kafka_cluster.py's, as in the demo.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from deploy.local.kafka_cluster import KafkaCluster, start_kafka_cluster

ZONES = {1: "use1-az1", 2: "use1-az2", 3: "use1-az3"}  # node id -> rack; proxies in these tests run in use1-az1


@pytest.fixture(scope="module")
def kafka(tmp_path_factory) -> Iterator[KafkaCluster]:
    with start_kafka_cluster(tuple(ZONES.values()), log_dir=tmp_path_factory.mktemp("kafka")) as cluster:
        yield cluster


@pytest.fixture
def own_kafka(tmp_path) -> Iterator[KafkaCluster]:
    with start_kafka_cluster(tuple(ZONES.values()), log_dir=tmp_path / "kafka") as cluster:
        yield cluster


def spread_leaders(cluster: KafkaCluster, topic: str, partitions: int,
                   configs: dict[str, str] | None = None) -> dict[int, int]:
    """Create `topic` (RF 3) with partition p led by node p % 3 + 1; returns {partition: node}.

    The replica lists are given so the leader of each partition is known by construction;
    each holds all three racks, as the brokers' rack-aware placement would.
    """
    assignments = {p: [p % 3 + 1, (p + 1) % 3 + 1, (p + 2) % 3 + 1] for p in range(partitions)}
    state = cluster.create_topic(topic, partitions, assignments=assignments, configs=configs)
    leaders = {p: s["leader"] for p, s in state.items()}
    assert leaders == {p: p % 3 + 1 for p in range(partitions)}, state
    return leaders
