"""The local environment itself: moto answers S3 over HTTP, Tansu answers Kafka."""

from __future__ import annotations

import pytest

from tests.conftest import create_topics, unique_name

pytestmark = pytest.mark.integration


def test_moto_round_trip(s3_bucket):
    server, bucket = s3_bucket
    s3 = server.client()
    s3.put_object(Bucket=bucket, Key="k", Body=b"payload")
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"payload"


def test_two_tansu_brokers_share_a_bucket(tansu_shared_bucket):
    from kafka import KafkaProducer

    a, b = tansu_shared_bucket(2)
    topic = unique_name("shared")
    create_topics(a.bootstrap, {topic: 2})
    producer_a = KafkaProducer(bootstrap_servers=a.bootstrap, acks="all")
    producer_b = KafkaProducer(bootstrap_servers=b.bootstrap, acks="all")
    try:
        first = producer_a.send(topic, b"one", partition=1).get(timeout=10)
        second = producer_b.send(topic, b"two", partition=1).get(timeout=10)
    finally:
        producer_a.close()
        producer_b.close()
    # Both brokers append to the same log: offsets continue across them.
    assert (first.offset, second.offset) == (0, 1)
