"""KafkaAppender against a real Tansu broker: a lone append, concurrent appends coalesced per
request with each partition's order kept, and batches queued behind a request in flight
still sent when the caller whose batch is in that request is cancelled."""

from __future__ import annotations

import asyncio

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder

from leader_notify.agent.appender import KafkaAppender, PartitionRun
from leader_notify.agent.produce_channel import channel_version
from tests.asyncio_idle import all_tasks_blocked
from tests.conftest import create_topics, unique_name
from tests.integration.leader_notify.helpers import consume

pytestmark = pytest.mark.integration


def batch(value: bytes) -> bytes:
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    builder.append(0, timestamp=None, key=None, value=value, headers=[])
    return bytes(builder.build())


def counting_sends(appender: KafkaAppender, gate: asyncio.Event | None = None) -> list:
    """Wrap the appender's ProduceRequest sender: records each request's partitions,
    optionally holding every send until `gate` is set."""
    sent: list = []
    real_send = appender._send

    async def send(client, node, topics, *, pipelined):
        sent.append(sorted((topic, p) for topic, parts in topics for p, _b in parts))
        if gate is not None:
            await gate.wait()
        return await real_send(client, node, topics, pipelined=pipelined)

    appender._send = send
    return sent


def test_lone_and_concurrent_appends_keep_each_partitions_order(tansu):
    topic = unique_name("appender")
    create_topics(tansu.bootstrap, {topic: 3})

    async def run():
        async with KafkaAppender([tansu.bootstrap]) as appender:
            sent = counting_sends(appender)
            lone = await appender.append(topic, 0, batch(b"lone"))

            async def partition(p: int) -> list[int]:
                return [(await appender.append(topic, p, batch(f"{p}-{i}".encode()))).base_offset for i in range(4)]

            offsets = await asyncio.gather(*(partition(p) for p in range(3)))
            return lone, offsets, sent

    lone, offsets, sent = asyncio.run(run())
    assert (lone.error_code, lone.base_offset) == (0, 0)
    assert offsets == [[1, 2, 3, 4], [0, 1, 2, 3], [0, 1, 2, 3]]  # partition 0 had the lone batch first
    assert sent[0] == [(topic, 0)]  # the lone append: its own request
    assert len(sent) < 1 + 12  # concurrent batches of different partitions shared requests
    assert all(len(parts) == len(set(parts)) for parts in sent)  # never two batches of one partition


def test_a_cancelled_caller_does_not_hold_up_the_batches_queued_behind_its_request(tansu):
    topic = unique_name("appender")
    create_topics(tansu.bootstrap, {topic: 2})

    async def run():
        async with KafkaAppender([tansu.bootstrap]) as appender:
            await appender.append(topic, 0, batch(b"warm-up"))  # connection and metadata ready
            gate = asyncio.Event()
            sent = counting_sends(appender, gate)
            first = asyncio.create_task(appender.append(topic, 0, batch(b"first")))
            async with asyncio.timeout(10):
                while not sent:  # the first request reaches its send (held at the gate)
                    await asyncio.sleep(0)
            second = asyncio.create_task(appender.append(topic, 1, batch(b"second")))
            await all_tasks_blocked()  # `second` has queued its batch behind the round in flight
            first.cancel()
            gate.set()
            result = await asyncio.wait_for(second, 10)
            with pytest.raises(asyncio.CancelledError):
                await first
            return result, sent

    result, sent = asyncio.run(run())
    assert (result.error_code, result.base_offset) == (0, 0)
    assert sent[0] == [(topic, 0)] and [(topic, 1)] in sent[1:]  # the second went in a later request


def test_requests_go_on_aiokafkas_connection_and_a_closed_one_is_replaced(tansu):
    topic = unique_name("appender")
    create_topics(tansu.bootstrap, {topic: 1})

    async def run():
        async with KafkaAppender([tansu.bootstrap]) as appender:
            first = await appender.append(topic, 0, batch(b"one"))
            [(node, (conn, version))] = appender._conns.items()
            assert version == channel_version(conn)  # the channel, not the client.send fallback, is in use
            conn.close()  # as when the broker drops it: the next append reconnects
            results: list = []
            await appender.append_run(topic, 0, [batch(b"two"), batch(b"three")], results)
            return first, version, appender._conns[node][0] is not conn, results

    first, version, replaced, results = asyncio.run(run())
    assert (first.error_code, first.base_offset) == (0, 0)
    assert version is not None and 3 <= version <= 7
    assert replaced
    assert [(r.error_code, r.base_offset) for r in results] == [(0, 1), (0, 2)]


def test_without_the_channel_requests_go_through_client_send(tansu):
    """Where aiokafka's connection lacks what produce_channel needs (channel_version None),
    the appender sends its RawProduceRequest through client.send."""
    topic = unique_name("appender")
    create_topics(tansu.bootstrap, {topic: 2})

    async def run():
        async with KafkaAppender([tansu.bootstrap]) as appender:
            await appender.append(topic, 0, batch(b"warm-up"))
            [(node, (conn, _version))] = appender._conns.items()
            appender._conns[node] = (conn, None)  # as channel_version answers for an unknown aiokafka
            sent = []
            real_send = appender._client.send

            async def send(node_id, request, **kwargs):
                sent.append(type(request).__name__)
                return await real_send(node_id, request, **kwargs)

            appender._client.send = send
            r0: list = []
            r1: list = []
            await asyncio.gather(appender.append_run(topic, 0, [batch(b"a"), batch(b"b")], r0),
                                 appender.append_run(topic, 1, [batch(b"c")], r1))
            return sent, r0, r1

    sent, r0, r1 = asyncio.run(run())
    assert sent == ["RawProduceRequest", "RawProduceRequest"]  # a+c, then b
    assert [(r.error_code, r.base_offset) for r in r0] == [(0, 1), (0, 2)]
    assert [(r.error_code, r.base_offset) for r in r1] == [(0, 0)]


def test_requests_stay_within_max_request_bytes_and_every_partition_reads_back_in_order(tansu):
    """Twelve partitions of three ~10 KiB batches, at most 32 KiB a request: no request
    carries more than three batches, and a consumer reads each partition's batches back
    once each, in order."""
    topic = unique_name("appender")
    create_topics(tansu.bootstrap, {topic: 12})
    value = b"x" * 10_000

    async def run():
        async with KafkaAppender([tansu.bootstrap], max_request_bytes=32 * 1024) as appender:
            sent = counting_sends(appender)
            runs = [PartitionRun(topic, p, [batch(value + f"{p}-{i}".encode()) for i in range(3)], [])
                    for p in range(12)]
            await appender.append_runs(runs)
            return sent, runs

    sent, runs = asyncio.run(run())
    assert all(len(parts) <= 3 for parts in sent) and len(sent) >= 12  # 36 batches, 3 a request at most
    for p, run in enumerate(runs):
        assert [(r.error_code, r.base_offset) for r in run.results] == [(0, 0), (0, 1), (0, 2)]
        assert [v for _offset, v in consume(tansu.bootstrap, topic, p)] == [value + f"{p}-{i}".encode() for i in range(3)]
