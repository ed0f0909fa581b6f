"""ProduceRequest bodies from raw batches and ProduceResponse answers: bytes written out by
hand from the Kafka layout, and the same bytes as aiokafka's own Schema encodes them for
every version it negotiates."""

from __future__ import annotations

import io
import struct

import pytest
from aiokafka.protocol.produce import ProduceRequest

from kafka_protocol.produce_codec import (
    decode_produce_response,
    decode_response_header,
    encode_produce_body,
    encode_produce_frame,
)
from kafka_protocol.produce_request import RawProduceRequest

# Two topics, the first with two partitions (one batch a memoryview slice), the second an empty batch.
TOPICS = [("t", [(0, b"abc"), (3, memoryview(b"-xyz")[1:])]), ("uu", [(1, b"")])]

# By hand: acks -1 (ff ff), timeout 1000 (00 00 03 e8), 2 topics;
# "t": len 1, 2 partitions: p0 len 3 "abc", p3 len 3 "xyz"; "uu": len 2, 1 partition: p1 len 0.
BODY_V0_V2 = bytes.fromhex(
    "ffff" "000003e8" "00000002"
    "0001" "74" "00000002" "00000000" "00000003" "616263" "00000003" "00000003" "78797a"
    "0002" "7575" "00000001" "00000001" "00000000")
BODY_V3_PLUS = bytes.fromhex("ffff") + BODY_V0_V2  # a null transactional_id (int16 -1) first


@pytest.mark.parametrize(("version", "transactional_id", "want"), [
    (0, None, BODY_V0_V2),
    (2, None, BODY_V0_V2),
    (3, None, BODY_V3_PLUS),
    (7, None, BODY_V3_PLUS),
    (8, None, BODY_V3_PLUS),
    (3, "tx", bytes.fromhex("0002") + b"tx" + BODY_V0_V2),
])
def test_body_written_by_hand(version, transactional_id, want):
    assert encode_produce_body(version, transactional_id, -1, 1000, TOPICS) == want


def test_no_topics_is_an_empty_array():
    assert encode_produce_body(7, None, 1, 0, []) == bytes.fromhex("ffff" "0001" "00000000" "00000000")


def test_frame_written_by_hand():
    # size 8 + 2 + 3 + body; api_key 0, api_version 7, correlation_id 42, client_id "cid" (len 3)
    head = bytes.fromhex("0000" "0007" "0000002a" "0003") + b"cid"
    want = struct.pack(">i", len(head) + len(BODY_V3_PLUS)) + head + BODY_V3_PLUS
    assert encode_produce_frame(7, 42, "cid", None, -1, 1000, TOPICS) == want
    null_client = bytes.fromhex("0000" "0002" "00000001" "ffff")  # client_id null: int16 -1
    assert encode_produce_frame(2, 1, None, None, -1, 1000, TOPICS) == (
        struct.pack(">i", len(null_client) + len(BODY_V0_V2)) + null_client + BODY_V0_V2)


@pytest.mark.parametrize("struct_class", ProduceRequest._CLASSES, ids=lambda c: c.__name__)
def test_frame_as_aiokafkas_connection_writes_it(struct_class):
    """conn.send writes int32 size + header.encode() + struct.encode()."""
    as_bytes = [(t, [(q, bytes(b)) for q, b in parts]) for t, parts in TOPICS]
    theirs = ProduceRequest(None, -1, 1000, as_bytes).build(struct_class)
    message = theirs.build_request_header(correlation_id=9, client_id="agent").encode() + theirs.encode()
    ours = encode_produce_frame(struct_class.API_VERSION, 9, "agent", None, -1, 1000, TOPICS)
    assert ours == struct.pack(">i", len(message)) + message


def test_response_header():
    assert decode_response_header(bytes.fromhex("0000002a") + b"rest") == 42
    with pytest.raises(ValueError, match="cut short"):
        decode_response_header(b"\0\0")


@pytest.mark.parametrize(("version", "transactional_id", "topics", "error"), [
    (9, None, TOPICS, ValueError),  # flexible versions have another layout
    (-1, None, TOPICS, ValueError),
    (2, "tx", TOPICS, ValueError),  # no transactional id before v3
    (7, None, [("t" * 32768, [(0, b"a")])], ValueError),  # name too long for an int16 length
    (7, None, [("t", [(2**31, b"a")])], struct.error),  # partition outside int32
])
def test_refused(version, transactional_id, topics, error):
    with pytest.raises(error):
        encode_produce_body(version, transactional_id, -1, 1000, topics)


@pytest.mark.parametrize("struct_class", ProduceRequest._CLASSES, ids=lambda c: c.__name__)
def test_same_bytes_as_aiokafka(struct_class):
    as_bytes = [(t, [(q, bytes(b)) for q, b in parts]) for t, parts in TOPICS]
    ours = RawProduceRequest(None, -1, 1000, TOPICS).build(struct_class)
    theirs = ProduceRequest(None, -1, 1000, as_bytes).build(struct_class)
    assert ours.encode() == theirs.encode()
    assert isinstance(ours, struct_class)
    header = ours.build_request_header(correlation_id=7, client_id="c").encode()
    assert header == theirs.build_request_header(correlation_id=7, client_id="c").encode()


# By hand: 2 topics; "t" (len 1) with p0 error 0 offset 5 and p3 error 6 offset -1; "uu" with p1 error 0 offset 9.
def answer(extra: bytes, throttle: bool) -> bytes:
    """`extra`: the per-partition fields after the offset (v2: log_append_time, v5: + log_start_offset)."""
    return bytes.fromhex(
        "00000002"
        "0001" "74" "00000002"
        + "00000000" "0000" "0000000000000005" + extra.hex()
        + "00000003" "0006" "ffffffffffffffff" + extra.hex()
        + "0002" "7575" "00000001"
        + "00000001" "0000" "0000000000000009" + extra.hex()
        + ("00000064" if throttle else ""))


ANSWER = [("t", [(0, 0, 5), (3, 6, -1)]), ("uu", [(1, 0, 9)])]
APPEND_TIME = bytes.fromhex("ffffffffffffffff")  # log_append_time -1 (CreateTime topics)
LOG_START = bytes.fromhex("0000000000000007")


@pytest.mark.parametrize(("version", "data"), [
    (0, answer(b"", throttle=False)),
    (1, answer(b"", throttle=True)),
    (2, answer(APPEND_TIME, throttle=True)),
    (4, answer(APPEND_TIME, throttle=True)),
    (5, answer(APPEND_TIME + LOG_START, throttle=True)),
    (7, answer(APPEND_TIME + LOG_START, throttle=True)),
])
def test_answer_read_by_hand(version, data):
    assert decode_produce_response(version, data) == ANSWER
    assert decode_produce_response(version, bytes.fromhex("00000000") + (b"\0" * 4 if version else b"")) == []


@pytest.mark.parametrize(("version", "data", "match"), [
    (8, answer(b"", throttle=False), "only v0-v7"),
    (1, answer(b"", throttle=True)[:-1], "cut short"),  # throttle time cut
    (0, answer(b"", throttle=False)[:20], "cut short"),  # inside a partition
    (0, answer(b"", throttle=False) + b"x", "1 bytes left"),
    (0, bytes.fromhex("ffffffff"), "negative topic count"),
    (0, bytes.fromhex("00000001" "0001" "74" "ffffffff"), "negative partition count"),
    (0, bytes.fromhex("00000001" "0005" "74"), "topic name of 5 bytes"),
    (0, bytes.fromhex("00000001" "0001" "ff" "00000000"), "not UTF-8"),
])
def test_bad_answer_refused(version, data, match):
    with pytest.raises(ValueError, match=match):
        decode_produce_response(version, data)


@pytest.mark.parametrize("struct_class", ProduceRequest._CLASSES, ids=lambda c: c.__name__)
def test_answer_as_aiokafka_encodes_it(struct_class):
    version = struct_class.API_VERSION
    extra = (-1,) * (version >= 2) + (7,) * (version >= 5)
    topics = [(t, [(*part, *extra) for part in parts]) for t, parts in ANSWER]
    encoded = struct_class.RESPONSE_TYPE(topics, 100).encode() if version else struct_class.RESPONSE_TYPE(topics).encode()
    built = RawProduceRequest(None, -1, 1000, TOPICS).build(struct_class)
    assert type(built).RESPONSE_TYPE.decode(io.BytesIO(encoded)).topics == ANSWER  # as the connection calls it
