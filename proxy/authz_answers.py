"""The answers a refused request gets, in the protocol, as a broker gives them (pure).

proxy/authorize.py decides what is refused; this module writes it into the API's answer:
a Metadata answer with refused topics marked (or, for a listing, left out), and the
answer of a transaction API forwarded to a coordinator that is refused before it is sent.
"""

from __future__ import annotations

import uuid
from typing import Any

from kafka.protocol.metadata import MetadataResponse
from kafka.protocol.producer.transaction import AddPartitionsToTxnResponse, TxnOffsetCommitResponse

from core import errors
from kafka_protocol.kafka_codec import (
    API_ADD_OFFSETS_TO_TXN,
    API_ADD_PARTITIONS_TO_TXN,
    API_END_TXN,
    API_TXN_OFFSET_COMMIT,
)
from kafka_upstream.coordinators import error_response
from proxy import authorize
from proxy.acl import AclSet, Request


def _refused_topic(name: str) -> Any:
    return MetadataResponse.MetadataResponseTopic(error_code=errors.TOPIC_AUTHORIZATION_FAILED, name=name,
                                                  topic_id=uuid.UUID(int=0), is_internal=False, partitions=[])


def authorized_metadata(response: Any, acls: AclSet, who: Request, requested: list[str] | None,
                        verdict: authorize.MetadataVerdict) -> Any:
    """`response` as the client may see it: a listing keeps only describable topics; a
    topic asked for and refused is TOPIC_AUTHORIZATION_FAILED, as is one that does not exist
    and that the client asked to auto-create without the right to create it."""
    if requested is None:
        visible = set(authorize.describable(acls, who, [t.name for t in response.topics]))
        response.topics = [t for t in response.topics if t.name in visible]
        return response
    topics = []
    for t in response.topics:
        if t.name in verdict.denied or (
                t.name in verdict.no_create and t.error_code == errors.UNKNOWN_TOPIC_OR_PARTITION):
            topics.append(_refused_topic(t.name))
        else:
            topics.append(t)
    response.topics = topics
    return response


def coordinator_refusal(api_key: int, request: Any, acls: AclSet, who: Request) -> Any | None:
    """The answer to a transaction API the client may not send, or None to forward it."""
    if api_key == API_END_TXN:
        code = authorize.transactional_id(acls, who, request.transactional_id)
        return None if code == errors.NONE else error_response(api_key, request, code)
    if api_key == API_ADD_OFFSETS_TO_TXN:
        code = authorize.add_offsets_to_txn(acls, who, request.transactional_id, request.group_id)
        return None if code == errors.NONE else error_response(api_key, request, code)
    if api_key == API_ADD_PARTITIONS_TO_TXN:
        topics = request.v3_and_below_topics or []
        code, per_topic = authorize.add_partitions_to_txn(acls, who, request.v3_and_below_transactional_id or "",
                                                          [t.name for t in topics])
        if code != errors.NONE:
            return error_response(api_key, request, code)
        if not per_topic:
            return None
        topic_cls = AddPartitionsToTxnResponse.AddPartitionsToTxnTopicResult
        part_cls = topic_cls.AddPartitionsToTxnPartitionResult
        return AddPartitionsToTxnResponse(throttle_time_ms=0, error_code=errors.NONE, results_by_transaction=[],
                                          results_by_topic_v3_and_below=[
            topic_cls(name=t.name, results_by_partition=[part_cls(partition_index=p,
                                                                  partition_error_code=per_topic[t.name])
                                                         for p in t.partitions])
            for t in topics])
    if api_key == API_TXN_OFFSET_COMMIT:
        code, per_topic = authorize.txn_offset_commit(acls, who, request.transactional_id, request.group_id,
                                                      [t.name for t in request.topics])
        if code != errors.NONE:
            return error_response(api_key, request, code)
        if not per_topic:
            return None
        topic_cls = TxnOffsetCommitResponse.TxnOffsetCommitResponseTopic
        part_cls = topic_cls.TxnOffsetCommitResponsePartition
        return TxnOffsetCommitResponse(throttle_time_ms=0, topics=[
            topic_cls(name=t.name, partitions=[part_cls(partition_index=p.partition_index, error_code=per_topic[t.name])
                                               for p in t.partitions])
            for t in request.topics])
    raise ValueError(f"api_key {api_key} is not a transaction API forwarded to a coordinator")
