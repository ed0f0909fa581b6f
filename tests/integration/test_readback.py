"""tests/integration/readback.py against a Tansu broker on S3 (moto): it reads every record, also those
ListOffsets does not count (its "latest" is the base offset + 1 of the batch S3 lists as
last modified, at one-second resolution)."""

from __future__ import annotations

import pytest

from tests.conftest import create_topics, unique_name
from tests.integration.readback import read_partitions

pytestmark = pytest.mark.integration

BATCHES = 6


def test_read_partitions_reads_the_batches_of_the_last_second(tansu_shared_bucket):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    [broker] = tansu_shared_bucket(1)
    topic = unique_name("readback")
    create_topics(broker.bootstrap, {topic: 1})
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all", linger_ms=0)
    try:
        offsets = [producer.send(topic, f"r{i}".encode(), partition=0).get(timeout=10).offset
                   for i in range(BATCHES)]  # one batch each: .get() waits for its answer
    finally:
        producer.close()
    assert offsets == [0, 1, 2, 3, 4, 5]
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None)
    try:
        listed = consumer.end_offsets([TopicPartition(topic, 0)])[TopicPartition(topic, 0)]
    finally:
        consumer.close()
    assert 1 <= listed <= BATCHES  # short of 6 when batches share the last second (most runs)

    records = read_partitions(broker.bootstrap, [(topic, 0)], timeout_s=30)

    assert [(r.offset, r.value) for r in records[(topic, 0)]] == [
        (0, b"r0"), (1, b"r1"), (2, b"r2"), (3, b"r3"), (4, b"r4"), (5, b"r5")]
