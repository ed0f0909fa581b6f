"""UpstreamConnection.forward_produce over an in-memory stream: the client's body goes out
after this connection's header, and its callback hears exactly one outcome - the answer
frame, UpstreamTimeout at its deadline (virtual clock), or the connection's failure."""

from __future__ import annotations

import struct

import pytest
import trio
import trio.testing

from kafka_upstream.errors import UpstreamError, UpstreamTimeout
from kafka_upstream.upstream import UpstreamConnection

BODY = memoryview(b"-the client's Produce body-")[1:-1]


def request_bytes(correlation_id: int) -> bytes:
    # size, api_key 0, api_version 9, correlation_id, client_id "azsidecar" (int16 length 9), no tags, body
    head = struct.pack(">hhih", 0, 9, correlation_id, 9) + b"azsidecar" + b"\x00"
    return struct.pack(">i", len(head) + len(BODY)) + head + bytes(BODY)


def answer_frame(correlation_id: int) -> bytes:
    return struct.pack(">ii", 7, correlation_id) + b"abc"  # size 7: correlation id and 3 body bytes


async def receive_exactly(stream, n: int) -> bytes:
    got = bytearray()
    while len(got) < n:
        got += await stream.receive_some(n - len(got))
    return bytes(got)


@pytest.mark.trio
async def test_each_forwarded_request_hears_exactly_one_outcome(autojump_clock):
    ours, broker = trio.testing.memory_stream_pair()
    conn = UpstreamConnection(ours, 1, "b1:9092", "azsidecar")
    heard: list[bytes | UpstreamError] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(conn.run_reader)
        nursery.start_soon(conn.expire_late_answers)

        await conn.forward_produce(9, BODY, 30.0, heard.append)
        assert await receive_exactly(broker, len(request_bytes(1))) == request_bytes(1)
        await broker.send_all(answer_frame(1))
        await trio.testing.wait_all_tasks_blocked()
        assert heard == [struct.pack(">i", 1) + b"abc"]  # the frame, size prefix removed

        await conn.forward_produce(9, BODY, 30.0, heard.append)  # never answered in time
        assert await receive_exactly(broker, len(request_bytes(2))) == request_bytes(2)
        await trio.sleep(29.9)
        assert len(heard) == 1
        await trio.sleep(0.2)
        assert len(heard) == 2 and isinstance(heard[1], UpstreamTimeout)
        await broker.send_all(answer_frame(2))  # too late: dropped (logged), not heard twice
        await trio.testing.wait_all_tasks_blocked()
        assert len(heard) == 2

        await conn.forward_produce(9, BODY, 30.0, heard.append)
        await broker.aclose()  # the broker goes away with the request unanswered
        await trio.testing.wait_all_tasks_blocked()
        assert len(heard) == 3 and isinstance(heard[2], UpstreamError) and not isinstance(heard[2], UpstreamTimeout)

        await conn.forward_produce(9, BODY, 30.0, heard.append)  # on a closed connection: heard at once
        assert len(heard) == 4 and isinstance(heard[3], UpstreamError)
        with trio.fail_after(1):
            await conn.wait_closed()
    # both tasks ended with the connection: the nursery closed without a cancel
