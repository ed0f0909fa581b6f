"""kafka_protocol.produce_scan reads what kafka-python writes, for every Produce version the
proxy forwards (v3-v12), rewrites headers to kafka-python's bytes, and refuses whatever it
should not carry without raising. Expected values are written by hand from the inputs.
Imports nothing of the project but the codec (and the batch layout it reads).
"""

from __future__ import annotations

import random
import struct

import pytest
from kafka.protocol.producer import ProduceRequest, ProduceResponse

from kafka_protocol._wire import ProtocolError
from kafka_protocol.produce_scan import (
    ScannedAnswer,
    client_answer,
    forwarded_request_head,
    scan_produce_request,
    scan_produce_response,
)

P = ProduceRequest
R = ProduceResponse
RP = R.TopicProduceResponse.PartitionProduceResponse
VERSIONS = range(3, 13)
MAX_BATCH = 1_048_588
BATCH_HEADER = struct.Struct(">qiiBIhiqqqhii")


def batch(payload: bytes = b"r" * 40, *, producer_id: int = 4242, epoch: int = 3, sequence: int = 17,
          count: int = 5, attributes: int = 0, base_ts: int = 1_700_000_000_000, magic: int = 2,
          length_delta: int = 0, crc: int = 0xDEADBEEF) -> bytes:
    """A magic-2 batch header written field by field, then `payload` (never read by the scan)."""
    batch_length = 49 + len(payload) + length_delta  # the 61-byte header minus baseOffset and batchLength
    return BATCH_HEADER.pack(0, batch_length, -1, magic, crc, attributes, count - 1, base_ts, base_ts + 9,
                             producer_id, epoch, sequence, count) + payload


def request_frame(version: int, topics, *, acks: int = -1, transactional_id: str | None = None,
                  correlation_id: int = 7, client_id: str | None = "rdkafka") -> bytes:
    request = P(transactional_id=transactional_id, acks=acks, timeout_ms=30_000,
                topic_data=[P.TopicProduceData(name=name, partition_data=[
                    P.TopicProduceData.PartitionProduceData(index=i, records=r) for i, r in parts])
                    for name, parts in topics])
    request.with_header(correlation_id=correlation_id, client_id=client_id)
    return bytes(request.encode(version=version, header=True, framed=True))


def body_of(frame: bytes) -> memoryview:
    """The body after the size prefix and request header v1 (v2 from v9: one tag byte more)."""
    (client_len,) = struct.unpack_from(">h", frame, 12)
    version = struct.unpack_from(">h", frame, 6)[0]
    return memoryview(frame)[14 + max(client_len, 0) + (1 if version >= 9 else 0):]


# --- Requests --------------------------------------------------------------------------------

@pytest.mark.parametrize("version", VERSIONS)
def test_request_of_every_version_read_from_kafka_pythons_bytes(version):
    first, second, third = batch(), batch(b"x" * 100, sequence=0, count=1, attributes=0x10), batch(b"")
    frame = request_frame(version, [("orders", [(0, first), (5, second)]), ("é-t", [(2, third)])],
                          transactional_id="tx-1")
    scanned = scan_produce_request(body_of(frame), version, MAX_BATCH)
    assert scanned is not None
    assert (scanned.transactional_id, scanned.acks, scanned.timeout_ms) == ("tx-1", -1, 30_000)
    assert [(p.topic, p.partition) for p in scanned.partitions] == [("orders", 0), ("orders", 5), ("é-t", 2)]
    b0, b1, b2 = (p.batches[0] for p in scanned.partitions)
    assert (b0.producer_id, b0.producer_epoch, b0.base_sequence, b0.record_count, b0.is_transactional,
            b0.crc, b0.first_timestamp) == (4242, 3, 17, 5, False, 0xDEADBEEF, 1_700_000_000_000)
    assert (b1.base_sequence, b1.record_count, b1.is_transactional) == (0, 1, True)
    assert [len(p.batches[0].data) for p in scanned.partitions] == [61 + 40, 61 + 100, 61]
    assert bytes(b1.data) == second
    assert b1.data.obj is frame  # a view of the request, not a copy
    assert [p.size for p in scanned.partitions] == [101, 161, 61]
    assert [p.records for p in scanned.partitions] == [5, 1, 5]


@pytest.mark.parametrize("version", VERSIONS)
def test_forwarded_head_and_the_clients_body_are_kafka_pythons_request(version):
    topics = [("orders", [(1, batch())])]
    clients = request_frame(version, topics, correlation_id=9, client_id="app")
    body = body_of(clients)
    ours = forwarded_request_head(version, 123_456, "azsidecar", len(body)) + bytes(body)
    assert ours == request_frame(version, topics, correlation_id=123_456, client_id="azsidecar")


def test_forwarded_head_by_hand():
    # size 4 + 2 + ... : api_key 0, version 9, correlation_id 5, client_id "ab", header tag byte, then 10 body bytes
    assert forwarded_request_head(9, 5, "ab", 10) == (struct.pack(">i", 2 + 2 + 4 + 2 + 2 + 1 + 10)
                                                      + bytes.fromhex("0000" "0009" "00000005" "0002") + b"ab"
                                                      + b"\x00")
    assert forwarded_request_head(3, 5, None, 0) == struct.pack(">ihhih", 10, 0, 3, 5, -1)


@pytest.mark.parametrize(("why", "version", "topics", "acks"), [
    ("acks=0 has no answer", 9, [("t", [(0, batch())])], 0),
    ("acks 2 is invalid", 9, [("t", [(0, batch())])], 2),
    ("two batches for one partition", 9, [("t", [(0, batch() + batch())])], -1),
    ("a null record set", 9, [("t", [(0, None)])], -1),
    ("an empty record set", 9, [("t", [(0, b"")])], -1),
    ("a partition named twice", 9, [("t", [(0, batch()), (0, batch())])], -1),
    ("magic 1", 9, [("t", [(0, batch(magic=1))])], -1),
    ("a control batch", 9, [("t", [(0, batch(attributes=0x20))])], -1),
    ("a negative record count", 9, [("t", [(0, batch(count=-1))])], -1),
    ("a batch length past its record set", 9, [("t", [(0, batch(length_delta=1))])], -1),
    ("a batch length short of its record set", 9, [("t", [(0, batch(length_delta=-1))])], -1),
    ("a record set shorter than a batch header", 9, [("t", [(0, batch()[:60])])], -1),
    ("one bad partition among good ones", 9, [("t", [(0, batch()), (1, batch(magic=0))])], -1),
])
def test_requests_the_forward_path_does_not_carry(why, version, topics, acks):
    frame = request_frame(version, topics, acks=acks)
    assert scan_produce_request(body_of(frame), version, MAX_BATCH) is None, why


def test_a_batch_over_the_limit_and_versions_outside_3_to_12():
    frame = request_frame(9, [("t", [(0, batch(b"r" * 40))])])
    assert scan_produce_request(body_of(frame), 9, 101) is not None  # 61 + 40 bytes: at the limit
    assert scan_produce_request(body_of(frame), 9, 100) is None
    old = request_frame(3, [("t", [(0, batch())])])
    assert scan_produce_request(body_of(old), 2, MAX_BATCH) is None
    assert scan_produce_request(body_of(frame), 13, MAX_BATCH) is None


def test_no_partitions_at_all_is_carried_as_nothing():
    scanned = scan_produce_request(body_of(request_frame(9, [])), 9, MAX_BATCH)
    assert scanned is not None and scanned.partitions == ()


@pytest.mark.parametrize("version", [3, 8, 9, 12])
def test_every_truncation_is_refused_cleanly(version):
    body = bytes(body_of(request_frame(version, [("orders", [(0, batch()), (1, batch(b"z"))])], transactional_id="t")))
    for cut in range(len(body)):
        assert scan_produce_request(memoryview(body[:cut]), version, MAX_BATCH) is None, cut
    assert scan_produce_request(memoryview(body + b"\x00"), version, MAX_BATCH) is None  # a byte too many


@pytest.mark.parametrize("version", [3, 9, 12])
def test_seeded_corruptions_never_raise(version):
    body = bytes(body_of(request_frame(version, [("orders", [(0, batch()), (1, batch(b"z"))])])))
    rng = random.Random(20261130 + version)
    refused = 0
    for _ in range(2000):
        corrupt = bytearray(body)
        for _ in range(rng.randint(1, 3)):
            corrupt[rng.randrange(len(corrupt))] = rng.randrange(256)
        scanned = scan_produce_request(memoryview(bytes(corrupt)), version, MAX_BATCH)
        if scanned is None:
            refused += 1
        else:  # a flip in record bytes or a value field: still two partitions of one batch each
            assert len(scanned.partitions) == 2 and all(len(p.batches) == 1 for p in scanned.partitions)
    assert refused > 0


# --- Responses -------------------------------------------------------------------------------

def response_frame(version: int, partitions, *, throttle: int = 0, correlation_id: int = 99, record_errors=(),
                   leader=None, endpoints=()) -> bytes:
    """kafka-python's framed answer; partitions: (topic, index, error_code, base_offset, message)."""
    by_topic: dict[str, list] = {}
    for p in partitions:
        by_topic.setdefault(p[0], []).append(p)
    response = R(responses=[R.TopicProduceResponse(name=t, partition_responses=[RP(
        index=index, error_code=code, base_offset=offset, log_append_time_ms=-1, log_start_offset=0,
        record_errors=[RP.BatchIndexAndErrorMessage(batch_index=i, batch_index_error_message=m)
                       for i, m in record_errors],
        error_message=message,
        **({"current_leader": RP.LeaderIdAndEpoch(leader_id=leader[0], leader_epoch=leader[1])} if leader else {}))
        for _t, index, code, offset, message in ps]) for t, ps in by_topic.items()],
        throttle_time_ms=throttle,
        node_endpoints=[R.NodeEndpoint(node_id=n, host=h, port=port, rack=None) for n, h, port in endpoints])
    response.API_VERSION = version
    response.with_header(correlation_id=correlation_id)
    return bytes(response.encode(header=True, framed=True))


OK = [("orders", 0, 0, 1200, None), ("orders", 5, 0, 7, None), ("é-t", 2, 0, 0, None)]


@pytest.mark.parametrize("version", VERSIONS)
def test_a_plain_answer_of_every_version_and_its_rewrite_are_kafka_pythons(version):
    frame = response_frame(version, OK, throttle=0, correlation_id=31)[4:]
    scanned = scan_produce_response(frame, version)
    assert scanned.partitions == (("orders", 0, 0, 1200), ("orders", 5, 0, 7), ("é-t", 2, 0, 0))
    assert scanned.plain
    assert client_answer(frame, scanned, 5_000_000, 250) == response_frame(version, OK, throttle=250,
                                                                           correlation_id=5_000_000)


def test_where_the_throttle_time_sits_by_hand():
    # v3: correlation_id (4), 1 topic (4), "t" (2+1), 1 partition (4), index, error, offset (4+2+8),
    # log_append_time (8): throttle_time_ms at byte 37
    frame = response_frame(3, [("t", 0, 0, 5, None)])[4:]
    assert scan_produce_response(frame, 3) == ScannedAnswer((("t", 0, 0, 5),), 37, True)
    # v9: correlation_id (4), header tags (1), 1 topic (1), "t" (1+1), 1 partition (1), 14, times (16),
    # record_errors (1), error_message (1), partition tags (1), topic tags (1): byte 43
    frame = response_frame(9, [("t", 0, 0, 5, None)])[4:]
    assert scan_produce_response(frame, 9) == ScannedAnswer((("t", 0, 0, 5),), 43, True)


@pytest.mark.parametrize(("why", "version", "partitions", "extra"), [
    ("an error", 9, [("t", 0, 0, 5, None), ("t", 1, 6, -1, None)], {}),
    ("a duplicate", 5, [("t", 0, 46, -1, None)], {}),
    ("an error message", 8, [("t", 0, 0, 5, "careful")], {}),
    ("record errors", 8, [("t", 0, 0, 5, None)], {"record_errors": [(0, "bad record")]}),
    ("a leader hint (a tagged field)", 10, [("t", 0, 0, 5, None)], {"leader": (3, 8)}),
    ("node endpoints (a tagged field)", 10, [("t", 0, 0, 5, None)], {"endpoints": [(3, "b3", 9092)]}),
])
def test_answers_that_are_not_passed_on_as_bytes(why, version, partitions, extra):
    scanned = scan_produce_response(response_frame(version, partitions, **extra)[4:], version)
    assert not scanned.plain, why
    assert [p[:3] for p in scanned.partitions] == [p[:3] for p in partitions]


@pytest.mark.parametrize("version", [3, 5, 8, 9, 12])
def test_a_truncated_answer_is_the_brokers_fault(version):
    frame = response_frame(version, OK)[4:]
    for cut in range(len(frame)):
        with pytest.raises(ProtocolError):
            scan_produce_response(frame[:cut], version)
    with pytest.raises(ProtocolError):
        scan_produce_response(frame + b"\x00", version)
