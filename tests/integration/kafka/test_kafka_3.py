"""The wire tests on Apache Kafka 3.9, the 3.x line still common on MSK, so a Kafka
upgrade on the user's side (3.9 -> 4.x, where KIP-896 removed old protocol versions) is
not a surprise: one client of each protocol stack (librdkafka and a pure-Python client
run the produce matrix; the Java producer, ProducerPerformance, and the Java console
consumer through the pass-through), and the WAL path with leaders moved by reassignment. The same checks run on the newest 4.x in their own modules."""

from __future__ import annotations

import pytest

from tests.integration.kafka.conftest import KAFKA_3_VERSION
from tests.integration.kafka.test_clients_on_kafka import check_client_matrix, check_java_perf_and_consumer
from tests.integration.kafka.test_clients_on_kafka import sidecars as sidecars  # the module's proxy and agents
from tests.integration.kafka.test_wal_on_kafka import check_wal_path_with_leaders_moved

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(600)]
KAFKA_GROUP_VERSION = KAFKA_3_VERSION  # tests/conftest.py: runs on the worker that holds the 3.9 cluster


@pytest.fixture(scope="module")
def kafka_version() -> str:
    return KAFKA_3_VERSION


@pytest.mark.parametrize("client", ["confluent-kafka", "kafka-python"])
def test_client_matrix_through_the_sidecar_on_kafka_3(client, kafka, sidecars):
    assert kafka.version == "3.9.1"
    check_client_matrix(client, kafka, sidecars)


def test_java_producer_performance_then_java_consumer_on_kafka_3(kafka, sidecars):
    check_java_perf_and_consumer(kafka, sidecars)


def test_wal_path_with_leaders_moved_by_reassignment_on_kafka_3(kafka, moto_server, tmp_path):
    check_wal_path_with_leaders_moved(kafka, moto_server, tmp_path)
