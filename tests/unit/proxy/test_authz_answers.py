"""The answers a refused transaction API gets before it reaches a coordinator
(proxy/authz_answers.py coordinator_refusal): the error Kafka's KafkaApis gives, where the
API carries it, written out by hand per case; an allowed request is forwarded (None)."""

from __future__ import annotations

import struct

from kafka.protocol.producer.transaction import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    EndTxnRequest,
    TxnOffsetCommitRequest,
)

from kafka_protocol.kafka_codec import decode_request, encode_response, parse_request_frame
from proxy.acl import AclBinding, AclSet, Operation, PatternType, Permission, Request, ResourceType
from proxy.authz_answers import coordinator_refusal
from tests.integration.proxy.kafka_wire import encode

ALICE = Request("User:alice", "10.0.0.5")
ADD_PARTITIONS, ADD_OFFSETS, END_TXN, TXN_OFFSET_COMMIT = 24, 25, 26, 28
NONE, TOPIC_AUTH, GROUP_AUTH, TXN_AUTH, NOT_ATTEMPTED = 0, 29, 30, 53, 55


def allow(operation: Operation, resource_type: ResourceType, name: str) -> AclBinding:
    return AclBinding("User:alice", "*", operation, Permission.ALLOW, resource_type, PatternType.LITERAL, name)


ACLS = AclSet.of([allow(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, "tx-1"),
                  allow(Operation.READ, ResourceType.GROUP, "g1"),
                  allow(Operation.WRITE, ResourceType.TOPIC, "orders"), allow(Operation.READ, ResourceType.TOPIC, "orders")])


def add_partitions(txn: str, topics: dict[str, list[int]]) -> AddPartitionsToTxnRequest:
    return AddPartitionsToTxnRequest(
        v3_and_below_transactional_id=txn, v3_and_below_producer_id=1, v3_and_below_producer_epoch=0,
        v3_and_below_topics=[AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=t, partitions=ps)
                             for t, ps in topics.items()])


def txn_offset_commit(txn: str, group: str, topics: dict[str, list[int]]) -> TxnOffsetCommitRequest:
    topic_cls = TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic
    part_cls = topic_cls.TxnOffsetCommitRequestPartition
    return TxnOffsetCommitRequest(transactional_id=txn, group_id=group, producer_id=1, producer_epoch=0, topics=[
        topic_cls(name=t, partitions=[part_cls(partition_index=p, committed_offset=5, committed_metadata="")
                                      for p in ps]) for t, ps in topics.items()])


def answered(api_key: int, request, version: int = 3):
    """The refusal for `request` as sent at `version`, through the proxy's decode and its
    encode, then read back by kafka-python's response class; None when forwarded."""
    decoded = decode_request(parse_request_frame(encode(request, 11, version)[4:]), {api_key: version})
    refusal = coordinator_refusal(api_key, decoded, ACLS, ALICE)
    if refusal is None:
        return None
    frame = encode_response(refusal, 11, version)  # size prefix, then the response header and body
    assert struct.unpack_from(">ii", frame) == (len(frame) - 4, 11)
    return type(refusal).decode(frame[4:], version=version, header=True)


def test_end_txn_needs_write_on_the_transactional_id():
    assert answered(END_TXN, EndTxnRequest(transactional_id="tx-1", producer_id=1, producer_epoch=0,
                                           committed=True)) is None
    assert answered(END_TXN, EndTxnRequest(transactional_id="tx-2", producer_id=1, producer_epoch=0,
                                           committed=True)).error_code == TXN_AUTH


def test_add_offsets_needs_the_transactional_id_then_read_on_the_group():
    def ask(txn: str, group: str):
        return answered(ADD_OFFSETS, AddOffsetsToTxnRequest(transactional_id=txn, producer_id=1, producer_epoch=0,
                                                            group_id=group))
    assert ask("tx-1", "g1") is None
    assert ask("tx-1", "g2").error_code == GROUP_AUTH
    assert ask("tx-2", "g1").error_code == TXN_AUTH


def test_add_partitions_refuses_the_topics_it_may_not_write_and_leaves_the_others_unattempted():
    assert answered(ADD_PARTITIONS, add_partitions("tx-1", {"orders": [0, 1]})) is None
    mixed = answered(ADD_PARTITIONS, add_partitions("tx-1", {"orders": [0], "payments": [0, 2]}))
    assert [(t.name, [(p.partition_index, p.partition_error_code) for p in t.results_by_partition])
            for t in mixed.results_by_topic_v3_and_below] == [("orders", [(0, NOT_ATTEMPTED)]),
                                                              ("payments", [(0, TOPIC_AUTH), (2, TOPIC_AUTH)])]
    no_txn = answered(ADD_PARTITIONS, add_partitions("tx-2", {"orders": [0]}))
    assert [(p.partition_index, p.partition_error_code) for t in no_txn.results_by_topic_v3_and_below
            for p in t.results_by_partition] == [(0, TXN_AUTH)]


def test_txn_offset_commit_needs_the_transactional_id_the_group_and_read_on_each_topic():
    assert answered(TXN_OFFSET_COMMIT, txn_offset_commit("tx-1", "g1", {"orders": [0]})) is None
    mixed = answered(TXN_OFFSET_COMMIT, txn_offset_commit("tx-1", "g1", {"orders": [0], "payments": [1]}))
    assert [(t.name, [(p.partition_index, p.error_code) for p in t.partitions]) for t in mixed.topics] == [
        ("orders", [(0, NOT_ATTEMPTED)]), ("payments", [(1, TOPIC_AUTH)])]
    no_group = answered(TXN_OFFSET_COMMIT, txn_offset_commit("tx-1", "g2", {"orders": [0]}))
    assert [(p.partition_index, p.error_code) for t in no_group.topics for p in t.partitions] == [(0, GROUP_AUTH)]
