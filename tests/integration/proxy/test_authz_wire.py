"""Authorization from a local ACL file (`authz.source = "file"`), on the wire.

An in-process proxy in front of the session's Tansu broker, without SASL: the client is
Kafka's `User:ANONYMOUS`. The ACL file lets it WRITE topic `ok-*` (prefixed) and nothing
else, and the tests check each answer against what a broker with the same ACLs gives:
partial Produce answers, Metadata refusals and filtered listings, InitProducerId,
FindCoordinator, transactional Produce. Each refusal is an answer on an open connection.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
from kafka.protocol.metadata import MetadataRequest, MetadataResponse
from kafka.protocol.metadata.find_coordinator import FindCoordinatorRequest, FindCoordinatorResponse
from kafka.protocol.producer import ProduceRequest, ProduceResponse
from kafka.protocol.producer.transaction import InitProducerIdRequest, InitProducerIdResponse
from kafka.record.default_records import DefaultRecordBatchBuilder

from kafka_upstream.config import UpstreamConfig
from proxy.config import AuthzConfig, ProxyConfig
from proxy.startup import run_proxy
from tests.conftest import create_topics, unique_name
from tests.integration.proxy.kafka_wire import Wire, assert_serves, encode, produce_request, record_batch

pytestmark = [pytest.mark.integration, pytest.mark.trio]

TOPIC_AUTHORIZATION_FAILED, GROUP_AUTHORIZATION_FAILED, CLUSTER_AUTHORIZATION_FAILED = 29, 30, 31
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53


def acl_file(tmp_path: Path, text: str) -> str:
    path = tmp_path / "acls.toml"
    path.write_text(text)
    return str(path)


ALLOW_OK_PREFIX = """
[[acl]]
principal = "User:ANONYMOUS"
operation = "Write"
resource_type = "Topic"
pattern_type = "Prefixed"
name = "ok-"

[[acl]]
principal = "User:*"
operation = "Read"
resource_type = "Group"
name = "g-allowed"
"""


async def start(nursery, tansu, tmp_path, text: str) -> int:
    authz = AuthzConfig(source="file", acl_file=acl_file(tmp_path, text))
    _server, port = await nursery.start(
        lambda task_status: run_proxy(ProxyConfig(listen_port=0), UpstreamConfig(bootstrap_servers=(tansu.bootstrap,)),
                                      task_status=task_status, authz=authz))
    return port


async def test_produce_is_answered_per_topic(nursery, tansu, tmp_path):
    port = await start(nursery, tansu, tmp_path, ALLOW_OK_PREFIX)
    ok, denied = unique_name("ok"), unique_name("payments")
    await trio.to_thread.run_sync(create_topics, tansu.bootstrap, {ok: 1, denied: 1})
    wire = await Wire.connect(port)
    await wire.send(produce_request(7, 9, -1, {(ok, 0): record_batch([b"a"]), (denied, 0): record_batch([b"b"])}))
    correlation_id, response = await wire.read_response(ProduceResponse, 9)
    assert correlation_id == 7
    codes = {(t.name, p.index): p.error_code for t in response.responses for p in t.partition_responses}
    assert codes == {(ok, 0): 0, (denied, 0): TOPIC_AUTHORIZATION_FAILED}
    await wire.aclose()
    await assert_serves(port)


async def test_metadata_refuses_and_filters_topics(nursery, tansu, tmp_path):
    port = await start(nursery, tansu, tmp_path, ALLOW_OK_PREFIX)
    ok, denied = unique_name("ok"), unique_name("payments")
    await trio.to_thread.run_sync(create_topics, tansu.bootstrap, {ok: 1, denied: 1})
    wire = await Wire.connect(port)
    await wire.send(encode(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=ok),
                                                   MetadataRequest.MetadataRequestTopic(name=denied)],
                                           allow_auto_topic_creation=False), 1, 9))
    _cid, response = await wire.read_response(MetadataResponse, 9)
    assert {t.name: t.error_code for t in response.topics} == {ok: 0, denied: TOPIC_AUTHORIZATION_FAILED}
    await wire.send(encode(MetadataRequest(topics=None, allow_auto_topic_creation=False), 2, 9))
    _cid, listing = await wire.read_response(MetadataResponse, 9)
    names = {t.name for t in listing.topics}
    assert ok in names and denied not in names
    assert all(n.startswith("ok-") for n in names), names
    # A missing topic the client may describe but not create is not auto-created with the sidecar's rights.
    missing = unique_name("ok")
    await wire.send(encode(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=missing)],
                                           allow_auto_topic_creation=True), 3, 9))
    _cid, response = await wire.read_response(MetadataResponse, 9)
    assert [(t.name, t.error_code) for t in response.topics] == [(missing, TOPIC_AUTHORIZATION_FAILED)]
    await wire.aclose()


async def test_init_producer_id_and_find_coordinator(nursery, tansu, tmp_path):
    port = await start(nursery, tansu, tmp_path, ALLOW_OK_PREFIX)
    wire = await Wire.connect(port)
    # Idempotent: WRITE on some topic suffices (KIP-679); transactional: WRITE on the id, which it lacks.
    await wire.send(encode(InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60_000,
                                                 producer_id=-1, producer_epoch=-1), 1, 4))
    _cid, idempotent = await wire.read_response(InitProducerIdResponse, 4)
    assert idempotent.error_code == 0 and idempotent.producer_id >= 0
    await wire.send(encode(InitProducerIdRequest(transactional_id="tx-1", transaction_timeout_ms=60_000,
                                                 producer_id=-1, producer_epoch=-1), 2, 4))
    _cid, transactional = await wire.read_response(InitProducerIdResponse, 4)
    assert (transactional.error_code, transactional.producer_id) == (TRANSACTIONAL_ID_AUTHORIZATION_FAILED, -1)
    await wire.send(encode(FindCoordinatorRequest(key_type=0, coordinator_keys=["g-allowed", "g-other"]), 3, 4))
    _cid, found = await wire.read_response(FindCoordinatorResponse, 4)
    assert {c.key: c.error_code for c in found.coordinators} == {"g-allowed": 0, "g-other": GROUP_AUTHORIZATION_FAILED}
    await wire.send(encode(FindCoordinatorRequest(key_type=1, coordinator_keys=["tx-1"]), 4, 4))
    _cid, found = await wire.read_response(FindCoordinatorResponse, 4)
    assert [c.error_code for c in found.coordinators] == [TRANSACTIONAL_ID_AUTHORIZATION_FAILED]
    await wire.aclose()


async def test_no_write_anywhere_refuses_idempotence_with_cluster_authorization_failed(nursery, tansu, tmp_path):
    port = await start(nursery, tansu, tmp_path, "")  # an empty file: no rights at all
    wire = await Wire.connect(port)
    await wire.send(encode(InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60_000,
                                                 producer_id=-1, producer_epoch=-1), 1, 4))
    _cid, response = await wire.read_response(InitProducerIdResponse, 4)
    assert response.error_code == CLUSTER_AUTHORIZATION_FAILED
    await wire.aclose()


async def test_transactional_batches_need_write_on_the_transactional_id(nursery, tansu, tmp_path):
    port = await start(nursery, tansu, tmp_path, ALLOW_OK_PREFIX)
    ok = unique_name("ok")
    await trio.to_thread.run_sync(create_topics, tansu.bootstrap, {ok: 1})
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=True, producer_id=5,
                                        producer_epoch=0, base_sequence=0, batch_size=1 << 20)
    builder.append(0, timestamp=None, key=None, value=b"t", headers=[])
    request = ProduceRequest(transactional_id="tx-1", acks=-1, timeout_ms=10_000, topic_data=[
        ProduceRequest.TopicProduceData(name=ok, partition_data=[
            ProduceRequest.TopicProduceData.PartitionProduceData(index=0, records=bytes(builder.build()))])])
    wire = await Wire.connect(port)
    await wire.send(encode(request, 9, 9))
    _cid, response = await wire.read_response(ProduceResponse, 9)
    assert [p.error_code for t in response.responses for p in t.partition_responses] == [
        TRANSACTIONAL_ID_AUTHORIZATION_FAILED]
    await wire.aclose()
