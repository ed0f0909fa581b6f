"""Property tests of the sans-IO codec: arbitrary bytes, arbitrary split points.

Whatever a peer sends, the codec either yields frames or raises ProtocolError (of which
FrameTooLarge is one) or UnsupportedRequest, never anything else, and never buffers more
than one frame's worth. Imports nothing of the proxy but kafka_protocol.kafka_codec.
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest
from kafka.protocol.producer import ProduceRequest
from kafka.protocol.producer.transaction import InitProducerIdRequest

from kafka_protocol.kafka_codec import NEED_DATA, ProtocolError, ServerCodec, UnsupportedRequest, decode_request

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


# --- receiving large frames into their own buffer (frame_buffer / received_into) ---------

def _large_produce(records_bytes: int, version: int) -> bytes:
    batch = bytes(i % 251 for i in range(records_bytes))  # opaque to the codec
    return _encoded(ProduceRequest(transactional_id=None, acks=-1, timeout_ms=1000, topic_data=[
        ProduceRequest.TopicProduceData(name="big", partition_data=[
            ProduceRequest.TopicProduceData.PartitionProduceData(index=3, records=batch)])]), version)


LARGE = [_large_produce(n, v) for n, v in ((70_000, 9), (200_000, 3), (1_100_000, 12))]
SMALL = VALID[:4]


def drive_like_the_server(stream: bytes, reads: list[int]) -> list[tuple[int, bytes]]:
    """Feed `stream` the way the proxy's reader does: into frame_buffer() when the codec
    offers one, as received chunks otherwise; each read takes at most the next size in
    `reads` (cycled). Returns (api_key, body bytes) per frame."""
    codec = ServerCodec(4 * 1024 * 1024)
    frames, pos, i = [], 0, 0
    while pos < len(stream):
        want = max(1, reads[i % len(reads)])
        i += 1
        view = codec.frame_buffer()
        if view is not None:
            n = min(want, len(view), len(stream) - pos)
            view[:n] = stream[pos : pos + n]
            view.release()  # the buffer may grow on the next frame_buffer(), as the proxy's reader lets it
            codec.received_into(n)
        else:
            n = min(want, len(stream) - pos)
            codec.receive_data(stream[pos : pos + n])
        pos += n
        while (frame := codec.next_frame()) is not NEED_DATA:
            frames.append((frame.api_key, bytes(frame.body)))
    assert codec.buffered_bytes == 0
    return frames


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(indices=st.lists(st.integers(0, len(LARGE) + len(SMALL) - 1), min_size=1, max_size=5),
       # Reads of any size, one of them at least 4 KiB: a stream of 1-byte reads only covers
       # nothing more and took a million steps per megabyte (half a minute of CPU per run).
       reads=st.tuples(st.integers(4096, 300_000), st.lists(st.integers(1, 300_000), max_size=5)).map(
           lambda first_and_rest: [first_and_rest[0], *first_and_rest[1]]))
def test_large_frames_received_in_place_equal_the_chunked_path(indices, reads):
    requests = [(LARGE + SMALL)[i] for i in indices]
    got = drive_like_the_server(b"".join(requests), reads)
    # One frame per request, in order; each body is its request's bytes after the size prefix
    # and the request header (client_id "fuzz": under 40 bytes), byte for byte.
    assert len(got) == len(requests)
    for (key, body), request in zip(got, requests, strict=True):
        assert key == 0  # all Produce
        assert request.endswith(body) and len(request) - 4 - 40 < len(body) < len(request) - 4


def test_frame_buffer_is_offered_only_for_large_frames_and_bounded():
    from kafka_protocol.kafka_codec import DIRECT_RECEIVE_MAX_BYTES, FrameTooLarge

    codec = ServerCodec(64 * 1024 * 1024)
    codec.receive_data(SMALL[0][:10])
    assert codec.frame_buffer() is None  # a small frame arrives in chunks
    codec = ServerCodec(64 * 1024 * 1024)
    codec.receive_data(LARGE[0][:1000])
    view = codec.frame_buffer()
    assert view is not None and len(view) == len(LARGE[0]) - 1000  # exactly the rest of the frame (< 256 KiB)
    view.release()
    codec = ServerCodec(64 * 1024 * 1024)
    codec.receive_data(struct.pack(">i", DIRECT_RECEIVE_MAX_BYTES) + b"\x00" * 100)
    assert codec.frame_buffer() is None  # no memory ahead of the bytes for a huge announced frame
    codec = ServerCodec(1024)
    codec.receive_data(LARGE[0][:100])
    try:
        codec.frame_buffer()
    except FrameTooLarge:
        pass
    else:
        raise AssertionError("a frame over max_frame_bytes must be refused before any buffer is made")


def test_frame_buffer_grows_with_the_bytes_received_not_with_the_announced_size():
    from kafka_protocol.kafka_codec import FRAME_AHEAD_BYTES

    codec = ServerCodec(64 * 1024 * 1024)
    announced = 16 * 1024 * 1024 - 4
    codec.receive_data(struct.pack(">i", announced) + b"\x00" * 16)  # 20 bytes announcing 16 MiB
    view = codec.frame_buffer()
    assert view is not None and len(view) == FRAME_AHEAD_BYTES  # 256 KiB of room, not 16 MiB
    assert codec.held_bytes == 20 + FRAME_AHEAD_BYTES
    view[:FRAME_AHEAD_BYTES] = b"\x01" * FRAME_AHEAD_BYTES
    view.release()
    codec.received_into(FRAME_AHEAD_BYTES)
    view = codec.frame_buffer()  # full: it doubles (20 + 256 KiB received -> as much again of room)
    assert len(view) == 20 + FRAME_AHEAD_BYTES
    assert codec.held_bytes == 2 * (20 + FRAME_AHEAD_BYTES)
    view.release()
    assert codec.next_frame() is NEED_DATA


def _receive_whole(codec: ServerCodec, frame: bytes, first: int) -> list[int]:
    """Feed `frame` as the proxy does (a first chunk of `first` bytes, then into frame_buffer());
    return the length of each view offered."""
    codec.receive_data(frame[:first])
    got, offered = first, []
    while got < len(frame):
        view = codec.frame_buffer()
        assert view is not None
        offered.append(len(view))
        n = min(len(view), len(frame) - got)
        view[:n] = frame[got : got + n]
        view.release()
        codec.received_into(n)
        got += n
    return offered


def test_a_stream_that_completed_a_frame_gets_the_next_as_large_at_once():
    # LARGE[2] is 1,100,000 bytes of records: its first reception grows (256 KiB of room after
    # a 1,000-byte chunk, then doubling); once completed, a frame no larger gets all its room in
    # one buffer (no copies to grow); a larger one grows again from 256 KiB.
    codec = ServerCodec(64 * 1024 * 1024)
    frame = LARGE[2]
    first = _receive_whole(codec, frame, 1000)
    assert first[0] == 256 * 1024 and len(first) > 1
    assert frame.endswith(codec.next_frame().body.tobytes())
    again = _receive_whole(codec, frame, 1000)
    assert again == [len(frame) - 1000]
    assert codec.held_bytes == len(frame)
    assert codec.next_frame() is not NEED_DATA
    bigger = struct.pack(">i", len(frame) + 100_000 - 4) + frame[4:] + b"\x00" * 100_000
    assert _receive_whole(codec, bigger, 1000)[0] == 256 * 1024
    assert codec.next_frame() is not NEED_DATA


def test_an_earned_whole_buffer_still_stays_within_the_callers_budget():
    codec = ServerCodec(64 * 1024 * 1024)
    frame = LARGE[1]
    _receive_whole(codec, frame, 1000)
    assert codec.next_frame() is not NEED_DATA
    codec.receive_data(frame[:1000])
    view = codec.frame_buffer(max_grow_bytes=5000)  # the budget has no room for the whole frame
    assert view is not None and len(view) == 5000
    view.release()


def test_frame_buffer_growth_stays_within_the_callers_budget():
    codec = ServerCodec(64 * 1024 * 1024)
    codec.receive_data(LARGE[2][:100])
    view = codec.frame_buffer(max_grow_bytes=1000)
    assert len(view) == 1000 and codec.held_bytes == 1100
    view.release()
    assert codec.frame_buffer(max_grow_bytes=0) is not None  # the room granted before is still there
    codec.received_into(0)
    # Bytes that arrive as a chunk while the frame buffer is full are moved into it.
    codec2 = ServerCodec(64 * 1024 * 1024)
    codec2.receive_data(LARGE[2][:100])
    codec2.frame_buffer(max_grow_bytes=0)  # no room granted: nothing to receive into
    codec2.receive_data(LARGE[2][100:])
    frame = codec2.next_frame()
    assert frame is not NEED_DATA and LARGE[2].endswith(bytes(frame.body))
    assert codec2.buffered_bytes == 0


MAPPED = _large_produce(3_000_000, 9)  # over MAPPED_FRAME_MIN_BYTES (2 MiB): a mapping of its own


@pytest.mark.parametrize("reads", [[1, 70_000, 300_000], [1_000_000], [4096, 3]])
def test_a_frame_over_two_mib_received_in_place_equals_the_chunked_path(reads):
    stream = SMALL[0] + MAPPED + LARGE[2] + MAPPED
    got = drive_like_the_server(stream, reads)
    # Four frames in order, each body its request's bytes after the size prefix and the
    # request header (client_id "fuzz": under 40 bytes), byte for byte.
    assert len(got) == 4
    for (_key, body), request in zip(got, [SMALL[0], MAPPED, LARGE[2], MAPPED], strict=True):
        assert request.endswith(body) and len(request) - 4 - 40 < len(body) < len(request) - 4


def _rss_kib() -> int:
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS in /proc/self/status")


def test_a_large_frame_costs_the_bytes_that_arrived_and_gives_them_back_when_dropped():
    # 20 bytes announcing 16 MiB, then 8 MiB of it received in 256 KiB reads: the process
    # grows by about 8 MiB (not 16, and no copies left behind by growing), and by about
    # nothing once the codec holding it is gone.
    # A large buffer freed first, as any earlier large request leaves behind: glibc then
    # serves later large allocations from its heap, which it keeps once they are freed.
    earlier = bytearray(16 * 1024 * 1024)
    del earlier
    codec = ServerCodec(64 * 1024 * 1024)
    before = _rss_kib()
    codec.receive_data(struct.pack(">i", 16 * 1024 * 1024 - 4) + b"\x00" * 16)
    sent = 0
    chunk = b"\x07" * (256 * 1024)
    while sent < 8 * 1024 * 1024:
        view = codec.frame_buffer()
        n = min(len(view), len(chunk), 8 * 1024 * 1024 - sent)
        view[:n] = chunk[:n]
        view.release()
        codec.received_into(n)
        sent += n
    during = _rss_kib()
    assert 8 * 1024 - 512 < during - before < 8 * 1024 + 2 * 1024, (before, during)
    del codec, view
    after = _rss_kib()
    assert after - before < 1024, (before, during, after)


def test_held_bytes_counts_chunks_with_their_overhead_and_drops_with_frames():
    from kafka_protocol.kafka_codec import CHUNK_OVERHEAD_BYTES

    codec = ServerCodec(1024 * 1024)
    request = SMALL[0]
    for byte in request:  # a trickle: one byte per read
        codec.receive_data(bytes([byte]))
    assert codec.held_bytes == len(request) * (1 + CHUNK_OVERHEAD_BYTES)
    assert codec.next_frame() is not NEED_DATA
    assert codec.held_bytes == 0 and codec.buffered_bytes == 0
