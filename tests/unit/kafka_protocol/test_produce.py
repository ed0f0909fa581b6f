"""kafka_protocol.produce agrees byte for byte with two libraries, and reads back what it writes.

References: kafka-python 3's schema classes (Produce v3-v12, the proxy's versions) and
aiokafka's (v0-v7, the agent's), for requests and responses in both directions. Hand-made
frames pin the layout where a library cannot (unknown tagged fields, KIP-951 leader hints,
malformed bytes). Imports nothing of the project but the codec.
"""

from __future__ import annotations

import io
import struct

import pytest
from aiokafka.protocol.produce import ProduceRequest as AioProduceRequest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.producer import ProduceRequest, ProduceResponse

from kafka_protocol.produce import (
    PartitionAnswer,
    PartitionProduceData,
    ProduceAnswer,
    ProduceRequestData,
    ProtocolError,
    TopicProduceData,
    decode_produce_request,
    decode_produce_response,
    decode_produce_response_body,
    decode_response_header,
    encode_produce_body_parts,
    encode_produce_request,
    encode_produce_request_parts,
    encode_produce_response,
    produce_request,
)

P = ProduceRequest
R = ProduceResponse
RP = R.TopicProduceResponse.PartitionProduceResponse
AIO_VERSIONS = [c.API_VERSION for c in AioProduceRequest._CLASSES]  # 0-7
KAFKA_PYTHON_VERSIONS = range(3, 13)

names = st.text(alphabet="abcxyz-_.0189é", min_size=1, max_size=30)
record_sets = st.one_of(st.none(), st.binary(max_size=300))
int64 = st.integers(-(2**63), 2**63 - 1)
messages = st.one_of(st.none(), st.text(max_size=40))


def request_specs(versions, records=record_sets):
    return st.fixed_dictionaries({
        "transactional_id": st.one_of(st.none(), names),
        "acks": st.sampled_from([-1, 0, 1, 5]),
        "timeout_ms": st.integers(-(2**31), 2**31 - 1),
        "topics": st.lists(st.tuples(names, st.lists(st.tuples(st.integers(0, 2**31 - 1), records), max_size=4)),
                           max_size=4),
        "version": st.sampled_from(list(versions)),
        "correlation_id": st.integers(0, 2**31 - 1),
        "client_id": st.one_of(st.none(), names),
    })


def ours(spec) -> ProduceRequestData:
    txn = spec["transactional_id"] if spec["version"] >= 3 else None
    return ProduceRequestData(txn, spec["acks"], spec["timeout_ms"], tuple(
        TopicProduceData(name, tuple(PartitionProduceData(i, None if r is None else memoryview(r)) for i, r in parts))
        for name, parts in spec["topics"]))


def as_values(request: ProduceRequestData):
    return (request.transactional_id, request.acks, request.timeout_ms,
            [(t.name, [(p.index, None if p.records is None else bytes(p.records)) for p in t.partition_data])
             for t in request.topic_data])


def kafka_python_request_bytes(spec) -> bytes:
    request = P(transactional_id=spec["transactional_id"], acks=spec["acks"], timeout_ms=spec["timeout_ms"],
                topic_data=[P.TopicProduceData(name=name, partition_data=[
                    P.TopicProduceData.PartitionProduceData(index=i, records=r) for i, r in parts])
                    for name, parts in spec["topics"]])
    request.with_header(correlation_id=spec["correlation_id"], client_id=spec["client_id"])
    return bytes(request.encode(version=spec["version"], header=True, framed=True))


def aiokafka_request_bytes(spec) -> bytes:
    """As aiokafka's connection writes it: int32 size + header + struct."""
    version = spec["version"]
    struct_class = AioProduceRequest._CLASSES[version]
    txn = spec["transactional_id"] if version >= 3 else None
    built = AioProduceRequest(txn, spec["acks"], spec["timeout_ms"], spec["topics"]).build(struct_class)
    message = (built.build_request_header(correlation_id=spec["correlation_id"], client_id=spec["client_id"]).encode()
               + built.encode())
    return struct.pack(">i", len(message)) + message


def body_of(frame: bytes) -> memoryview:
    """The body of a request frame with a non-flexible or flexible header v1/v2."""
    (client_len,) = struct.unpack_from(">h", frame, 12)
    pos = 14 + max(client_len, 0)
    version = struct.unpack_from(">h", frame, 6)[0]
    return memoryview(frame)[pos + (1 if version >= 9 else 0):]


# --- Requests --------------------------------------------------------------------------------

@settings(max_examples=200, deadline=None)
@given(spec=request_specs(KAFKA_PYTHON_VERSIONS))
def test_request_is_kafka_pythons_bytes_and_reads_back(spec):
    theirs = kafka_python_request_bytes(spec)
    assert encode_produce_request(ours(spec), spec["version"], spec["correlation_id"], spec["client_id"]) == theirs
    decoded = decode_produce_request(body_of(theirs), spec["version"])
    assert as_values(decoded) == as_values(ours(spec))
    for t in decoded.topic_data:  # record sets are views of the frame, not copies
        for p in t.partition_data:
            assert p.records is None or p.records.obj is theirs


@settings(max_examples=200, deadline=None)
@given(spec=request_specs(AIO_VERSIONS, records=st.binary(max_size=300)))
def test_request_is_aiokafkas_bytes_and_reads_back(spec):
    theirs = aiokafka_request_bytes(spec)
    assert encode_produce_request(ours(spec), spec["version"], spec["correlation_id"], spec["client_id"]) == theirs
    assert as_values(decode_produce_request(body_of(theirs), spec["version"])) == as_values(ours(spec))


@settings(max_examples=100, deadline=None)
@given(spec=request_specs(range(0, 13)))
def test_request_round_trip_every_version(spec):
    frame = b"".join(encode_produce_request_parts(ours(spec), spec["version"], spec["correlation_id"],
                                                  spec["client_id"]))
    assert struct.unpack_from(">i", frame)[0] == len(frame) - 4
    body = b"".join(encode_produce_body_parts(ours(spec), spec["version"]))
    assert frame.endswith(body)
    assert as_values(decode_produce_request(body_of(frame), spec["version"])) == as_values(ours(spec))


# By hand: acks -1 (ff ff), timeout 1000 (00 00 03 e8), 2 topics;
# "t": len 1, 2 partitions: p0 len 3 "abc", p3 len 3 "xyz"; "uu": len 2, 1 partition: p1 len 0.
TOPICS = [("t", [(0, b"abc"), (3, memoryview(b"-xyz")[1:])]), ("uu", [(1, b"")])]
BODY_V0_V2 = bytes.fromhex(
    "ffff" "000003e8" "00000002"
    "0001" "74" "00000002" "00000000" "00000003" "616263" "00000003" "00000003" "78797a"
    "0002" "7575" "00000001" "00000001" "00000000")


@pytest.mark.parametrize(("version", "transactional_id", "body"), [
    (0, None, BODY_V0_V2),
    (2, None, BODY_V0_V2),
    (3, None, bytes.fromhex("ffff") + BODY_V0_V2),  # a null transactional_id (int16 -1) first
    (8, None, bytes.fromhex("ffff") + BODY_V0_V2),
    (3, "tx", bytes.fromhex("0002") + b"tx" + BODY_V0_V2),
])
def test_request_written_by_hand(version, transactional_id, body):
    # size, api_key 0, api_version, correlation_id 42, client_id "cid" (len 3)
    head = struct.pack(">hhih", 0, version, 42, 3) + b"cid"
    frame = encode_produce_request(produce_request(-1, 1000, TOPICS, transactional_id), version, 42, "cid")
    assert frame == struct.pack(">i", len(head) + len(body)) + head + body


def test_request_v9_with_unknown_tagged_fields_read_by_hand():
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
    assert as_values(decoded) == (None, 1, 500, [("t", [(4, b"abc")])])


@pytest.mark.parametrize(("body", "version"), [
    (b"", 3),                                            # nothing at all
    (bytes.fromhex("ffff" "0001" "000003e8" "7fffffff"), 3),  # 2^31-1 topics in 0 bytes
    (bytes.fromhex("ffff" "0001" "000003e8" "00000001" "0001") + b"t"
     + bytes.fromhex("00000001" "00000000" "00000010"), 3),  # records run past the end
    (bytes.fromhex("ffff" "0001" "000003e8" "00000000" "ff"), 3),  # a trailing byte
    (bytes.fromhex("0001" "000003e8" "fffffffe"), 0),    # a negative count other than null
    (bytes.fromhex("0001" "000003e8" "00000001" "0001" "ff" "00000000"), 0),  # a name that is not UTF-8
    (bytes.fromhex("0001" "000003e8" "00000001" "ffff" "00000000"), 0),  # a null topic name
])
def test_malformed_request_is_the_peers_fault(body, version):
    with pytest.raises(ProtocolError):
        decode_produce_request(memoryview(body), version)


@pytest.mark.parametrize(("version", "produce", "error"), [
    (13, produce_request(-1, 1000, TOPICS), ValueError),   # v13 names topics by id
    (-1, produce_request(-1, 1000, TOPICS), ValueError),
    (2, produce_request(-1, 1000, TOPICS, "tx"), ValueError),  # no transactional id before v3
    (7, produce_request(-1, 1000, [("t" * 32768, [(0, b"a")])]), ValueError),  # name beyond an int16 length
    (7, produce_request(-1, 1000, [("t", [(2**31, b"a")])]), struct.error),  # partition outside int32
])
def test_request_we_cannot_write_is_refused(version, produce, error):
    with pytest.raises(error):
        encode_produce_request(produce, version, 1, None)


def test_protocol_error_is_a_value_error():
    assert issubclass(ProtocolError, ValueError)


# --- Responses -------------------------------------------------------------------------------

answers = st.lists(st.builds(
    PartitionAnswer, topic=st.sampled_from(["a", "b-topic", "é"]), index=st.integers(0, 2**31 - 1),
    error_code=st.integers(-1, 120), base_offset=int64, log_append_time_ms=int64, log_start_offset=int64,
    error_message=messages), max_size=8)


def grouped(partitions):
    by_topic: dict[str, list[PartitionAnswer]] = {}
    for p in partitions:
        by_topic.setdefault(p.topic, []).append(p)
    return by_topic


def as_sent(p: PartitionAnswer, version: int) -> PartitionAnswer:
    """What a version carries of `p`."""
    return p._replace(log_append_time_ms=p.log_append_time_ms if version >= 2 else -1,
                      log_start_offset=p.log_start_offset if version >= 5 else -1,
                      error_message=p.error_message if version >= 8 else None)


def in_topic_order(partitions, version):
    return tuple(as_sent(p, version) for ps in grouped(partitions).values() for p in ps)


def kafka_python_response_bytes(partitions, throttle, correlation_id, version, *, record_errors=(), leader=None,
                                 endpoints=()) -> bytes:
    response = R(responses=[R.TopicProduceResponse(name=t, partition_responses=[RP(
        index=p.index, error_code=p.error_code, base_offset=p.base_offset,
        log_append_time_ms=p.log_append_time_ms, log_start_offset=p.log_start_offset,
        record_errors=[RP.BatchIndexAndErrorMessage(batch_index=i, batch_index_error_message=m)
                       for i, m in record_errors],
        error_message=p.error_message,
        **({"current_leader": RP.LeaderIdAndEpoch(leader_id=leader[0], leader_epoch=leader[1])} if leader else {}))
        for p in ps]) for t, ps in grouped(partitions).items()],
        throttle_time_ms=throttle,
        node_endpoints=[R.NodeEndpoint(node_id=n, host=h, port=port, rack=None) for n, h, port in endpoints])
    response.API_VERSION = version
    response.with_header(correlation_id=correlation_id)
    return bytes(response.encode(header=True, framed=True))


def aiokafka_response_body(partitions, throttle, version) -> bytes:
    response_type = AioProduceRequest._CLASSES[version].RESPONSE_TYPE
    topics = [(t, [(p.index, p.error_code, p.base_offset) + (p.log_append_time_ms,) * (version >= 2)
                   + (p.log_start_offset,) * (version >= 5) for p in ps]) for t, ps in grouped(partitions).items()]
    return response_type(topics, throttle).encode() if version else response_type(topics).encode()


@settings(max_examples=200, deadline=None)
@given(partitions=answers, version=st.sampled_from(list(KAFKA_PYTHON_VERSIONS)),
       correlation_id=st.integers(0, 2**31 - 1), throttle=st.integers(0, 2**31 - 1))
def test_response_is_kafka_pythons_bytes(partitions, version, correlation_id, throttle):
    assert encode_produce_response(partitions, correlation_id, version, throttle) == kafka_python_response_bytes(
        partitions, throttle, correlation_id, version)


@settings(max_examples=200, deadline=None)
@given(partitions=answers, version=st.sampled_from(list(KAFKA_PYTHON_VERSIONS)),
       correlation_id=st.integers(0, 2**31 - 1), throttle=st.integers(0, 2**31 - 1),
       record_errors=st.lists(st.tuples(st.integers(0, 1000), messages), max_size=3),
       leader=st.one_of(st.none(), st.tuples(st.integers(0, 100), st.integers(0, 100))),
       endpoints=st.lists(st.tuples(st.integers(0, 100), names, st.integers(1, 65535)), max_size=2))
def test_response_from_kafka_python_read_whatever_it_carries(partitions, version, correlation_id, throttle,
                                                             record_errors, leader, endpoints):
    frame = kafka_python_response_bytes(partitions, throttle, correlation_id, version, record_errors=record_errors,
                                        leader=leader, endpoints=endpoints)[4:]
    assert decode_response_header(frame) == correlation_id
    assert decode_produce_response(frame, version) == ProduceAnswer(in_topic_order(partitions, version), throttle)


@settings(max_examples=200, deadline=None)
@given(partitions=answers, version=st.sampled_from(AIO_VERSIONS), correlation_id=st.integers(0, 2**31 - 1),
       throttle=st.integers(0, 2**31 - 1))
def test_response_is_aiokafkas_bytes_and_reads_back(partitions, version, correlation_id, throttle):
    theirs = aiokafka_response_body(partitions, throttle, version)
    frame = encode_produce_response(partitions, correlation_id, version, throttle)
    assert frame == struct.pack(">ii", len(theirs) + 4, correlation_id) + theirs
    assert decode_produce_response_body(theirs, version) == ProduceAnswer(
        in_topic_order(partitions, version), throttle if version >= 1 else 0)


@settings(max_examples=100, deadline=None)
@given(partitions=answers, version=st.integers(0, 12), correlation_id=st.integers(0, 2**31 - 1),
       throttle=st.integers(0, 2**31 - 1))
def test_response_round_trip_every_version(partitions, version, correlation_id, throttle):
    frame = encode_produce_response(partitions, correlation_id, version, throttle)[4:]
    assert decode_response_header(frame) == correlation_id
    assert decode_produce_response(frame, version) == ProduceAnswer(
        in_topic_order(partitions, version), throttle if version >= 1 else 0)


# By hand: 2 topics; "t" (len 1) with p0 error 0 offset 5 and p3 error 6 offset -1; "uu" with p1 error 0 offset 9.
def answer_body(extra: bytes, throttle: bool) -> bytes:
    """`extra`: the per-partition fields after the offset (v2: log_append_time, v5: + log_start_offset)."""
    return bytes.fromhex(
        "00000002"
        "0001" "74" "00000002"
        + "00000000" "0000" "0000000000000005" + extra.hex()
        + "00000003" "0006" "ffffffffffffffff" + extra.hex()
        + "0002" "7575" "00000001"
        + "00000001" "0000" "0000000000000009" + extra.hex()
        + ("00000064" if throttle else ""))


APPEND_TIME = bytes.fromhex("ffffffffffffffff")  # log_append_time -1 (CreateTime topics)
LOG_START = bytes.fromhex("0000000000000007")


@pytest.mark.parametrize(("version", "body", "throttle", "log_start"), [
    (0, answer_body(b"", throttle=False), 0, -1),
    (1, answer_body(b"", throttle=True), 100, -1),
    (2, answer_body(APPEND_TIME, throttle=True), 100, -1),
    (5, answer_body(APPEND_TIME + LOG_START, throttle=True), 100, 7),
    (7, answer_body(APPEND_TIME + LOG_START, throttle=True), 100, 7),
])
def test_response_read_by_hand(version, body, throttle, log_start):
    assert decode_produce_response_body(body, version) == ProduceAnswer((
        PartitionAnswer("t", 0, 0, 5, -1, log_start), PartitionAnswer("t", 3, 6, -1, -1, log_start),
        PartitionAnswer("uu", 1, 0, 9, -1, log_start)), throttle)


def test_response_v9_with_a_leader_hint_that_is_skipped():
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
    assert decode_produce_response(frame, 9) == ProduceAnswer((PartitionAnswer("t", 4, 0, 1200, -1, 0, None),), 0)


def test_response_v3_written_by_hand():
    assert encode_produce_response([PartitionAnswer("t", 2, 0, 41, -1)], 5, 3) == (
        struct.pack(">i", 41)          # size: 41 bytes follow
        + struct.pack(">i", 5)         # correlation_id 5
        + struct.pack(">i", 1)         # responses: 1
        + struct.pack(">h", 1) + b"t"  # name "t"
        + struct.pack(">i", 1)         # partition_responses: 1
        + struct.pack(">ihqq", 2, 0, 41, -1)  # index 2, no error, base_offset 41, log_append_time_ms -1
        + struct.pack(">i", 0))        # throttle_time_ms 0


@pytest.mark.parametrize(("version", "body", "match"), [
    (1, answer_body(b"", throttle=True)[:-1], "truncated"),   # throttle time cut
    (0, answer_body(b"", throttle=False)[:20], "truncated"),  # inside a partition
    (0, answer_body(b"", throttle=False) + b"x", "1 bytes after"),
    (0, bytes.fromhex("fffffffe"), "array of -2"),
    (0, bytes.fromhex("7fffffff"), "elements in 0 bytes"),
    (0, bytes.fromhex("00000001" "0005" "74"), "truncated"),  # name runs past the end
    (0, bytes.fromhex("00000001" "0001" "ff" "00000000"), "not UTF-8"),
    (0, bytes.fromhex("00000001" "ffff" "00000000"), "null topic name"),
])
def test_malformed_response_is_the_peers_fault(version, body, match):
    with pytest.raises(ProtocolError, match=match):
        decode_produce_response_body(body, version)


def test_response_header_and_versions_we_do_not_read():
    assert decode_response_header(bytes.fromhex("0000002a") + b"rest") == 42
    with pytest.raises(ProtocolError, match="cut short"):
        decode_response_header(b"\0\0")
    with pytest.raises(ValueError, match="only v0-v12"):
        decode_produce_response_body(b"", 13)
    with pytest.raises(ValueError, match="only v0-v12"):
        encode_produce_response([], 1, 13)


def test_aiokafka_reader_shape():
    """aiokafka's connection hands the decoder a BytesIO after the response header."""
    assert decode_produce_response_body(io.BytesIO(answer_body(b"", throttle=False)).read(), 0).partitions[2] == (
        PartitionAnswer("uu", 1, 0, 9))
