"""The pure parts of transaction forwarding (kafka_upstream/coordinators.py); the forwarding itself
is tested on a real cluster in tests/integration/cluster/test_transactions_on_cluster.py."""

from __future__ import annotations

import struct

from kafka.protocol.producer.transaction import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    EndTxnRequest,
    TxnOffsetCommitRequest,
)

from kafka_upstream.coordinators import coordinator_key, error_response, top_level_error, with_correlation_id
from kafka_upstream.upstream import RawRequest


def test_the_key_that_names_the_coordinator():
    assert coordinator_key(26, EndTxnRequest(transactional_id="t1", producer_id=1, producer_epoch=0,
                                             committed=True)) == (1, "t1")
    assert coordinator_key(25, AddOffsetsToTxnRequest(transactional_id="t2", producer_id=1, producer_epoch=0,
                                                      group_id="g")) == (1, "t2")  # the transaction's, not the group's
    assert coordinator_key(28, TxnOffsetCommitRequest(transactional_id="t3", group_id="g3", producer_id=1,
                                                      producer_epoch=0, topics=[])) == (0, "g3")
    add = AddPartitionsToTxnRequest(v3_and_below_transactional_id="t4", v3_and_below_producer_id=1,
                                    v3_and_below_producer_epoch=0, v3_and_below_topics=[])
    assert coordinator_key(24, add) == (1, "t4")


def test_raw_request_frame_keeps_the_body_and_the_clients_header_but_the_correlation_id():
    raw = RawRequest(api_key=26, api_version=3, body=b"BODY", flexible=True, client_id="az")
    assert raw.frame(7) == (
        struct.pack(">i", 2 + 2 + 4 + 2 + 2 + 1 + 4)  # size: key, version, correlation, client id, tags, body
        + struct.pack(">hhih", 26, 3, 7, 2) + b"az"  # header v2: api_key, api_version, correlation_id, client_id
        + b"\x00"  # no tagged fields
        + b"BODY")
    assert RawRequest(26, 1, b"B", False, "").frame(7) == struct.pack(">ihhih", 11, 26, 1, 7, 0) + b"B"
    assert RawRequest(26, 1, b"B", False, None).frame(7) == struct.pack(">ihhih", 11, 26, 1, 7, -1) + b"B"  # null


def test_the_clients_correlation_id_goes_back_in():
    upstream_frame = struct.pack(">i", 99) + b"rest"  # correlation id 99 (ours), then the answer
    assert with_correlation_id(upstream_frame, 5) == struct.pack(">ii", 8, 5) + b"rest"


def test_wrong_coordinator_is_read_from_end_txn_and_add_offsets_answers():
    end_txn_v1 = struct.pack(">iih", 1, 0, 16)  # correlation id, throttle_time_ms, NOT_COORDINATOR
    assert top_level_error(26, end_txn_v1, 1) == 16
    end_txn_v3 = struct.pack(">ib", 1, 0) + struct.pack(">ih", 0, 15)  # flexible: header tags, then the body
    assert top_level_error(26, end_txn_v3, 3) == 15
    assert top_level_error(25, struct.pack(">iih", 1, 0, 0), 0) == 0
    assert top_level_error(24, struct.pack(">iih", 1, 0, 16), 0) == 0  # per-partition errors: not read here
    assert top_level_error(26, b"\x00\x00", 0) == 0  # too short: nothing to read


def test_error_answers_carry_the_code_for_every_partition():
    add = AddPartitionsToTxnRequest(v3_and_below_transactional_id="t", v3_and_below_producer_id=1,
                                    v3_and_below_producer_epoch=0,
                                    v3_and_below_topics=[AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(
                                        name="a", partitions=[0, 2])])
    answer = error_response(24, add, 15)
    assert [(t.name, [(p.partition_index, p.partition_error_code) for p in t.results_by_partition])
            for t in answer.results_by_topic_v3_and_below] == [("a", [(0, 15), (2, 15)])]
    assert error_response(26, None, 15).error_code == 15
