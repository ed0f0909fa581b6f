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
from tests.proxy.clients_matrix import PARTITIONS, RUNS, Run, check_delivery, consume_everything, topic_names

pytestmark = pytest.mark.integration

PRODUCE_TIMEOUT_S = 60.0


def _fresh_topics(tansu, client: str) -> list[str]:
    topics = topic_names(unique_name(client))
    create_topics(tansu.bootstrap, {t: PARTITIONS for t in topics})
    return topics


def _acks_text(acks: int) -> str:
    return "all" if acks == -1 else str(acks)


def test_confluent_kafka_through_proxy(tansu, proxy):
    from confluent_kafka import Producer

    topics = _fresh_topics(tansu, "ck")
    for run in RUNS:
        errors: list = []
        producer = Producer({
            "bootstrap.servers": proxy.bootstrap, "acks": _acks_text(run.acks),
            "enable.idempotence": run.idempotent, "compression.type": run.compression,
            "linger.ms": 5, "partitioner": "murmur2_random",
        })
        for seq in range(run.count):
            producer.produce(topics[run.topic_index], value=run.value(seq), key=run.key(seq),
                             on_delivery=lambda err, _msg: errors.append(err) if err else None)
            producer.poll(0)
        assert producer.flush(PRODUCE_TIMEOUT_S) == 0, f"{run.name}: undelivered records"
        assert errors == [], f"{run.name}: {errors[:3]}"
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
    check_delivery(consume_everything(tansu.bootstrap, topics), topics, runs=(defaults,))


def test_kafka_python_through_proxy(tansu, proxy):
    from kafka import KafkaProducer

    topics = _fresh_topics(tansu, "kp")
    for run in RUNS:
        producer = KafkaProducer(
            bootstrap_servers=proxy.bootstrap, acks="all" if run.acks == -1 else run.acks,
            enable_idempotence=run.idempotent,
            compression_type=None if run.compression == "none" else run.compression, linger_ms=5)
        try:
            futures = [producer.send(topics[run.topic_index], value=run.value(seq), key=run.key(seq))
                       for seq in range(run.count)]
            producer.flush(timeout=PRODUCE_TIMEOUT_S)
            if run.acks != 0:
                for f in futures:
                    f.get(timeout=PRODUCE_TIMEOUT_S)  # raises the broker's error, if any
        finally:
            producer.close(timeout=10)
    check_delivery(consume_everything(tansu.bootstrap, topics), topics)


def test_aiokafka_through_proxy(tansu, proxy):
    from aiokafka import AIOKafkaProducer

    topics = _fresh_topics(tansu, "aio")

    async def produce_all() -> None:
        for run in RUNS:
            producer = AIOKafkaProducer(
                bootstrap_servers=proxy.bootstrap, acks="all" if run.acks == -1 else run.acks,
                enable_idempotence=run.idempotent,
                compression_type=None if run.compression == "none" else run.compression, linger_ms=5)
            await producer.start()
            try:
                futures = [await producer.send(topics[run.topic_index], value=run.value(seq), key=run.key(seq))
                           for seq in range(run.count)]
                async with asyncio.timeout(PRODUCE_TIMEOUT_S):
                    await asyncio.gather(*futures)  # raises the broker's error, if any
            finally:
                await producer.stop()

    asyncio.run(produce_all())
    check_delivery(consume_everything(tansu.bootstrap, topics), topics)


def test_kcat_through_proxy(tansu, proxy):
    topics = _fresh_topics(tansu, "kcat")
    for run in RUNS:
        # kcat reads one record per line; -K splits key and value at the first ':'.
        lines = [(run.key(seq) + b"|" if run.keyed else b"") + run.value(seq) for seq in range(run.count)]
        cmd = ["kcat", "-P", "-b", proxy.bootstrap, "-t", topics[run.topic_index],
               "-X", f"acks={_acks_text(run.acks)}", "-X", f"enable.idempotence={str(run.idempotent).lower()}",
               "-X", f"compression.codec={run.compression}", "-X", "linger.ms=5",
               "-X", "partitioner=murmur2_random"]
        if run.keyed:
            cmd += ["-K", "|"]
        done = subprocess.run(cmd, input=b"\n".join(lines) + b"\n", capture_output=True, timeout=PRODUCE_TIMEOUT_S)
        assert done.returncode == 0, f"{run.name}: kcat failed: {done.stderr.decode(errors='replace')[-2000:]}"
        assert b"ERROR" not in done.stderr and b"error" not in done.stderr.lower(), done.stderr[-2000:]
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
