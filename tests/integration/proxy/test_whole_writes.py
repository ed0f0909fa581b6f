"""take_whole_writes on a real TCP connection: the limit trio puts on unsent bytes is
handed back to the system, so a forwarded request goes out in one write."""

from __future__ import annotations

import socket

import pytest
import trio

from core.socket_io import send_buffers, take_whole_writes


@pytest.mark.trio
@pytest.mark.skipif(not hasattr(socket, "TCP_NOTSENT_LOWAT"), reason="no TCP_NOTSENT_LOWAT here")
async def test_take_whole_writes_hands_the_unsent_limit_back_to_the_system():
    # trio limits what waits unsent to 16 KiB on its streams; a forwarded 1 MB request then
    # went out ~128 KiB per write. After take_whole_writes the option is 0: the system's
    # default (net.ipv4.tcp_notsent_lowat), unlimited unless an administrator set one.
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    with trio.fail_after(10):
        client = await trio.open_tcp_stream("127.0.0.1", port)
        server = await listeners[0].accept()
        try:
            assert client.getsockopt(socket.IPPROTO_TCP, socket.TCP_NOTSENT_LOWAT) == 16384  # trio's
            take_whole_writes(client)
            assert client.getsockopt(socket.IPPROTO_TCP, socket.TCP_NOTSENT_LOWAT) == 0
            await send_buffers(client, [b"still", b" works"])
            got = b""
            while len(got) < 11:
                got += await server.receive_some(64)
            assert got == b"still works"
        finally:
            await client.aclose()
            await server.aclose()
            await listeners[0].aclose()
