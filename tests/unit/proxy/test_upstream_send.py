"""send_buffers: a vectored send writes exactly the concatenation of its buffers, in order."""

from __future__ import annotations

import socket

import pytest
import trio
import trio.testing

from core.socket_io import IOV_BATCH, send_buffers


def _parts() -> list[bytes | memoryview]:
    big = bytes(range(256)) * 4096  # 1 MiB
    parts: list[bytes | memoryview] = [b"\x00\x00\x10\x00", b"", memoryview(big)[7:300_007], b"x"]
    parts += [bytes([i % 251]) * (i % 37) for i in range(3 * IOV_BATCH)]  # more buffers than one sendmsg takes
    parts.append(memoryview(big)[-100_000:])
    return parts


async def _receive_all(stream: trio.abc.ReceiveStream, n: int) -> bytes:
    got = bytearray()
    while len(got) < n:
        chunk = await stream.receive_some(65536)
        assert chunk, "stream ended early"
        got += chunk
    return bytes(got)


async def _send_and_receive(sender, receiver, parts, n: int) -> bytes:
    """send_buffers(parts) on sender while a reader takes n bytes from receiver."""
    result: list[bytes] = []
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            async def read() -> None:
                result.append(await _receive_all(receiver, n))
            nursery.start_soon(read)
            await send_buffers(sender, parts)
    return result[0]


@pytest.mark.trio
async def test_vectored_send_over_a_socket_survives_partial_sends():
    parts = _parts()
    expected = b"".join(bytes(p) for p in parts)
    a, b = trio.socket.socketpair()
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)  # forces many partial sendmsg results
    sender, receiver = trio.SocketStream(a), trio.SocketStream(b)
    assert await _send_and_receive(sender, receiver, parts, len(expected)) == expected
    await sender.aclose()
    await receiver.aclose()


@pytest.mark.trio
async def test_other_streams_get_one_joined_send():
    parts = _parts()
    expected = b"".join(bytes(p) for p in parts)
    sender, receiver = trio.testing.memory_stream_pair()
    assert await _send_and_receive(sender, receiver, parts, len(expected)) == expected


@pytest.mark.trio
async def test_a_closed_peer_raises_instead_of_hanging():
    a, b = trio.socket.socketpair()
    b.close()
    sender = trio.SocketStream(a)
    with trio.fail_after(10):
        try:
            await send_buffers(sender, [b"x" * 1_000_000] * 4)
        except OSError:
            pass
        else:
            raise AssertionError("a send to a closed peer must fail")
    await sender.aclose()

