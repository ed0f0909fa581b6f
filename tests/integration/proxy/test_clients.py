"""Real producers through a real proxy process into Tansu, checked by a direct consumer.

Each of confluent-kafka, kafka-python, aiokafka and kcat produces the whole matrix in
clients_matrix.RUNS (11,500 records: acks all+idempotent / 1 / 0, every compression,
keyed and unkeyed, three 6-partition topics); a kafka-python consumer reading Tansu
directly must then find every acknowledged record exactly once, in per-partition order.
"""

from __future__ import annotations

import asyncio
import subprocess

import pytest

from tests.conftest import create_topics, unique_name
from tests.integration.proxy.clients_matrix import (
    PARTITIONS,
    PRODUCE_TIMEOUT_S,
    Run,
    check_delivery,
    consume_everything,
    produce_aiokafka,
    produce_confluent,
    produce_kafka_python,
    produce_kcat,
    topic_names,
)

pytestmark = pytest.mark.integration


def _fresh_topics(tansu, client: str) -> list[str]:
    topics = topic_names(unique_name(client))
    create_topics(tansu.bootstrap, {t: PARTITIONS for t in topics})
    return topics


def test_confluent_kafka_through_proxy(tansu, proxy):
    topics = _fresh_topics(tansu, "ck")
    produce_confluent(proxy.bootstrap, topics)
    check_delivery(consume_everything(tansu.bootstrap, topics), topics)


def test_confluent_kafka_with_default_settings_works_unchanged(tansu, proxy):
    """Only bootstrap.servers set: librdkafka's defaults (acks=all, no idempotence, no
    compression, its own partitioner) must work against the sidecar as against a broker."""
    from confluent_kafka import Producer

    defaults = Run("defaults", -1, False, "none", True, 0, 1000)  # what librdkafka uses unset
    topics = _fresh_topics(tansu, "ckdef")
    errors: list = []
    producer = Producer({"bootstrap.servers": proxy.bootstrap})
    for seq in range(defaults.count):
        producer.produce(topics[0], value=defaults.value(seq), key=defaults.key(seq),
                         on_delivery=lambda err, _msg: errors.append(err) if err else None)
        producer.poll(0)
    assert producer.flush(PRODUCE_TIMEOUT_S) == 0, "undelivered records"
    assert errors == [], errors[:3]
    check_delivery(consume_everything(tansu.bootstrap, topics, runs=(defaults,)), topics, runs=(defaults,))


def test_kafka_python_through_proxy(tansu, proxy):
    topics = _fresh_topics(tansu, "kp")
    produce_kafka_python(proxy.bootstrap, topics)
    check_delivery(consume_everything(tansu.bootstrap, topics), topics)


def test_aiokafka_through_proxy(tansu, proxy):
    topics = _fresh_topics(tansu, "aio")
    produce_aiokafka(proxy.bootstrap, topics)
    check_delivery(consume_everything(tansu.bootstrap, topics), topics)


def test_kcat_through_proxy(tansu, proxy):
    topics = _fresh_topics(tansu, "kcat")
    produce_kcat(proxy.bootstrap, topics)
    check_delivery(consume_everything(tansu.bootstrap, topics), topics)


# --- why the proxy answers ApiVersions itself and bridges InitProducerId -------------------

def test_aiokafka_idempotent_fails_against_tansu_directly(tansu):
    """aiokafka sends InitProducerId v0, which Tansu 0.6 answers with UNKNOWN_SERVER_ERROR;
    test_aiokafka_through_proxy shows the proxy bridging it."""
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import UnknownError

    topic = unique_name("aio-direct")
    create_topics(tansu.bootstrap, {topic: 1})

    async def produce_one() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=tansu.bootstrap, enable_idempotence=True,
                                    request_timeout_ms=5000)
        await producer.start()
        try:
            async with asyncio.timeout(15):
                await producer.send_and_wait(topic, b"v")
        finally:
            await producer.stop()

    with pytest.raises(UnknownError):  # error code -1, UNKNOWN_SERVER_ERROR
        asyncio.run(produce_one())


def test_kcat_fails_against_tansu_directly(tansu):
    """Debian's kcat (librdkafka 2.0) cannot negotiate ApiVersions with Tansu ("Read underflow");
    test_kcat_through_proxy shows it working through the proxy, which answers ApiVersions itself."""
    topic = unique_name("kcat-direct")
    create_topics(tansu.bootstrap, {topic: 1})
    done = subprocess.run(["kcat", "-P", "-b", tansu.bootstrap, "-t", topic, "-X", "message.timeout.ms=5000"],
                          input=b"v\n", capture_output=True, timeout=30)
    assert done.returncode != 0
    assert b"ApiVersionRequest failed: Local: Read underflow" in done.stderr, done.stderr[-2000:]
