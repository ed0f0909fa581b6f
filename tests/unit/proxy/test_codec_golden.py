"""Golden bytes for the sans-IO codec, checked against kafka-python's encoding.

Imports nothing of the proxy but kafka_protocol.kafka_codec. Expected bytes are written out by
hand, field by field, from the Kafka protocol guide; the library is the second opinion.
"""

from __future__ import annotations

import struct

import pytest
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse, MetadataResponse
from kafka.protocol.producer import ProduceRequest, ProduceResponse
from kafka.protocol.producer.transaction import InitProducerIdResponse

from kafka_protocol.kafka_codec import (
    NEED_DATA,
    FrameTooLarge,
    ProtocolError,
    ServerCodec,
    UnsupportedRequest,
    decode_request,
    encode_response,
    parse_request_frame,
)

H = bytes.fromhex


# --- request headers ------------------------------------------------------------------------

PRODUCE_V3_FRAME = (
    H("00000000")                  # size placeholder (patched below)
    + H("0000")                    # api_key 0 = Produce
    + H("0003")                    # api_version 3: request header v1 (not flexible)
    + H("01020304")                # correlation_id 0x01020304
    + H("0003") + b"abc"           # client_id: int16 length 3, "abc"
    + H("ffff")                    # body: transactional_id null (int16 -1)
    + H("ffff")                    # acks -1
    + H("00002710")                # timeout_ms 10000
    + H("00000000")                # topic_data: empty array
)
PRODUCE_V3_FRAME = struct.pack(">i", len(PRODUCE_V3_FRAME) - 4) + PRODUCE_V3_FRAME[4:]

API_VERSIONS_V3_FRAME = (
    H("00000016")                  # size 22
    + H("0012")                    # api_key 18 = ApiVersions
    + H("0003")                    # api_version 3: request header v2 (flexible)
    + H("00000009")                # correlation_id 9
    + H("0001") + b"c"             # client_id: a classic int16-length string even in header v2
    + H("01")                      # header tagged fields: 1 field
    + H("00") + H("02") + H("beef")  # tag 0, 2 bytes, skipped unread
    + H("03") + b"ab"              # body: client_software_name, compact string (length + 1 = 3)
    + H("02") + b"1"               # client_software_version, compact string "1"
    + H("00")                      # body tagged fields: none
)


def test_non_flexible_header_is_parsed_field_by_field():
    frame = parse_request_frame(PRODUCE_V3_FRAME[4:])
    assert (frame.api_key, frame.api_version, frame.correlation_id, frame.client_id) == (0, 3, 0x01020304, "abc")
    assert bytes(frame.body) == H("ffff" "ffff" "00002710" "00000000")
    assert frame.size == len(PRODUCE_V3_FRAME) - 4


def test_flexible_header_skips_tagged_fields():
    frame = parse_request_frame(API_VERSIONS_V3_FRAME[4:])
    assert (frame.api_key, frame.api_version, frame.correlation_id, frame.client_id) == (18, 3, 9, "c")
    assert bytes(frame.body) == H("03") + b"ab" + H("02") + b"1" + H("00")
    request = decode_request(frame, {18: 4})
    assert (request.client_software_name, request.client_software_version) == ("ab", "1")


def test_null_client_id():
    body = H("0012" "0000" "00000001" "ffff")  # ApiVersions v0, correlation 1, client_id null
    frame = parse_request_frame(body)
    assert frame.client_id is None
    assert bytes(frame.body) == b""


def test_library_encoded_requests_parse_to_the_same_header_and_body():
    request = ApiVersionsRequest(client_software_name="ab", client_software_version="1")
    request.with_header(correlation_id=9, client_id="c")
    library = bytes(request.encode(version=3, header=True, framed=True))
    frame = parse_request_frame(library[4:])
    assert (frame.api_key, frame.api_version, frame.correlation_id, frame.client_id) == (18, 3, 9, "c")
    # The library writes an empty header tag section (00) where the golden frame has one tag.
    assert library[4:] == H("0012" "0003" "00000009" "0001") + b"c" + H("00") + bytes(frame.body)
    produce = ProduceRequest(transactional_id=None, acks=-1, timeout_ms=10_000, topic_data=[])
    produce.with_header(correlation_id=0x01020304, client_id="abc")
    assert bytes(produce.encode(version=3, header=True, framed=True)) == PRODUCE_V3_FRAME


def test_codec_splits_a_stream_at_any_point():
    stream = PRODUCE_V3_FRAME + API_VERSIONS_V3_FRAME
    for cut in range(len(stream) + 1):
        codec = ServerCodec(max_frame_bytes=1024)
        got = []
        for piece in (stream[:cut], stream[cut:]):
            codec.receive_data(piece)
            while (frame := codec.next_frame()) is not NEED_DATA:
                got.append(frame.correlation_id)
        assert got == [0x01020304, 9], cut
        assert codec.buffered_bytes == 0


def test_frame_limits():
    codec = ServerCodec(max_frame_bytes=1024)
    codec.receive_data(struct.pack(">i", 1025))
    with pytest.raises(FrameTooLarge):
        codec.next_frame()
    codec = ServerCodec(max_frame_bytes=1024)
    codec.receive_data(struct.pack(">i", 7) + b"\x00" * 7)  # below the 8-byte header minimum
    with pytest.raises(ProtocolError):
        codec.next_frame()


def test_unknown_api_key_and_version_are_unsupported():
    with pytest.raises(UnsupportedRequest) as info:
        decode_request(parse_request_frame(H("03e8" "0000" "00000001" "ffff")), {0: 12, 18: 4})
    assert info.value.frame.api_key == 1000
    with pytest.raises(UnsupportedRequest):
        decode_request(parse_request_frame(API_VERSIONS_V3_FRAME[4:]), {18: 2})  # v3 above our max 2


# --- responses ------------------------------------------------------------------------------

def api_versions_response(error_code: int = 35) -> ApiVersionsResponse:
    return ApiVersionsResponse(error_code=error_code, throttle_time_ms=0, api_keys=[
        ApiVersionsResponse.ApiVersion(api_key=18, min_version=0, max_version=4)])


def produce_response() -> ProduceResponse:
    P = ProduceResponse.TopicProduceResponse
    return ProduceResponse(throttle_time_ms=0, responses=[P(name="x", partition_responses=[
        P.PartitionProduceResponse(index=0, error_code=0, base_offset=5, log_append_time_ms=-1,
                                   log_start_offset=0, record_errors=[], error_message=None)])])


def test_api_versions_v0_golden():
    assert encode_response(api_versions_response(), 0x01020304, 0) == (
        H("00000010")     # size 16
        + H("01020304")   # correlation_id
        + H("0023")       # error_code 35 UNSUPPORTED_VERSION
        + H("00000001")   # api_keys: int32 array length 1
        + H("0012" "0000" "0004"))  # ApiVersions 0..4


def test_api_versions_v3_golden_keeps_header_v0():
    # KIP-511: the ApiVersions response header is never flexible, so a client that does
    # not yet know our versions can read it.
    assert encode_response(api_versions_response(), 0x01020304, 3) == (
        H("00000013")     # size 19
        + H("01020304")   # correlation_id, and no header tagged fields
        + H("0023")       # error_code 35
        + H("02")         # api_keys: compact array, length + 1
        + H("0012" "0000" "0004" "00")  # ApiVersions 0..4, entry tagged fields
        + H("00000000")   # throttle_time_ms
        + H("00"))        # tagged fields


def test_produce_v9_golden():
    assert encode_response(produce_response(), 7, 9) == (
        H("00000030")            # size 48
        + H("00000007")          # correlation_id
        + H("00")                # response header v1 tagged fields
        + H("02")                # responses: compact array of 1
        + H("02") + b"x"         # name: compact string "x"
        + H("02")                # partition_responses: compact array of 1
        + H("00000000")          # index 0
        + H("0000")              # error_code 0
        + H("0000000000000005")  # base_offset 5
        + H("ffffffffffffffff")  # log_append_time_ms -1
        + H("0000000000000000")  # log_start_offset 0
        + H("01")                # record_errors: empty compact array
        + H("00")                # error_message: null compact string
        + H("00") + H("00")      # partition and topic tagged fields
        + H("00000000")          # throttle_time_ms
        + H("00"))               # tagged fields


def test_produce_v3_golden():
    assert encode_response(produce_response(), 7, 3) == (
        H("00000029")            # size 41
        + H("00000007")          # correlation_id
        + H("00000001")          # responses: int32 array of 1
        + H("0001") + b"x"       # name
        + H("00000001")          # partition_responses: 1
        + H("00000000" "0000")   # index 0, error_code 0
        + H("0000000000000005")  # base_offset 5
        + H("ffffffffffffffff")  # log_append_time_ms -1 (v2+); log_start_offset only from v5
        + H("00000000"))         # throttle_time_ms


def metadata_response() -> MetadataResponse:
    M = MetadataResponse
    return M(throttle_time_ms=0, cluster_id="c", controller_id=1,
             brokers=[M.MetadataResponseBroker(node_id=1, host="127.0.0.1", port=9092, rack=None)],
             topics=[M.MetadataResponseTopic(error_code=0, name="t", is_internal=False, partitions=[
                 M.MetadataResponseTopic.MetadataResponsePartition(
                     error_code=0, partition_index=0, leader_id=1, leader_epoch=0, replica_nodes=[1],
                     isr_nodes=[1], offline_replicas=[])])])


FACTORIES = [
    # error 0: the library decodes any ApiVersions answer with an error as v0 (KIP-511)
    (lambda: api_versions_response(0), ApiVersionsResponse, range(0, 5)),
    (produce_response, ProduceResponse, range(3, 13)),
    (metadata_response, MetadataResponse, range(0, 13)),
    (lambda: InitProducerIdResponse(throttle_time_ms=0, error_code=0, producer_id=1000, producer_epoch=2),
     InitProducerIdResponse, range(0, 6)),
]


@pytest.mark.parametrize("factory,cls,versions", FACTORIES, ids=lambda x: getattr(x, "__name__", ""))
def test_responses_are_byte_identical_to_the_library_body_encoding(factory, cls, versions):
    for version in versions:
        framed = encode_response(factory(), 12345, version)
        (size,) = struct.unpack_from(">i", framed, 0)
        assert size == len(framed) - 4
        assert framed[4:8] == struct.pack(">i", 12345)
        # ApiVersions keeps header v0; other flexible responses add an empty tag section.
        flexible_header = cls is not ApiVersionsResponse and cls.flexible_version_q(version)
        body_start = 9 if flexible_header else 8
        if flexible_header:
            assert framed[8:9] == b"\x00"
        assert framed[body_start:] == bytes(factory().encode(version=version)), f"v{version}"
        decoded = cls.decode(framed[4:], version=version, header=True)
        assert decoded.header.correlation_id == 12345


def test_frame_bodies_stay_valid_while_more_data_arrives():
    codec = ServerCodec(max_frame_bytes=1024)
    for byte in PRODUCE_V3_FRAME:  # one byte at a time: the frame spans 37 chunks
        codec.receive_data(bytes([byte]))
    first = codec.next_frame()
    codec.receive_data(API_VERSIONS_V3_FRAME + PRODUCE_V3_FRAME)  # one chunk, two frames
    second, third = codec.next_frame(), codec.next_frame()
    assert codec.next_frame() is NEED_DATA
    assert bytes(first.body) == bytes(third.body) == H("ffff" "ffff" "00002710" "00000000")
    assert bytes(second.body) == H("03") + b"ab" + H("02") + b"1" + H("00")
