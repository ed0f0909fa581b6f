"""Property tests of the sans-IO codec: arbitrary bytes, arbitrary split points.

Whatever a peer sends, the codec either yields frames or raises ProtocolError (of which
FrameTooLarge is one) or UnsupportedRequest, never anything else, and never buffers more
than one frame's worth. Imports nothing of the proxy but proxy.kafka_codec.
"""

from __future__ import annotations

import struct

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest
from kafka.protocol.producer import ProduceRequest
from kafka.protocol.producer.transaction import InitProducerIdRequest

from proxy.kafka_codec import NEED_DATA, ProtocolError, ServerCodec, UnsupportedRequest, decode_request

MAX_FRAME_BYTES = 4096
SERVED = {0: 12, 3: 12, 18: 4, 22: 5}  # what the proxy decodes: api_key -> max version
FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _encoded(request, version: int) -> bytes:
    request.with_header(correlation_id=1, client_id="fuzz")
    return bytes(request.encode(version=version, header=True, framed=True))


def _valid_requests() -> list[bytes]:
    batch = bytes(range(80))  # opaque to the codec
    produce = [_encoded(ProduceRequest(transactional_id=None, acks=-1, timeout_ms=1000, topic_data=[
        ProduceRequest.TopicProduceData(name="t", partition_data=[
            ProduceRequest.TopicProduceData.PartitionProduceData(index=0, records=batch)])]), v)
        for v in (3, 8, 9, 12)]
    metadata = [_encoded(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="t")],
                                         allow_auto_topic_creation=False), v) for v in (0, 4, 9, 12)]
    versions = [_encoded(ApiVersionsRequest(client_software_name="x", client_software_version="1"), v)
                for v in (0, 3)]
    init = [_encoded(InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=1,
                                           producer_id=-1, producer_epoch=-1), v) for v in (0, 2, 4)]
    return produce + metadata + versions + init


VALID = _valid_requests()


@st.composite
def mutated_stream(draw) -> bytes:
    """Valid requests with bytes flipped, truncated or inserted; or raw noise with a sane size prefix."""
    parts = []
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["valid", "mutated", "noise", "random"]))
        if kind == "random":
            parts.append(draw(st.binary(max_size=200)))
            continue
        if kind == "noise":
            body = draw(st.binary(min_size=0, max_size=300))
            parts.append(struct.pack(">i", len(body)) + body)
            continue
        data = bytearray(draw(st.sampled_from(VALID)))
        if kind == "mutated":
            for _ in range(draw(st.integers(1, 6))):
                pos = draw(st.integers(4, len(data) - 1))
                data[pos] = draw(st.integers(0, 255))
        parts.append(bytes(data))
    return b"".join(parts)


def drive(stream: bytes, cuts: list[int]) -> list:
    """Feed `stream` split at `cuts`; decode every frame. Returns the decoded requests."""
    codec = ServerCodec(MAX_FRAME_BYTES)
    decoded = []
    bounds = sorted({c % (len(stream) + 1) for c in cuts} | {0, len(stream)})
    for start, end in zip(bounds, bounds[1:], strict=False):
        codec.receive_data(stream[start:end])
        while (frame := codec.next_frame()) is not NEED_DATA:
            try:
                decoded.append(decode_request(frame, SERVED))
            except UnsupportedRequest:
                pass  # well framed, not served: the server closes the connection
        # Bounded: at most one incomplete frame (never more than its declared size) is held.
        assert codec.buffered_bytes < 4 + MAX_FRAME_BYTES
    return decoded


@FUZZ
@given(stream=mutated_stream(), cuts=st.lists(st.integers(0, 10_000), max_size=8))
def test_codec_raises_only_protocol_errors(stream, cuts):
    try:
        drive(stream, cuts)
    except ProtocolError:
        pass  # includes FrameTooLarge: the peer's fault, the connection closes


@FUZZ
@given(stream=st.binary(max_size=2000), cuts=st.lists(st.integers(0, 10_000), max_size=8))
def test_codec_on_arbitrary_bytes(stream, cuts):
    try:
        drive(stream, cuts)
    except ProtocolError:
        pass


@FUZZ
@given(indices=st.lists(st.integers(0, len(VALID) - 1), min_size=1, max_size=6),
       cuts=st.lists(st.integers(0, 10_000), max_size=8))
def test_valid_requests_decode_whatever_the_split(indices, cuts):
    stream = b"".join(VALID[i] for i in indices)
    assert len(drive(stream, cuts)) == len(indices)
