"""The client listener's sockets: one per address of listen_host, shared by worker processes.

With `proxy.workers` > 1 every worker binds the same port with SO_REUSEPORT and the kernel
spreads new connections over the workers' listening sockets (Linux hashes each connection's
addresses, so a connection stays with the worker that accepted it). trio's
`open_tcp_listeners` sets SO_REUSEADDR only, hence this small replacement.
"""

from __future__ import annotations

import errno
import socket as stdlib_socket

import trio

BACKLOG = 1024  # pending connections per worker, beyond which the kernel refuses


async def open_listeners(host: str, port: int, *, reuse_port: bool) -> list[trio.SocketListener]:
    """Listening sockets on every address `host` resolves to. Raises OSError if none binds."""
    if not reuse_port:
        return await trio.open_tcp_listeners(port, host=host)
    if not hasattr(stdlib_socket, "SO_REUSEPORT"):
        raise OSError(errno.ENOPROTOOPT, "proxy.workers > 1 needs SO_REUSEPORT, which this platform lacks")
    infos = await trio.socket.getaddrinfo(host, port, type=stdlib_socket.SOCK_STREAM, flags=stdlib_socket.AI_PASSIVE)
    listeners: list[trio.SocketListener] = []
    try:
        for family, type_, proto, _, sockaddr in infos:
            sock = trio.socket.socket(family, type_, proto)
            try:
                sock.setsockopt(stdlib_socket.SOL_SOCKET, stdlib_socket.SO_REUSEADDR, 1)
                sock.setsockopt(stdlib_socket.SOL_SOCKET, stdlib_socket.SO_REUSEPORT, 1)
                if family == stdlib_socket.AF_INET6:
                    sock.setsockopt(stdlib_socket.IPPROTO_IPV6, stdlib_socket.IPV6_V6ONLY, 1)
                await sock.bind(sockaddr)
                sock.listen(BACKLOG)
            except OSError:
                sock.close()
                raise
            listeners.append(trio.SocketListener(sock))
    except OSError:
        for listener in listeners:
            await listener.aclose()
        raise
    return listeners


def reserve_port(host: str, port: int) -> tuple[stdlib_socket.socket, int]:
    """A bound, not listening SO_REUSEPORT socket: holds `port` (0 = a free one) for the workers
    of one supervisor, which bind it too; it never accepts (only listening sockets get
    connections). Returns the socket, to close when the workers are gone, and the port."""
    infos = stdlib_socket.getaddrinfo(host, port, type=stdlib_socket.SOCK_STREAM, flags=stdlib_socket.AI_PASSIVE)
    family, type_, proto, _, sockaddr = infos[0]
    sock = stdlib_socket.socket(family, type_, proto)
    try:
        sock.setsockopt(stdlib_socket.SOL_SOCKET, stdlib_socket.SO_REUSEADDR, 1)
        sock.setsockopt(stdlib_socket.SOL_SOCKET, stdlib_socket.SO_REUSEPORT, 1)
        sock.bind(sockaddr)
    except OSError:
        sock.close()
        raise
    return sock, sock.getsockname()[1]
