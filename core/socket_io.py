"""Reads and writes on the hot path's sockets, without a trip through trio's scheduler when
the socket is ready.

trio's socket methods yield to the scheduler after every call that succeeds at once (a
checkpoint, so a busy connection cannot starve the others) and wrap each call in a context
manager. The proxy makes four such calls per produce request (the client's request in, the
request on to the leader, the leader's answer in, the answer out): profiled, a tenth of its
CPU per request. These functions try the non-blocking call first and wait for readiness only
when the socket has nothing (or no room); the callers' loops yield when they wait (for
bytes, for an answer, or, in the proxy's reader, for room among its
max_in_flight_per_connection requests), so no connection keeps the loop for more than that
many requests. Streams other than plain TCP (TLS) go through trio's own methods.
"""

from __future__ import annotations

import os
import socket

import trio

IOV_BATCH = 512  # buffers per writev call; Linux refuses more than IOV_MAX (1024)
# TCP_NOTSENT_LOWAT of 0 means "the system's default" (net.ipv4.tcp_notsent_lowat: no limit
# unless an administrator set one).
SYSTEM_NOTSENT_LOWAT = 0


def take_whole_writes(stream: trio.SocketStream) -> None:
    """Let the kernel take a whole request per write on this connection.

    trio sets TCP_NOTSENT_LOWAT to 16 KiB on every SocketStream (a latency choice for
    interactive streams): a non-blocking write then stops once 16 KiB wait unsent, so
    forwarding a 1 MB produce request took ~8 writev calls and 2-3 waits in the event loop
    (strace of a saturated proxy on the local route). A proxy forwards whole requests, so it
    hands the option back to the system's default; memory stays bounded by the socket's send
    buffer (net.ipv4.tcp_wmem). Platforms without the option are left alone.
    """
    option = getattr(socket, "TCP_NOTSENT_LOWAT", None)
    if option is None:
        return
    try:
        stream.setsockopt(socket.IPPROTO_TCP, option, SYSTEM_NOTSENT_LOWAT)
    except OSError:  # a closed or foreign socket: its writes are just smaller
        pass


def _descriptor(sock: trio.socket.SocketType) -> int:
    fd = sock.fileno()
    if fd < 0:
        raise trio.ClosedResourceError("the socket is closed")
    return fd


async def send_buffers(stream: trio.abc.Stream, parts: list[bytes | memoryview]) -> None:
    """Write `parts` in order, as one byte stream.

    On a plain TCP stream this is a vectored write on the socket's descriptor, so large
    record sets are never joined into a new buffer. Other streams (TLS) get one joined
    send_all. The caller must be the stream's only writer. Raises what the stream raises
    (OSError, trio.BrokenResourceError, trio.ClosedResourceError).
    """
    if not isinstance(stream, trio.SocketStream):
        await stream.send_all(b"".join(parts))
        return
    sock = stream.socket
    views = [memoryview(p).cast("B") for p in parts if len(p)]
    i = 0
    while i < len(views):
        try:
            sent = os.writev(_descriptor(sock), views[i : i + IOV_BATCH])
        except BlockingIOError:
            await trio.lowlevel.wait_writable(sock)
            continue
        while sent:  # a partial write: skip what went out, resume inside the first unsent buffer
            n = len(views[i])
            if sent >= n:
                sent -= n
                i += 1
            else:
                views[i] = views[i][sent:]
                sent = 0


async def receive_some(stream: trio.abc.Stream, max_bytes: int, *, wait_first: bool = False) -> bytes | bytearray:
    """Up to `max_bytes` from the stream (b"": the peer closed), as stream.receive_some.
    `wait_first`: the caller has just found the socket empty, so wait before reading. The
    caller must be the stream's only reader."""
    if not isinstance(stream, trio.SocketStream):
        return await stream.receive_some(max_bytes)
    sock = stream.socket
    if wait_first:
        await trio.lowlevel.wait_readable(sock)
    while True:
        try:
            return os.read(_descriptor(sock), max_bytes)
        except BlockingIOError:
            await trio.lowlevel.wait_readable(sock)


async def receive_into(sock: trio.socket.SocketType, buffer: memoryview, *, wait_first: bool = False) -> int:
    """Read into `buffer` what the socket has (at least one byte; 0: the peer closed),
    as sock.recv_into. `wait_first` as for receive_some. The caller must be the socket's
    only reader."""
    if wait_first:
        await trio.lowlevel.wait_readable(sock)
    while True:
        try:
            return os.readv(_descriptor(sock), [buffer])
        except BlockingIOError:
            await trio.lowlevel.wait_readable(sock)
