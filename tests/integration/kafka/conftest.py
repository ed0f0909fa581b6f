"""Fixtures for tests against Apache Kafka: three KRaft nodes, racks use1-az1/az2/az3.

One cluster per version, shared by the session's modules, where the tests only create
their own topics and move leaders (`kafka`); a test that kills or stops brokers takes a cluster of its own
(`own_kafka`). Both are deploy/local/kafka_cluster.py's, as in the demo. A module runs
on another Apache Kafka version by overriding the `kafka_version` fixture (the newest
pinned by default; test_kafka_3.py runs the wire tests on 3.9).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from deploy.local.kafka_cluster import KafkaCluster, start_kafka_cluster
from deploy.local.kafka_jars import KAFKA_3_VERSION, KAFKA_VERSION
from tests.conftest import shared_environment, shed_topics

__all__ = ["KAFKA_3_VERSION", "KAFKA_VERSION"]

ZONES = {1: "use1-az1", 2: "use1-az2", 3: "use1-az3"}  # node id -> rack; proxies in these tests run in use1-az1


# Two broker versions: the newest 4.x and the 3.x line still common on MSK.
VERSIONS = (KAFKA_VERSION, KAFKA_3_VERSION)


@pytest.fixture(scope="module")
def kafka_version() -> str:
    return KAFKA_VERSION


@pytest.fixture(scope="module")
def kafka(kafka_version, _shared_stacks, tmp_path_factory, request) -> KafkaCluster:
    """The version's cluster, shared by the tests of its group (they make their own topics
    and move leaders), stopped when the group ends (tests/conftest.py)."""
    cluster = shared_environment(
        _shared_stacks, f"kafka-{kafka_version}", request.node.nodeid,
        lambda: start_kafka_cluster(tuple(ZONES.values()), version=kafka_version,
                                    log_dir=tmp_path_factory.mktemp(f"kafka-{kafka_version}")))
    assert all(node.running for node in cluster.nodes.values()), "a shared cluster lost a node"
    return cluster


@pytest.fixture(autouse=True)
def _shed_topics_of_the_shared_cluster(request) -> Iterator[None]:
    """Each test on the version's shared cluster leaves it without its topics."""
    yield
    if "kafka" in request.fixturenames:
        shed_topics(request.getfixturevalue("kafka"))


@pytest.fixture
def own_kafka(kafka) -> Iterator[KafkaCluster]:
    """The shared cluster for a test that stops or kills nodes: every node it left down is
    started again after it, so the next test finds three nodes even after a failure. (A
    cluster of its own cost each such test a three-JVM start: ~12 CPU-s.)"""
    try:
        yield kafka
    finally:
        for node_id, node in kafka.nodes.items():
            if not node.running:
                kafka.start_node(node_id)


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
