"""The hand-written Produce decoder and encoder agree with kafka-python byte for byte.

For generated requests across Produce v3-v12 (non-flexible and flexible), the library's
encoding must decode to the same fields with the fast decoder, and the fast encoder must
produce exactly the library's bytes. Imports nothing of the proxy but kafka_protocol.kafka_codec.
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.producer import ProduceRequest

from kafka_protocol.kafka_codec import (
    ProduceRequestData,
    ProtocolError,
    decode_produce_request,
    decode_request,
    encode_produce_request,
    parse_request_frame,
)

P = ProduceRequest
names = st.text(alphabet="abcxyz-_.0189é", min_size=1, max_size=30)
record_sets = st.one_of(st.none(), st.binary(max_size=300))
partitions = st.lists(st.tuples(st.integers(0, 2**31 - 1), record_sets), max_size=4)
topics = st.lists(st.tuples(names, partitions), max_size=4)
requests = st.fixed_dictionaries({
    "transactional_id": st.one_of(st.none(), names),
    "acks": st.sampled_from([-1, 0, 1, 5]),
    "timeout_ms": st.integers(-(2**31), 2**31 - 1),
    "topics": topics,
    "version": st.integers(3, 12),
    "correlation_id": st.integers(0, 2**31 - 1),
    "client_id": st.one_of(st.none(), names),
})


def library_request(spec) -> ProduceRequest:
    return P(transactional_id=spec["transactional_id"], acks=spec["acks"], timeout_ms=spec["timeout_ms"],
             topic_data=[P.TopicProduceData(name=name, partition_data=[
                 P.TopicProduceData.PartitionProduceData(index=i, records=r) for i, r in parts])
                 for name, parts in spec["topics"]])


def library_bytes(spec) -> bytes:
    request = library_request(spec)
    request.with_header(correlation_id=spec["correlation_id"], client_id=spec["client_id"])
    return bytes(request.encode(version=spec["version"], header=True, framed=True))


@settings(max_examples=400, deadline=None)
@given(spec=requests)
def test_fast_encoder_writes_the_librarys_bytes(spec):
    fast = encode_produce_request(library_request(spec), spec["version"], spec["correlation_id"], spec["client_id"])
    assert fast == library_bytes(spec)


@settings(max_examples=400, deadline=None)
@given(spec=requests)
def test_fast_decoder_reads_the_librarys_fields(spec):
    frame = parse_request_frame(library_bytes(spec)[4:])
    fast = decode_request(frame, {0: 12})
    assert isinstance(fast, ProduceRequestData)
    library = P.decode(frame.body, version=spec["version"])
    assert (fast.transactional_id, fast.acks, fast.timeout_ms) == (
        library.transactional_id, library.acks, library.timeout_ms)
    assert [(t.name, [(p.index, None if p.records is None else bytes(p.records)) for p in t.partition_data])
            for t in fast.topic_data] == [
        (t.name, [(p.index, None if p.records is None else bytes(p.records)) for p in t.partition_data])
        for t in library.topic_data]
    # Record sets are views into the received frame, not copies.
    for t in fast.topic_data:
        for p in t.partition_data:
            assert p.records is None or isinstance(p.records, memoryview)


def test_fast_decoder_golden_v9_with_unknown_tagged_fields():
    body = (bytes.fromhex("00")        # transactional_id: null compact string
            + struct.pack(">hi", 1, 500)  # acks 1, timeout_ms 500
            + bytes.fromhex("02")      # topic_data: compact array of 1
            + bytes.fromhex("02") + b"t"  # name "t"
            + bytes.fromhex("02")      # partition_data: compact array of 1
            + struct.pack(">i", 4)     # index 4
            + bytes.fromhex("04") + b"abc"  # records: compact bytes, 3 bytes
            + bytes.fromhex("01" "07" "01" "ff")  # partition tagged fields: tag 7, 1 byte, skipped
            + bytes.fromhex("00" "00"))  # topic and request tagged fields
    decoded = decode_produce_request(memoryview(body), 9)
    assert decoded == ProduceRequestData(None, 1, 500, decoded.topic_data)
    (topic,) = decoded.topic_data
    (partition,) = topic.partition_data
    assert (topic.name, partition.index, bytes(partition.records)) == ("t", 4, b"abc")


@pytest.mark.parametrize("body", [
    b"",                                            # nothing at all
    bytes.fromhex("ffff" "0001" "000003e8" "7fffffff"),  # 2^31-1 topics in 0 bytes
    bytes.fromhex("ffff" "0001" "000003e8" "00000001" "0001") + b"t" + bytes.fromhex("00000001" "00000000" "00000010"),
    bytes.fromhex("ffff" "0001" "000003e8" "00000000" "ff"),  # a trailing byte
])
def test_fast_decoder_rejects_malformed_bodies(body):
    with pytest.raises(ProtocolError):
        decode_produce_request(memoryview(body), 3)
