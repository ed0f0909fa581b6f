"""Every client of the project's tests through the sidecar in front of Apache Kafka.

A proxy in use1-az1 and agents in use1-az2 and use1-az3 (the WAL on moto); the topics
are placed by the brokers (RF 3, one replica per rack), so a third of the partitions
lead in the proxy's zone (the local route) and two thirds elsewhere (the WAL route).
Each client produces the whole matrix of tests/integration/proxy/clients_matrix.py (acks all with
idempotence, 1 and 0, every compression, keyed and unkeyed), and a consumer on the
cluster itself must find every acknowledged record exactly once, in per-partition order.
The Java clients come from Apache Kafka's own jars: the console producer runs the same
matrix; ProducerPerformance writes numbered records with acks=all and idempotence, and
the Java console consumer reads them back through the sidecar's pass-through.
"""

from __future__ import annotations

from collections import defaultdict

import pytest

from tests.conftest import unique_name
from tests.integration.cluster.conftest import wal_sidecars
from tests.integration.kafka.java_clients import console_consume, console_produce, producer_performance
from tests.integration.proxy.clients_matrix import (
    PARTITIONS,
    RUNS,
    acks_text,
    check_delivery,
    consume_everything,
    produce_aiokafka,
    produce_confluent,
    produce_kafka_python,
    produce_kcat,
    topic_names,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def sidecars(kafka, moto_server, tmp_path_factory):
    bucket = unique_name("wal")
    moto_server.create_bucket(bucket)
    with wal_sidecars(kafka, moto_server, bucket, tmp_path_factory.mktemp("sidecars")) as stack:
        yield stack


def produce_java_console(version: str):
    def produce(bootstrap: str, topics: list[str]) -> None:
        for run in RUNS:
            lines = [(run.key(seq) + b"|" if run.keyed else b"") + run.value(seq) for seq in range(run.count)]
            console_produce(version, bootstrap, topics[run.topic_index], lines,
                            {"acks": acks_text(run.acks), "enable.idempotence": str(run.idempotent).lower(),
                             "compression.type": run.compression, "linger.ms": "5"},
                            key_separator="|" if run.keyed else None)
    return produce


CLIENTS = {
    "confluent-kafka": lambda version: produce_confluent,
    "kafka-python": lambda version: produce_kafka_python,
    "aiokafka": lambda version: produce_aiokafka,
    "kcat": lambda version: produce_kcat,
    "java-console-producer": produce_java_console,
}


def _placed_topics(kafka, prefix: str) -> list[str]:
    topics = topic_names(unique_name(prefix))
    for topic in topics:
        kafka.create_topic(topic, PARTITIONS)  # the brokers place leaders across the racks
    return topics


def check_client_matrix(client: str, kafka, sidecars) -> None:
    topics = _placed_topics(kafka, client)
    racks = {kafka.nodes[b].rack for t in topics for b in kafka.leaders(t).values()}
    assert racks == {"use1-az1", "use1-az2", "use1-az3"}  # both routes are taken
    CLIENTS[client](kafka.version)(sidecars.proxy, topics)
    check_delivery(consume_everything(kafka.bootstrap, topics), topics)


@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_client_matrix_through_the_sidecar_on_kafka(client, kafka, sidecars):
    check_client_matrix(client, kafka, sidecars)


def test_java_producer_performance_idempotent_then_java_consumer_through_the_sidecar(kafka, sidecars):
    check_java_perf_and_consumer(kafka, sidecars)


def check_java_perf_and_consumer(kafka, sidecars) -> None:
    topic = unique_name("perf")
    kafka.create_topic(topic, PARTITIONS)
    records = 20_000
    out = producer_performance(kafka.version, sidecars.proxy, topic, records,
                               {"acks": "all", "enable.idempotence": "true", "linger.ms": "5"})
    assert f"{records} records sent" in out, out[-2000:]
    got = console_consume(kafka.version, sidecars.proxy, topic, records, {"isolation.level": "read_committed"})
    per_partition: dict[int, list[int]] = defaultdict(list)
    for partition, value in got:
        per_partition[partition].append(int(value))
    assert sorted(v for values in per_partition.values() for v in values) == list(range(records))  # each once
    for partition, values in per_partition.items():
        assert values == sorted(values), f"partition {partition} out of order"
