"""Hostile input cannot widen a client's rights: Produce requests of every version the proxy
decodes, with generated topic names, principals and transactional ids, go through the
proxy's own parse, decode, validation and authorization (proxy.request_handler
refuse_unauthorized_produce); what is left to route must be exactly what the rules below
allow, worked out by a reference written apart from the ACL code.

The rules: alice may WRITE topic `orders` (literal) and topics prefixed `pay-`, except
`pay-secret` (a literal DENY), and may use transactional ids prefixed `alice-tx`.
"""

from __future__ import annotations

import string

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.protocol.producer import ProduceRequest

from core import errors
from kafka_protocol.kafka_codec import decode_request, parse_request_frame
from kafka_upstream.direct import HIGHEST_PRODUCE_VERSION, validate_produce
from proxy.acl import AclBinding, AclSet, Operation, PatternType, Permission, Request, ResourceType
from proxy.request_handler import refuse_unauthorized_produce
from tests.integration.proxy.kafka_wire import encode, record_batch

RULES = AclSet.of([
    AclBinding("User:alice", "*", Operation.WRITE, Permission.ALLOW, ResourceType.TOPIC, PatternType.LITERAL, "orders"),
    AclBinding("User:alice", "*", Operation.WRITE, Permission.ALLOW, ResourceType.TOPIC, PatternType.PREFIXED, "pay-"),
    AclBinding("User:alice", "*", Operation.WRITE, Permission.DENY, ResourceType.TOPIC, PatternType.LITERAL,
               "pay-secret"),
    AclBinding("User:alice", "*", Operation.WRITE, Permission.ALLOW, ResourceType.TRANSACTIONAL_ID,
               PatternType.PREFIXED, "alice-tx"),
])
BATCH = record_batch([b"v"])
FIRST_DECODED_VERSION = 3  # the proxy answers older Produce versions UNSUPPORTED_VERSION (magic 2 batches only)


def may_write(principal: str, topic: str) -> bool:
    """The reference: what the rules above give, by hand."""
    return principal == "User:alice" and (topic == "orders" or (topic.startswith("pay-") and topic != "pay-secret"))


def may_use_transactional_id(principal: str, transactional_id: str) -> bool:
    return principal == "User:alice" and transactional_id.startswith("alice-tx")


# Names near the rules' edges, and arbitrary ones (Kafka's legal topic characters and others).
TOPICS = st.one_of(
    st.sampled_from(["orders", "pay-x", "pay-secret"]),
    st.sampled_from(["orders", "orders ", "Orders", "order", "orders-eu", "pay-", "pay-x", "pay-secret", "pay-secret2",
                     "pay", "PAY-x", "*", "", "pay-\u00e9", "orders\x00", "..", "pay-" + "x" * 240]),
    st.text(alphabet=string.ascii_letters + string.digits + "._-*/ \u00e9\x00", max_size=30))
PRINCIPALS = st.one_of(
    st.just("User:alice"),  # often the one with rights, so the topic checks are reached
    st.sampled_from(["User:alice", "User:*", "User:Alice", "User:alice ", "alice", "User:alice,User:bob",
                     "User:alice\x00", "Group:alice", "User:ANONYMOUS", "User:"]),
    st.text(max_size=20).map(lambda name: f"User:{name}"))
TRANSACTIONAL_IDS = st.one_of(st.none(), st.none(), st.sampled_from(["alice-tx", "alice-tx-1", "alice-t", "bob-tx", "*", ""]),
                              st.text(max_size=12))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(version=st.integers(FIRST_DECODED_VERSION, min(HIGHEST_PRODUCE_VERSION, len(ProduceRequest) - 1)),
       topics=st.lists(TOPICS, min_size=1, max_size=5, unique=True),
       principal=PRINCIPALS, transactional_id=TRANSACTIONAL_IDS, partitions=st.integers(1, 3))
def test_only_what_the_rules_allow_is_routed(version, topics, principal, transactional_id, partitions):
    request = ProduceRequest(transactional_id=transactional_id, acks=-1, timeout_ms=1000, topic_data=[
        ProduceRequest.TopicProduceData(name=topic, partition_data=[
            ProduceRequest.TopicProduceData.PartitionProduceData(index=p, records=BATCH) for p in range(partitions)])
        for topic in topics])
    frame = parse_request_frame(encode(request, 7, version)[4:])
    validated = validate_produce(decode_request(frame, {0: HIGHEST_PRODUCE_VERSION}), version, 1 << 20)
    who = Request(principal, "10.0.0.5")

    refuse_unauthorized_produce(validated, RULES, who)

    every_partition = {(t, p) for t in topics for p in range(partitions)}
    assert set(validated.order) == every_partition  # nothing lost or invented by decoding
    if transactional_id and not may_use_transactional_id(principal, transactional_id):
        assert validated.items == []
        assert {tp: r.error_code for tp, r in validated.rejected.items()} == {
            tp: errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED for tp in every_partition}
        return
    routed = {(i.topic, i.partition) for i in validated.items}
    assert routed == {(t, p) for t, p in every_partition if may_write(principal, t)}
    assert {tp for tp, r in validated.rejected.items() if r.error_code == errors.TOPIC_AUTHORIZATION_FAILED} == {
        (t, p) for t, p in every_partition if not may_write(principal, t)}
