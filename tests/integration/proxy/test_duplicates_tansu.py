"""A leader's DUPLICATE_SEQUENCE_NUMBER is checked against its log, on both paths, with real Tansu.

Tansu (s3 engine) records a producer's sequence, then the watermark, then writes the batch
object; a broker stopped in between keeps the sequence without the batch (finding 1 in
docs/reliability.md; bench/tansu_restart_dups.py reproduces it with a SIGTERM restart).
These tests make that state deterministically: they delete the last batch's object from
the broker's bucket, which is exactly what the interrupted write leaves behind. Tansu then
answers the batch's retry "duplicate"; the proxy and the agent must not call it written.
"""

from __future__ import annotations

import asyncio

import pytest
import trio
from kafka.protocol.producer import ProduceResponse

from core import errors
from kafka_upstream.config import UpstreamConfig
from leader_notify.agent.appender import KafkaAppender
from proxy.config import ProxyConfig
from proxy.startup import run_proxy
from tests.conftest import create_topics, unique_name
from tests.integration.leader_notify.helpers import consume, new_producer_id
from tests.integration.proxy.kafka_wire import Wire, produce_request, record_batch

pytestmark = [pytest.mark.integration]

RECORDS_PER_BATCH = 3


def idempotent_batches(pid: int, epoch: int, count: int) -> list[bytes]:
    return [record_batch([f"b{i}-r{j}".encode() for j in range(RECORDS_PER_BATCH)], pid, epoch, i * RECORDS_PER_BATCH)
            for i in range(count)]


def drop_last_batch_object(server, bucket: str, topic: str) -> str:
    """Delete the newest batch object of `topic`-0 in Tansu's bucket; returns its key."""
    s3 = server.client()
    keys = sorted(o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix="clusters/")["Contents"]
                  if f"/topics/{topic}/partitions/0000000000/records/" in o["Key"])
    s3.delete_object(Bucket=bucket, Key=keys[-1])
    return keys[-1]


def answer(response) -> tuple[int, int, str | None]:
    p = response.responses[0].partition_responses[0]
    return p.error_code, p.base_offset, p.error_message


@pytest.fixture
def s3_broker(s3_bucket, tansu_shared_bucket):
    server, _ = s3_bucket
    (broker,) = tansu_shared_bucket(1)
    bucket = broker.storage.removeprefix("s3://").rstrip("/")
    topic = unique_name("dup")
    create_topics(broker.bootstrap, {topic: 1})
    pid, epoch = new_producer_id(broker.bootstrap)
    return server, bucket, broker, topic, pid, epoch


@pytest.mark.trio
async def test_proxy_direct_path_verifies_duplicates(nursery, s3_broker):
    server, bucket, broker, topic, pid, epoch = s3_broker
    batches = idempotent_batches(pid, epoch, 5)
    _server, port = await nursery.start(run_proxy, ProxyConfig(listen_port=0),
                                        UpstreamConfig(bootstrap_servers=(broker.bootstrap,)))
    wire = await Wire.connect(port)
    got = []
    for i, b in enumerate(batches):
        await wire.send(produce_request(i + 1, 9, -1, {(topic, 0): b}))
        got.append(answer((await wire.read_response(ProduceResponse, 9))[1])[:2])
    assert got == [(0, 0), (0, 3), (0, 6), (0, 9), (0, 12)]

    # A real duplicate (the leader has it): success with the batch's own offset.
    await wire.send(produce_request(10, 9, -1, {(topic, 0): batches[2]}))
    assert answer((await wire.read_response(ProduceResponse, 9))[1])[:2] == (errors.NONE, 6)

    # The leader lost the last batch but kept its sequence: straight to the broker the
    # retry is "duplicate" (what librdkafka counts as delivered) ...
    await trio.to_thread.run_sync(drop_last_batch_object, server, bucket, topic)
    direct = await Wire.connect(int(broker.bootstrap.rpartition(":")[2]))
    await direct.send(produce_request(1, 9, -1, {(topic, 0): batches[4]}))
    assert answer((await direct.read_response(ProduceResponse, 9))[1])[0] == errors.DUPLICATE_SEQUENCE_NUMBER
    await direct.aclose()
    # ... through the proxy it fails, and not retriably: no retry with that sequence can land.
    await wire.send(produce_request(11, 9, -1, {(topic, 0): batches[4]}))
    code, _offset, message = answer((await wire.read_response(ProduceResponse, 9))[1])
    assert code == errors.UNKNOWN_SERVER_ERROR
    assert f"producer {pid} sequence 12" in message
    await wire.aclose()
    values = [v for _o, v in await trio.to_thread.run_sync(consume, broker.bootstrap, topic, 0)]
    assert values == [f"b{i}-r{j}".encode() for i in range(4) for j in range(RECORDS_PER_BATCH)]


def test_agent_append_verifies_duplicates(s3_broker):
    server, bucket, broker, topic, pid, epoch = s3_broker
    batches = idempotent_batches(pid, epoch, 5)

    async def run():
        async with KafkaAppender([broker.bootstrap], max_attempts=2) as appender:
            first = [await appender.append(topic, 0, b) for b in batches]
            again = await appender.append(topic, 0, batches[2])
            await asyncio.to_thread(drop_last_batch_object, server, bucket, topic)
            lost = await appender.append(topic, 0, batches[4])
            still_there = await appender.append(topic, 0, batches[3])
            return first, again, lost, still_there

    first, again, lost, still_there = asyncio.run(run())
    assert [(r.error_code, r.base_offset, r.duplicate) for r in first] == [
        (0, 0, False), (0, 3, False), (0, 6, False), (0, 9, False), (0, 12, False)]
    assert (again.error_code, again.base_offset, again.duplicate) == (errors.NONE, 6, True)
    assert (lost.error_code, lost.duplicate) == (errors.UNKNOWN_SERVER_ERROR, False)
    # The batch before the hole is still found (the search reads past where the log ends early).
    assert (still_there.error_code, still_there.base_offset, still_there.duplicate) == (errors.NONE, 9, True)
