"""Client compatibility of the same-zone bypass, against Tansu (one broker, put in the
proxy's zone with router.broker_zones): with the bypass every request of a producer goes to
the broker itself, so whatever the proxy bridges for a client is lost.

kafka-python works against Tansu directly and so through the bypass; Debian's kcat
(librdkafka 2.0) and an idempotent aiokafka producer fail against Tansu directly
(tests/integration/proxy/test_clients.py) and fail the same way through the bypass, while through the
proxy without it they work (test_kcat_through_proxy, test_aiokafka_through_proxy).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import struct
import subprocess
from collections.abc import Iterator

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.errors import UnknownError
from kafka import KafkaProducer
from kafka.protocol.metadata import MetadataRequest, MetadataResponse

from deploy.local.sidecar_stack import to_toml
from tests.conftest import create_topics, unique_name
from tests.integration.cluster.peers import PeerSampler
from tests.integration.proxy.clients_matrix import PARTITIONS, consume_everything
from tests.integration.proxy.conftest import ProxyProcess, start_proxy
from tests.integration.proxy.kafka_wire import encode

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def tansu_node_id(bootstrap: str) -> int:
    """The broker's node id, from its own Metadata answer."""
    host, _, port = bootstrap.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(encode(MetadataRequest(topics=[], allow_auto_topic_creation=False), 1, 1))
        frame = b""
        while len(frame) < 4 or len(frame) < 4 + struct.unpack_from(">i", frame)[0]:
            chunk = sock.recv(65536)
            assert chunk
            frame += chunk
    [broker] = MetadataResponse.decode(frame[8:], version=1).brokers
    return int(broker.node_id)


@contextlib.contextmanager
def bypassing_proxy(tansu, tmp_path) -> Iterator[ProxyProcess]:
    config = tmp_path / "bypass.toml"
    config.write_text(to_toml({"audit": {"output": str(tmp_path / "audit")},
                               "proxy": {"broker_listeners": True, "bypass_same_zone": True},
                               "router": {"broker_zones": {str(tansu_node_id(tansu.bootstrap)): "use1-az1"}}}))
    with start_proxy(tansu.bootstrap, tmp_path, config_file=config) as proxy:
        yield proxy


def test_kafka_python_writes_to_tansu_itself_through_the_bypass(tansu, tmp_path):
    topic = unique_name("kp-bypass")
    create_topics(tansu.bootstrap, {topic: PARTITIONS})
    tansu_port = int(tansu.bootstrap.rpartition(":")[2])
    with bypassing_proxy(tansu, tmp_path) as proxy, PeerSampler(os.getpid(), [tansu_port]) as peers:
        producer = KafkaProducer(bootstrap_servers=proxy.bootstrap, acks="all", linger_ms=5)
        try:
            futures = [producer.send(topic, f"v{i}".encode(), partition=i % PARTITIONS) for i in range(150)]
            producer.flush(30)
            assert all(f.succeeded() for f in futures)
            peers.wait_for_sample()
        finally:
            producer.close(10)
    assert peers.seen == {tansu_port}  # kafka-python talked to the broker itself
    got = consume_everything(tansu.bootstrap, [topic], runs=())  # values v<i>, not a matrix run's
    assert {tp[1]: [v for _, v in records] for tp, records in got.items()} == {
        p: [f"v{i}".encode() for i in range(p, 150, PARTITIONS)] for p in range(PARTITIONS)}


def test_kcat_fails_through_the_bypass_as_against_tansu_directly(tansu, tmp_path):
    topic = unique_name("kcat-bypass")
    create_topics(tansu.bootstrap, {topic: 1})
    with bypassing_proxy(tansu, tmp_path) as proxy:
        done = subprocess.run(["kcat", "-P", "-b", proxy.bootstrap, "-t", topic, "-X", "message.timeout.ms=5000"],
                              input=b"v\n", capture_output=True, timeout=30)
    assert done.returncode != 0
    assert b"Read underflow" in done.stderr, done.stderr[-2000:]


def test_idempotent_aiokafka_fails_through_the_bypass_as_against_tansu_directly(tansu, tmp_path):
    topic = unique_name("aio-bypass")
    create_topics(tansu.bootstrap, {topic: 1})

    async def produce_one(bootstrap: str) -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True, request_timeout_ms=5000)
        try:
            await producer.start()
            async with asyncio.timeout(15):
                await producer.send_and_wait(topic, b"v")
        finally:
            await producer.stop()

    with bypassing_proxy(tansu, tmp_path) as proxy, pytest.raises(UnknownError):  # InitProducerId v0 at Tansu
        asyncio.run(produce_one(proxy.bootstrap))
