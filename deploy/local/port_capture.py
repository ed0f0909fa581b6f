"""Frames the zones put onto the inter-zone bridge, read with AF_PACKET sockets (root only).

Strategy: one raw socket per bridge port (the root end of a zone's veth), one reader
thread that hands every frame arriving from a zone to a FrameTally (deploy/local/frame_tally.py).
Only frames the zone sent are kept (not PACKET_OUTGOING), so each crossing frame is counted
once, exactly as the bridge-port rx counters (CrossZoneMeter) count it; `dropped` says
how many the kernel could not queue for this reader (then the tally undercounts and its
total no longer equals the meter's).
"""

from __future__ import annotations

import select
import socket
import struct
import threading
from collections.abc import Collection, Sequence

from deploy.local.frame_tally import FrameTally

ETH_P_ALL = 0x0003
PACKET_OUTGOING = 4  # linux/if_packet.h: a frame this host sent on the interface
SOL_PACKET = 263
SO_RCVBUFFORCE = 33  # asm-generic/socket.h: SO_RCVBUF past net.core.rmem_max (CAP_NET_ADMIN)
PACKET_STATISTICS = 6
RECEIVE_BUFFER_BYTES = 32 * 1024 * 1024  # a few seconds of the demo's traffic if the reader stalls
MAX_FRAME_BYTES = 65_536 + 14  # an offloaded (GSO) packet and its Ethernet header
POLL_S = 0.05  # how often the reader looks at the stop flag when no frame comes


class PortCapture:
    """`start()` opens the sockets and the reader; `stop()` drains them and returns the tally.

    Raises PermissionError without root, OSError when a port does not exist.
    """

    def __init__(self, ports: Sequence[str], server_ports: Collection[int]) -> None:
        self._ports = tuple(ports)
        self.tally = FrameTally(server_ports)
        self.dropped = 0
        self._sockets: list[socket.socket] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        for port in self._ports:
            # Opened for no protocol, then bound to the port for all of them: a socket opened for
            # ETH_P_ALL hears every interface of the host until its bind, and on a busy host
            # loopback frames reached the tally (or were dropped by the buffer's default size).
            sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
            # SO_RCVBUF alone is capped at net.core.rmem_max (208 KiB on many hosts: ~90
            # frames): a reader stalled for a moment on a loaded host then loses frames.
            sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, RECEIVE_BUFFER_BYTES)
            sock.bind((port, ETH_P_ALL))  # Python's address takes host order
            sock.setblocking(False)
            self._sockets.append(sock)
        self._thread = threading.Thread(target=self._read, name="port-capture", daemon=True)
        self._thread.start()

    def receive_buffer_bytes(self) -> int:
        """The smallest receive buffer of the open sockets, as the kernel reports it (twice what was set)."""
        return min(sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF) for sock in self._sockets)

    def _read(self) -> None:
        while True:
            ready, _, _ = select.select(self._sockets, [], [], POLL_S)
            if not ready and self._stop.is_set():
                return
            for sock in ready:
                self._drain(sock)

    def _drain(self, sock: socket.socket) -> None:
        while True:
            try:
                frame, address = sock.recvfrom(MAX_FRAME_BYTES)
            except BlockingIOError:
                return
            if address[2] != PACKET_OUTGOING:
                self.tally.add(frame)

    def stop(self) -> FrameTally:
        """Stop reading once the queued frames are in the tally; close the sockets."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30.0)
        for sock in self._sockets:
            _packets, drops = struct.unpack("II", sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8))
            self.dropped += drops
            sock.close()
        self._sockets = []
        return self.tally
