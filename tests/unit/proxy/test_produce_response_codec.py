"""The hand-written ProduceResponse encoder and decoder agree with kafka-python byte for byte.

Generated responses across v3-v12: the fast encoder must write exactly the library's
bytes (for the fields the proxy sends), and the fast decoder must read from the library's
bytes the fields the library reads, whatever record_errors and KIP-951 leader hints they
carry. Imports nothing of the proxy but its codecs.
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.producer import ProduceResponse

from kafka_protocol.kafka_codec import ProtocolError
from kafka_protocol.produce_response_codec import (
    PartitionAnswer,
    ProduceAnswer,
    decode_produce_response,
    encode_produce_response,
)

R = ProduceResponse
P = R.TopicProduceResponse.PartitionProduceResponse
names = st.text(alphabet="abcxyz-_.0189é", min_size=1, max_size=30)
messages = st.one_of(st.none(), st.text(max_size=40))
int64 = st.integers(-(2**63), 2**63 - 1)
answers = st.lists(st.builds(
    PartitionAnswer, topic=st.sampled_from(["a", "b-topic", "é"]), index=st.integers(0, 2**31 - 1),
    error_code=st.integers(-1, 120), base_offset=int64, log_append_time_ms=int64, log_start_offset=int64,
    error_message=messages), max_size=8)


def library_response(partitions, throttle_time_ms: int, *, record_errors=(), leader=None, endpoints=()) -> R:
    """The library's response with `partitions` grouped by topic in order of first appearance."""
    by_topic: dict[str, list] = {}
    for p in partitions:
        by_topic.setdefault(p.topic, []).append(P(
            index=p.index, error_code=p.error_code, base_offset=p.base_offset,
            log_append_time_ms=p.log_append_time_ms, log_start_offset=p.log_start_offset,
            record_errors=[P.BatchIndexAndErrorMessage(batch_index=i, batch_index_error_message=m)
                           for i, m in record_errors],
            error_message=p.error_message,
            **({"current_leader": P.LeaderIdAndEpoch(leader_id=leader[0], leader_epoch=leader[1])} if leader else {})))
    return R(responses=[R.TopicProduceResponse(name=t, partition_responses=ps) for t, ps in by_topic.items()],
             throttle_time_ms=throttle_time_ms,
             node_endpoints=[R.NodeEndpoint(node_id=n, host=h, port=port, rack=None) for n, h, port in endpoints])


def library_bytes(response: R, correlation_id: int, version: int) -> bytes:
    response.API_VERSION = version
    response.with_header(correlation_id=correlation_id)
    return bytes(response.encode(header=True, framed=True))


def as_sent(p: PartitionAnswer, version: int) -> PartitionAnswer:
    """What a version carries of `p` (older versions have no log_start_offset or error_message)."""
    return p._replace(log_start_offset=p.log_start_offset if version >= 5 else -1,
                      error_message=p.error_message if version >= 8 else None)


@settings(max_examples=400, deadline=None)
@given(partitions=answers, version=st.integers(3, 12), correlation_id=st.integers(0, 2**31 - 1),
       throttle=st.integers(0, 2**31 - 1))
def test_fast_encoder_writes_the_librarys_bytes(partitions, version, correlation_id, throttle):
    fast = encode_produce_response(partitions, correlation_id, version, throttle)
    assert fast == library_bytes(library_response(partitions, throttle), correlation_id, version)


@settings(max_examples=400, deadline=None)
@given(partitions=answers, version=st.integers(3, 12), correlation_id=st.integers(0, 2**31 - 1),
       throttle=st.integers(0, 2**31 - 1),
       record_errors=st.lists(st.tuples(st.integers(0, 1000), messages), max_size=3),
       leader=st.one_of(st.none(), st.tuples(st.integers(0, 100), st.integers(0, 100))),
       endpoints=st.lists(st.tuples(st.integers(0, 100), names, st.integers(1, 65535)), max_size=2))
def test_fast_decoder_reads_the_librarys_fields(partitions, version, correlation_id, throttle, record_errors,
                                                leader, endpoints):
    frame = library_bytes(library_response(partitions, throttle, record_errors=record_errors, leader=leader,
                                           endpoints=endpoints), correlation_id, version)[4:]
    decoded = decode_produce_response(frame, version)
    library = R.decode(frame, version=version, header=True)
    assert decoded.correlation_id == correlation_id
    assert decoded.throttle_time_ms == library.throttle_time_ms == throttle
    assert decoded.partitions == tuple(
        PartitionAnswer(t.name, p.index, p.error_code, p.base_offset, p.log_append_time_ms,
                        p.log_start_offset if version >= 5 else -1, p.error_message if version >= 8 else None)
        for t in library.responses for p in t.partition_responses)
    # Grouping by topic keeps each topic's partitions in their order.
    expected = sorted(range(len(partitions)), key=lambda i: [p.topic for p in partitions].index(partitions[i].topic))
    assert decoded.partitions == tuple(as_sent(partitions[i], version) for i in expected)


def test_golden_v9_with_a_leader_hint_that_is_skipped():
    frame = (struct.pack(">i", 77)          # correlation_id 77
             + bytes.fromhex("00")          # response header tagged fields: none
             + bytes.fromhex("02")          # responses: compact array of 1
             + bytes.fromhex("02") + b"t"   # name "t"
             + bytes.fromhex("02")          # partition_responses: compact array of 1
             + struct.pack(">ihqqq", 4, 0, 1200, -1, 0)  # index 4, no error, base_offset 1200, time -1, start 0
             + bytes.fromhex("01")          # record_errors: compact array of 0
             + bytes.fromhex("00")          # error_message: null
             + bytes.fromhex("01" "00" "09") + struct.pack(">ii", 3, 8) + b"\x00"  # tag 0 (9 bytes): leader 3, epoch 8
             + bytes.fromhex("00")          # topic tagged fields
             + struct.pack(">i", 0)         # throttle_time_ms 0
             + bytes.fromhex("00"))         # response tagged fields
    assert decode_produce_response(frame, 9) == ProduceAnswer(77, (PartitionAnswer("t", 4, 0, 1200, -1, 0, None),), 0)


def test_golden_v3_encoding():
    assert encode_produce_response([PartitionAnswer("t", 2, 0, 41, -1)], 5, 3) == (
        struct.pack(">i", 41)          # size: 41 bytes follow
        + struct.pack(">i", 5)         # correlation_id 5
        + struct.pack(">i", 1)         # responses: 1
        + struct.pack(">h", 1) + b"t"  # name "t"
        + struct.pack(">i", 1)         # partition_responses: 1
        + struct.pack(">ihqq", 2, 0, 41, -1)  # index 2, no error, base_offset 41, log_append_time_ms -1
        + struct.pack(">i", 0))        # throttle_time_ms 0


@pytest.mark.parametrize("frame", [
    b"",                                                   # nothing at all
    struct.pack(">i", 1),                                  # correlation id only
    struct.pack(">ii", 1, 2**31 - 1),                      # 2^31-1 topics in 0 bytes
    struct.pack(">iih", 1, 1, 5) + b"ab",                  # topic name runs past the end
    struct.pack(">iih", 1, 1, 1) + b"t" + struct.pack(">i", 1) + b"\x00" * 10,  # partition cut short
    struct.pack(">iii", 1, 0, 0) + b"\x00",                # a trailing byte
])
def test_fast_decoder_rejects_malformed_frames(frame):
    with pytest.raises(ProtocolError):
        decode_produce_response(frame, 3)


def test_versions_outside_the_fast_path_are_refused():
    with pytest.raises(ValueError):
        encode_produce_response([], 1, 2)
    with pytest.raises(ValueError):
        decode_produce_response(b"", 13)
