"""The proxy on a real socket, spoken to byte by byte: pipelining, bad input, Metadata, InitProducerId.

The proxy runs in-process (trio, port 0) in front of the session's Tansu broker, so each
test can pick its own limits. Requests are encoded and responses decoded with
kafka-python's protocol classes (tests/integration/proxy/kafka_wire.py). Every bad-input test ends
by checking that a fresh connection is still served.
"""

from __future__ import annotations

import struct
import uuid

import pytest
import trio
from kafka.protocol.consumer.fetch import FetchRequest, FetchResponse
from kafka.protocol.metadata import ApiVersionsResponse, MetadataRequest, MetadataResponse
from kafka.protocol.producer import ProduceResponse
from kafka.protocol.producer.transaction import InitProducerIdRequest, InitProducerIdResponse

from kafka_upstream.config import UpstreamConfig
from proxy.config import ProxyConfig
from proxy.startup import run_proxy
from tests.conftest import create_topics, unique_name
from tests.integration.proxy.kafka_wire import (
    Wire,
    api_versions_request,
    assert_serves,
    encode,
    produce_request,
    record_batch,
)

pytestmark = [pytest.mark.integration, pytest.mark.trio]

PROXY_NODE_ID = 1  # the one broker the proxy presents (proxy/server.py)


async def start_proxy(nursery: trio.Nursery, tansu, **proxy_settings) -> int:
    """An in-process proxy in front of `tansu`; returns its port. Stops with the test's nursery."""
    _server, port = await nursery.start(
        run_proxy, ProxyConfig(listen_port=0, **proxy_settings),
        UpstreamConfig(bootstrap_servers=(tansu.bootstrap,)))
    return port


def fresh_topic(tansu, partitions: int = 2) -> str:
    name = unique_name("wire")
    create_topics(tansu.bootstrap, {name: partitions})
    return name


def errors_by_partition(response) -> dict[tuple[str, int], int]:
    return {(t.name, p.index): p.error_code for t in response.responses for p in t.partition_responses}


# --- pipelining -------------------------------------------------------------------------

async def test_pipelined_requests_are_answered_in_order(nursery, tansu):
    port = await start_proxy(nursery, tansu)
    topic = await trio.to_thread.run_sync(fresh_topic, tansu)
    wire = await Wire.connect(port)
    # Eight Produce requests of 3 records each to partition 0, with a Metadata request
    # (answered locally, so it would overtake a Produce if order were not enforced)
    # after every second one: 12 requests written before any response is read.
    sent: list[tuple[int, str]] = []
    data = b""
    correlation_id = 100
    for i in range(8):
        batch = record_batch([f"p{i}-r{j}".encode() for j in range(3)])
        data += produce_request(correlation_id, 9, -1, {(topic, 0): batch})
        sent.append((correlation_id, "produce"))
        correlation_id += 1
        if i % 2 == 1:
            data += encode(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)],
                                           allow_auto_topic_creation=False), correlation_id, 9)
            sent.append((correlation_id, "metadata"))
            correlation_id += 1
    await wire.send(data)
    offsets = []
    for expected_id, kind in sent:
        if kind == "produce":
            got_id, response = await wire.read_response(ProduceResponse, 9)
            assert errors_by_partition(response) == {(topic, 0): 0}
            offsets.append(response.responses[0].partition_responses[0].base_offset)
        else:
            got_id, response = await wire.read_response(MetadataResponse, 9)
            assert [t.name for t in response.topics] == [topic]
        assert got_id == expected_id
    assert offsets == [0, 3, 6, 9, 12, 15, 18, 21]  # fresh topic, 3 records per batch
    await wire.aclose()


async def test_acks_zero_is_never_answered_but_later_requests_are(nursery, tansu):
    port = await start_proxy(nursery, tansu)
    topic = await trio.to_thread.run_sync(fresh_topic, tansu)
    wire = await Wire.connect(port)
    await wire.send(produce_request(1, 9, 0, {(topic, 0): record_batch([b"a"])})
                    + produce_request(2, 9, 1, {(topic, 0): record_batch([b"b"])}))
    got_id, response = await wire.read_response(ProduceResponse, 9)
    assert got_id == 2  # the acks=0 request (id 1) got no response
    assert response.responses[0].partition_responses[0].base_offset == 1
    await wire.aclose()


async def test_api_versions_advertises_served_apis_and_feature_markers(nursery, tansu):
    port = await start_proxy(nursery, tansu, broker_listeners=False)  # produce-only (a gateway's default)
    host, _, tansu_port = tansu.bootstrap.rpartition(":")
    wire = await Wire.connect(int(tansu_port))
    await wire.send(api_versions_request(1, version=0))
    _, upstream = await wire.read_response(ApiVersionsResponse, 0)
    await wire.aclose()
    up = {k.api_key: (k.min_version, k.max_version) for k in upstream.api_keys}
    wire = await Wire.connect(port)
    await wire.send(api_versions_request(2, version=3))
    _, response = await wire.read_response(ApiVersionsResponse, 3)
    await wire.aclose()
    got = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
    assert got == {
        0: (0, min(12, up[0][1])),                    # Produce from 0 (librdkafka), capped at 12
        1: (max(0, up[1][0]), min(12, up[1][1])),     # Fetch: feature marker only
        3: (0, 12),                                   # Metadata: answered locally
        10: (max(0, up[10][0]), min(6, up[10][1])),   # FindCoordinator: answered after asking upstream
        18: (0, 4),                                   # ApiVersions: answered locally
        22: (max(0, up[22][0]), min(5, up[22][1])),   # InitProducerId: forwarded
        24: (max(0, up[24][0]), min(3, up[24][1])),   # AddPartitionsToTxn: forwarded (v4+ is broker-only)
        25: (max(0, up[25][0]), min(4, up[25][1])),   # AddOffsetsToTxn: forwarded
        26: (max(0, up[26][0]), min(5, up[26][1])),   # EndTxn: forwarded
        28: (max(0, up[28][0]), min(5, up[28][1])),   # TxnOffsetCommit: forwarded
    }


# --- bad input ----------------------------------------------------------------------------

async def test_frame_shorter_than_a_header_closes_the_connection(nursery, tansu):
    port = await start_proxy(nursery, tansu)
    wire = await Wire.connect(port)
    await wire.send(struct.pack(">i", 4) + b"\x00\x12\x00\x00")  # size 4 < 8-byte header
    await wire.expect_closed()
    await assert_serves(port)


async def test_truncated_frame_then_vanishing_client(nursery, tansu):
    port = await start_proxy(nursery, tansu)
    wire = await Wire.connect(port)
    full = api_versions_request(1)
    await wire.send(full[: len(full) // 2])  # half a request, then gone
    await wire.aclose()
    await assert_serves(port)


async def test_truncated_header_inside_a_complete_frame_closes(nursery, tansu):
    port = await start_proxy(nursery, tansu)
    wire = await Wire.connect(port)
    # api_key 18, version 0, correlation 1, client_id length 50 but only 2 bytes follow
    body = struct.pack(">hhih", 18, 0, 1, 50) + b"ab"
    await wire.send(struct.pack(">i", len(body)) + body)
    await wire.expect_closed()
    await assert_serves(port)


async def test_frame_over_max_frame_bytes_closes_without_reading_it(nursery, tansu):
    port = await start_proxy(nursery, tansu, max_frame_bytes=64 * 1024, max_batch_bytes=32 * 1024)
    wire = await Wire.connect(port)
    await wire.send(struct.pack(">i", 64 * 1024 + 1) + b"\x00" * 100)  # declares 1 byte too many
    await wire.expect_closed()
    await assert_serves(port)


async def test_garbage_bytes_close_the_connection(nursery, tansu):
    port = await start_proxy(nursery, tansu)
    wire = await Wire.connect(port)
    await wire.send(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")  # "GET " = a 1.2 GB frame size
    await wire.expect_closed()
    wire = await Wire.connect(port)
    await wire.send(struct.pack(">i", -5))  # negative size
    await wire.expect_closed()
    await assert_serves(port)


async def test_well_framed_garbage_body_closes(nursery, tansu):
    port = await start_proxy(nursery, tansu)
    wire = await Wire.connect(port)
    # Metadata v1 header, then a topic array claiming 1000 entries with nothing behind it.
    body = struct.pack(">hhih", 3, 1, 9, -1) + struct.pack(">i", 1000)
    await wire.send(struct.pack(">i", len(body)) + body)
    await wire.expect_closed()
    await assert_serves(port)


@pytest.mark.parametrize("api_key", [1000, 11, 2])  # unknown; JoinGroup; ListOffsets
async def test_unknown_or_unserved_api_key_closes(nursery, tansu, api_key):
    port = await start_proxy(nursery, tansu, broker_listeners=False)
    wire = await Wire.connect(port)
    body = struct.pack(">hhih", api_key, 0, 5, -1) + b"\x00" * 16
    await wire.send(struct.pack(">i", len(body)) + body)
    await wire.expect_closed()
    await assert_serves(port)


@pytest.mark.parametrize("version", [4, 11, 12])
async def test_a_produce_only_sidecar_answers_fetch_with_an_error_instead_of_closing(nursery, tansu, version):
    """Fetch is advertised (feature marker) but not served without pass-through: every
    partition asked for gets TOPIC_AUTHORIZATION_FAILED (29), and the connection stays."""
    port = await start_proxy(nursery, tansu, broker_listeners=False)
    request = FetchRequest(replica_id=-1, max_wait_ms=100, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
                           topics=[FetchRequest.FetchTopic(topic="t", partitions=[
                               FetchRequest.FetchTopic.FetchPartition(partition=p, fetch_offset=0,
                                                                      partition_max_bytes=1 << 20)
                               for p in (0, 3)])])
    wire = await Wire.connect(port)
    await wire.send(encode(request, 31, version))
    correlation_id, response = await wire.read_response(FetchResponse, version)
    assert correlation_id == 31
    assert [(t.topic, [(p.partition_index, p.error_code, p.records) for p in t.partitions])
            for t in response.responses] == [("t", [(0, 29, b""), (3, 29, b"")])]
    await wire.send(api_versions_request(32))  # the same connection still serves
    correlation_id, versions = await wire.read_response(ApiVersionsResponse, 3)
    assert (correlation_id, versions.error_code) == (32, 0)
    await wire.aclose()


async def test_api_versions_at_unknown_version_gets_v0_unsupported_with_range(nursery, tansu):
    port = await start_proxy(nursery, tansu)
    wire = await Wire.connect(port)
    request = bytearray(api_versions_request(77, version=3))
    struct.pack_into(">h", request, 6, 99)  # size(4) api_key(2) | api_version(2) := 99
    await wire.send(bytes(request))
    correlation_id, response = await wire.read_response(ApiVersionsResponse, 0)
    assert correlation_id == 77
    assert response.error_code == 35  # UNSUPPORTED_VERSION
    assert [(k.api_key, k.min_version, k.max_version) for k in response.api_keys] == [(18, 0, 4)]
    # The client then retries lower on the same connection, as librdkafka does.
    await wire.send(api_versions_request(78, version=3))
    correlation_id, response = await wire.read_response(ApiVersionsResponse, 3)
    assert (correlation_id, response.error_code) == (78, 0)
    await wire.aclose()


async def test_other_api_at_unknown_version_closes(nursery, tansu):
    port = await start_proxy(nursery, tansu)
    wire = await Wire.connect(port)
    request = bytearray(encode(MetadataRequest(topics=None, allow_auto_topic_creation=False), 5, 9))
    struct.pack_into(">h", request, 6, 40)  # Metadata v40 does not exist
    await wire.send(bytes(request))
    await wire.expect_closed()
    await assert_serves(port)


async def test_corrupt_crc_fails_only_its_partition(nursery, tansu):
    port = await start_proxy(nursery, tansu)
    topic = await trio.to_thread.run_sync(fresh_topic, tansu)
    good = record_batch([b"good-1", b"good-2"])
    bad = bytearray(record_batch([b"bad-1", b"bad-2"]))
    bad[-1] ^= 0xFF  # flip the last value byte: the CRC-32C no longer matches
    wire = await Wire.connect(port)
    await wire.send(produce_request(3, 9, -1, {(topic, 0): good, (topic, 1): bytes(bad)}))
    _, response = await wire.read_response(ProduceResponse, 9)
    assert errors_by_partition(response) == {(topic, 0): 0, (topic, 1): 2}  # CORRUPT_MESSAGE
    # The connection stays usable: the client retries the partition.
    await wire.send(produce_request(4, 9, -1, {(topic, 1): record_batch([b"retry"])}))
    _, response = await wire.read_response(ProduceResponse, 9)
    assert errors_by_partition(response) == {(topic, 1): 0}
    assert response.responses[0].partition_responses[0].base_offset == 0  # the bad batch never landed
    await wire.aclose()
    await assert_serves(port)


async def test_batch_over_max_batch_bytes_is_message_too_large(nursery, tansu):
    port = await start_proxy(nursery, tansu, max_batch_bytes=4096)
    topic = await trio.to_thread.run_sync(fresh_topic, tansu)
    big = record_batch([b"x" * 5000])  # one record alone exceeds 4096 bytes
    wire = await Wire.connect(port)
    await wire.send(produce_request(5, 9, -1, {(topic, 0): big, (topic, 1): record_batch([b"small"])}))
    _, response = await wire.read_response(ProduceResponse, 9)
    assert errors_by_partition(response) == {(topic, 0): 10, (topic, 1): 0}  # MESSAGE_TOO_LARGE
    await wire.aclose()
    await assert_serves(port)


async def test_magic_other_than_2_is_invalid_record(nursery, tansu):
    port = await start_proxy(nursery, tansu)
    topic = await trio.to_thread.run_sync(fresh_topic, tansu)
    old = bytearray(record_batch([b"v"]))
    old[16] = 1  # magic byte: baseOffset(8) batchLength(4) leaderEpoch(4) | magic
    wire = await Wire.connect(port)
    await wire.send(produce_request(6, 9, -1, {(topic, 0): bytes(old)}))
    _, response = await wire.read_response(ProduceResponse, 9)
    assert errors_by_partition(response) == {(topic, 0): 87}  # INVALID_RECORD
    await wire.aclose()
    await assert_serves(port)


async def test_produce_v2_is_unsupported_version(nursery, tansu):
    port = await start_proxy(nursery, tansu)
    topic = await trio.to_thread.run_sync(fresh_topic, tansu)
    wire = await Wire.connect(port)
    await wire.send(produce_request(7, 2, -1, {(topic, 0): record_batch([b"v"])}))
    correlation_id, response = await wire.read_response(ProduceResponse, 2)
    assert correlation_id == 7
    assert errors_by_partition(response) == {(topic, 0): 35}  # UNSUPPORTED_VERSION
    await wire.aclose()
    await assert_serves(port)


async def test_client_vanishing_with_requests_in_flight(nursery, tansu):
    port = await start_proxy(nursery, tansu)
    topic = await trio.to_thread.run_sync(fresh_topic, tansu)
    wire = await Wire.connect(port)
    data = b"".join(produce_request(i, 9, -1, {(topic, 0): record_batch([b"gone"] * 50)}) for i in range(20))
    await wire.send(data + data[:37])  # 20 whole requests and a torn one, then gone
    await wire.aclose()
    await assert_serves(port)
    # The proxy is still in order for the partition: a new producer appends after whatever landed.
    wire = await Wire.connect(port)
    await wire.send(produce_request(99, 9, -1, {(topic, 0): record_batch([b"after"])}))
    _, response = await wire.read_response(ProduceResponse, 9)
    assert errors_by_partition(response) == {(topic, 0): 0}
    assert response.responses[0].partition_responses[0].base_offset % 50 == 0  # whole batches only
    await wire.aclose()


# --- Metadata -------------------------------------------------------------------------------

async def _metadata(port: int, topics: list[str], version: int = 12) -> MetadataResponse:
    wire = await Wire.connect(port)
    try:
        await wire.send(encode(MetadataRequest(
            topics=[MetadataRequest.MetadataRequestTopic(name=t) for t in topics],
            allow_auto_topic_creation=False), 11, version))
        _, response = await wire.read_response(MetadataResponse, version)
        return response
    finally:
        await wire.aclose()


async def test_metadata_names_the_proxy_as_the_only_broker_and_keeps_topic_ids(nursery, tansu):
    port = await start_proxy(nursery, tansu, broker_listeners=False)  # produce-only
    topic = await trio.to_thread.run_sync(fresh_topic, tansu, 3)
    missing = unique_name("absent")
    response = await _metadata(port, [topic, missing])
    assert [(b.node_id, b.host, b.port) for b in response.brokers] == [(PROXY_NODE_ID, "127.0.0.1", port)]
    assert response.controller_id == PROXY_NODE_ID
    by_name = {t.name: t for t in response.topics}
    assert by_name[missing].error_code == 3  # UNKNOWN_TOPIC_OR_PARTITION
    ours = by_name[topic]
    assert ours.error_code == 0
    assert [(p.partition_index, p.leader_id, list(p.replica_nodes), list(p.isr_nodes)) for p in ours.partitions] == [
        (0, 1, [1], [1]), (1, 1, [1], [1]), (2, 1, [1], [1])]
    # The topic id is the upstream's own (Tansu asked directly, same version).
    host, _, tansu_port = tansu.bootstrap.rpartition(":")
    direct = await _metadata(int(tansu_port), [topic])
    assert direct.topics[0].topic_id != uuid.UUID(int=0)
    assert ours.topic_id == direct.topics[0].topic_id


async def test_metadata_v0_and_v1_work_too(nursery, tansu):
    port = await start_proxy(nursery, tansu, broker_listeners=False)  # produce-only
    topic = await trio.to_thread.run_sync(fresh_topic, tansu, 2)
    for version in (0, 1, 4):
        response = await _metadata(port, [topic], version)
        assert [(b.node_id, b.port) for b in response.brokers] == [(PROXY_NODE_ID, port)]
        assert [p.leader_id for p in response.topics[0].partitions] == [1, 1]


# --- InitProducerId -------------------------------------------------------------------------

async def _init_producer_id(port: int, version: int) -> InitProducerIdResponse:
    wire = await Wire.connect(port)
    try:
        await wire.send(encode(InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60_000,
                                                     producer_id=-1, producer_epoch=-1), 21, version))
        correlation_id, response = await wire.read_response(InitProducerIdResponse, version)
        assert correlation_id == 21
        return response
    finally:
        await wire.aclose()


async def test_init_producer_id_v0_is_bridged_to_a_version_tansu_serves(nursery, tansu):
    port = await start_proxy(nursery, tansu)
    host, _, tansu_port = tansu.bootstrap.rpartition(":")
    # Tansu itself fails v0: this is why the proxy forwards at a higher version.
    direct = await _init_producer_id(int(tansu_port), 0)
    assert direct.error_code == -1  # UNKNOWN_SERVER_ERROR
    for version in (0, 1, 4):
        response = await _init_producer_id(port, version)
        assert response.error_code == 0, f"v{version}"
        assert response.producer_id >= 0
        assert response.producer_epoch >= 0


async def test_backpressure_with_a_small_in_flight_limit_loses_nothing(nursery, tansu):
    port = await start_proxy(nursery, tansu, max_in_flight_per_connection=2)
    topic = await trio.to_thread.run_sync(fresh_topic, tansu)
    wire = await Wire.connect(port)
    # 40 requests written at once: the proxy stops reading after 2 unanswered ones and
    # resumes as responses go out; every one must still be answered, in order.
    await wire.send(b"".join(produce_request(1000 + i, 10, -1, {(topic, i % 2): record_batch([b"x"])})
                             for i in range(40)))
    offsets = {0: [], 1: []}
    for i in range(40):
        correlation_id, response = await wire.read_response(ProduceResponse, 10)  # v10+: KIP-951 fields
        assert correlation_id == 1000 + i
        (partition,) = response.responses[0].partition_responses
        assert partition.error_code == 0
        offsets[partition.index].append(partition.base_offset)
        # KIP-951 leader hints must never carry upstream endpoints to the client.
        assert not getattr(response, "node_endpoints", None)
    assert offsets == {0: list(range(20)), 1: list(range(20))}
    await wire.aclose()


async def test_graceful_shutdown_answers_every_request_it_read(nursery, tansu):
    from prometheus_client import REGISTRY

    server, port = await nursery.start(run_proxy, ProxyConfig(listen_port=0, shutdown_grace_s=10),
                                       UpstreamConfig(bootstrap_servers=(tansu.bootstrap,)))
    topic = await trio.to_thread.run_sync(fresh_topic, tansu)
    labels = {"api": "Produce", "api_version": "9"}
    read_before = REGISTRY.get_sample_value("azsidecar_proxy_requests_total", labels) or 0.0
    wire = await Wire.connect(port)
    await wire.send(b"".join(produce_request(500 + i, 9, -1, {(topic, 0): record_batch([b"s"])})
                             for i in range(10)))
    correlation_id, _ = await wire.read_response(ProduceResponse, 9)  # the proxy is mid-stream
    assert correlation_id == 500
    await server.shutdown()
    read = int((REGISTRY.get_sample_value("azsidecar_proxy_requests_total", labels) or 0.0) - read_before)
    assert 1 <= read <= 10, read
    # Every request the proxy had read is answered, in order, then the connection ends.
    answered = []
    while (frame := await wire.read_frame()) is not None:
        response = ProduceResponse.decode(frame, version=9, header=True)
        answered.append((response.header.correlation_id, errors_by_partition(response)))
    assert answered == [(500 + i, {(topic, 0): 0}) for i in range(1, read)]
    with pytest.raises(OSError):
        await trio.open_tcp_stream("127.0.0.1", port)  # no longer listening


async def test_upstream_down_gives_retriable_errors_and_the_proxy_keeps_serving(nursery, tmp_path):
    from deploy.local import start_tansu

    with start_tansu(log_dir=tmp_path) as private:
        port = await start_proxy(nursery, private)
        topic = await trio.to_thread.run_sync(fresh_topic, private)
        wire = await Wire.connect(port)
        await wire.send(produce_request(1, 9, -1, {(topic, 0): record_batch([b"up"])}))
        _, response = await wire.read_response(ProduceResponse, 9)
        assert errors_by_partition(response) == {(topic, 0): 0}
        await trio.to_thread.run_sync(lambda: private.stop(kill=True))  # the broker crashes
        await wire.send(produce_request(2, 9, -1, {(topic, 0): record_batch([b"down"])}))
        correlation_id, response = await wire.read_response(ProduceResponse, 9)
        assert correlation_id == 2
        # NETWORK_EXCEPTION (13) or REQUEST_TIMED_OUT (7): both retriable, the client tries again.
        assert errors_by_partition(response)[(topic, 0)] in (13, 7)
        await wire.aclose()
        await assert_serves(port)  # ApiVersions is answered locally
