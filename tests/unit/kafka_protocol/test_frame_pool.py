"""Large request buffers used again (kafka_protocol/frame_pool.py): never while anything
refers to them, byte for byte what was received when they are, and bounded in number."""

from __future__ import annotations

import struct

from kafka_protocol.frame_pool import MAX_BUFFER_BYTES, MAX_BUFFERS, FramePool
from kafka_protocol.kafka_codec import NEED_DATA, RequestFrame, ServerCodec

MAX_FRAME_BYTES = 64 * 1024 * 1024


def frame_of(fill: bytes, body_bytes: int, correlation_id: int) -> bytes:
    """A size-prefixed Produce v3 request frame whose body is `fill` repeated."""
    header = struct.pack(">hhih", 0, 3, correlation_id, -1)  # api_key, version, correlation id, null client id
    body = (fill * body_bytes)[:body_bytes]
    return struct.pack(">i", len(header) + body_bytes) + header + body


def receive(codec: ServerCodec, frame: bytes, first: int = 1000) -> RequestFrame:
    """Feed `frame` as the proxy does (a first chunk, then the rest into frame_buffer())."""
    codec.receive_data(frame[:first])
    got = first
    while got < len(frame):
        view = codec.frame_buffer()
        assert view is not None
        n = min(len(view), len(frame) - got)
        view[:n] = frame[got : got + n]
        view.release()
        codec.received_into(n)
        got += n
    received = codec.next_frame()
    assert received is not NEED_DATA
    return received


def test_a_buffer_is_used_again_only_once_its_frame_is_dropped():
    pool = FramePool()
    codec = ServerCodec(MAX_FRAME_BYTES, pool)
    a = receive(codec, frame_of(b"A", 900_000, 1))
    assert len(pool) == 1 and pool.reused == 0
    b = receive(codec, frame_of(b"B", 800_000, 2))  # `a` still refers to the first buffer
    assert pool.reused == 0
    assert a.body.tobytes() == b"A" * 900_000  # untouched by the second frame
    assert b.body.tobytes() == b"B" * 800_000
    del a
    c = receive(codec, frame_of(b"C", 700_000, 3))  # the first buffer is free now
    assert pool.reused == 1
    assert c.correlation_id == 3 and c.size == 10 + 700_000  # a 10-byte header
    assert c.body.tobytes() == b"C" * 700_000  # exactly its own bytes, none of the old frame's
    assert b.body.tobytes() == b"B" * 800_000


def test_a_slice_or_a_batch_view_of_the_frame_keeps_its_buffer_from_reuse():
    pool = FramePool()
    codec = ServerCodec(MAX_FRAME_BYTES, pool)
    a = receive(codec, frame_of(b"A", 900_000, 1))
    batch = a.body[100:200]  # what a routed batch keeps while its request is in flight
    del a
    b = receive(codec, frame_of(b"B", 900_000, 2))
    assert pool.reused == 0
    assert batch.tobytes() == b"A" * 100
    del batch, b
    receive(codec, frame_of(b"C", 900_000, 3))
    assert pool.reused == 1


def test_a_buffer_smaller_than_the_frame_is_not_taken():
    pool = FramePool()
    small = bytearray(500_000)
    pool.offer(small)
    del small
    assert pool.take(500_001) is None
    assert pool.take(500_000) is not None


def test_the_pool_keeps_the_last_buffers_offered_and_none_of_two_mib_or_more():
    pool = FramePool()
    kept = [bytearray(100_000 + i) for i in range(MAX_BUFFERS + 3)]
    for buf in kept:
        pool.offer(buf)
    pool.offer(bytearray(MAX_BUFFER_BYTES))
    assert len(pool) == MAX_BUFFERS
    oldest_kept = 100_000 + 3
    del kept
    assert len(pool.take(oldest_kept)) >= oldest_kept
    assert pool.take(100_000 + MAX_BUFFERS + 3) is None  # nothing that large was kept


def test_without_a_pool_every_frame_gets_a_buffer_of_its_own():
    codec = ServerCodec(MAX_FRAME_BYTES)
    a = receive(codec, frame_of(b"A", 900_000, 1))
    del a
    b = receive(codec, frame_of(b"B", 900_000, 2))
    assert b.body.tobytes() == b"B" * 900_000
